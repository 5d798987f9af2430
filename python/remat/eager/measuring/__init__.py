"""Measuring: what a layer or a block call saves for backward, its ops, and its time.

calls: one call, measured; ops: its ops one by one and SAC's modes on it; menu: the op-level
trade-off it offers; chain: a chain of layers, layer by layer; blocks: the block calls of one
model step, as a chain.
"""
