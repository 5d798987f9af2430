"""Planning: regions (and op-level options) for a measured profile under a byte budget.

planner: the C++ chain planner, with the 1F1B stage budget; tune: the candidate plans tuning
times; agree: one profile for every rank of a process group.
"""
