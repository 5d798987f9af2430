"""The measured peak of one training step, to check predictions against.

On CUDA: ``torch.cuda.max_memory_allocated`` over the step, minus what was allocated before it.
On CPU there is no allocator high-water mark, so the step runs under the profiler with
``profile_memory=True``: every allocation and free of the CPU allocator (including the buffers
inductor's generated code allocates without going through the dispatcher) is an event with a
signed byte count, and the peak is the highest running sum.
"""

from __future__ import annotations

from typing import Callable

import torch


def measured_peak(step: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Bytes allocated at the step's high-water mark beyond what was allocated when it began."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    if device.type != "cpu":
        raise ValueError(f"device: measured_peak supports cpu and cuda, got {device}")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    running = peak = 0
    for event in events:
        if event.device_type() != torch._C._autograd.DeviceType.CPU:
            continue
        running += event.nbytes()
        peak = max(peak, running)
    return peak
