"""Running: a chain through a plan's regions, a model's steps under auto_checkpoint, and the
entry points that measure, plan and run in one call.

execution: nested regions on a chain; buffers: module buffers across re-runs; tuning: timing
candidate plans; sequential: checkpoint_sequential, plan and run_plan; step, first_step,
block_calls, chain_mode and auto: auto_checkpoint's parts; measurement: remat.torch.measure.
"""
