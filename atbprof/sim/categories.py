"""The seed 000 table's rows: an op's category from the first part of its role (attn.*, ffn.* and moe.*, head.*).

Its own module so that `atbprof analyze` reads it without loading the run summary's models."""

CATEGORIES = {"attn": "attention", "ffn": "ffn", "moe": "ffn", "head": "other"}
"""moe.*: a MoE layer's router, experts and combine, in place of the dense FFN."""
