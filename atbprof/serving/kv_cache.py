"""The paged KV cache a serving engine gets: what device memory leaves after weights, activations and workspace.

vLLM sizes its cache the same way: it profiles a forward pass of max_num_batched_tokens tokens and gives the KV
blocks `gpu_memory_utilization x capacity - (weights + peak activations + workspace)`. Here the peak activations
and workspace are the memory model's (sim/memory.py) for a prefill of the token budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from atbprof.config.models import WorkloadSection
from atbprof.sim.memory import GB, kv_bytes_per_token
from atbprof.sim.simulate import Simulation


@dataclass(frozen=True)
class KvBudget:
    blocks: int
    block_size: int
    bytes_per_token: float
    cache_gb: float  # what the blocks hold
    usable_gb: float  # gpu_memory_utilization x capacity
    other_gb: float  # weights, activations, workspace, communication buffers


def kv_budget(sim: Simulation, w: WorkloadSection) -> KvBudget:
    m = sim.memory
    usable = m.capacity_gb * w.gpu_memory_utilization
    other = m.weights_gb + m.activations_gb + m.workspace_gb + m.communication_gb
    per_token = kv_bytes_per_token(sim.dims)
    blocks = max(0, math.floor((usable - other) * GB / (per_token * w.block_size)))
    return KvBudget(blocks, w.block_size, per_token, blocks * w.block_size * per_token / GB, usable, other)
