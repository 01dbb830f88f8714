"""What a simulation holds per stage and chunk: the phase models (a stage's step graph as arrays), the rank
classes' timelines of a chunk, and the run-wide dictionaries of the op table's encoded columns."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pyarrow as pa

from atbprof.device.collectives import CommGroups
from atbprof.device.kernels import KernelCosts
from atbprof.fusion import FusionResult
from atbprof.graph.nodes import Graph
from atbprof.parallel.plan import RankClass
from atbprof.sim.shapes import ShapeColumns
from atbprof.sim.steps import StepPlan


@dataclass
class PhaseModel:
    """One stage's step of one phase: its graph (one microbatch's pass) run `passes` times; the per-node arrays
    cover the whole step (the pass's nodes repeated per microbatch)."""

    phase: str
    graph: Graph
    fusion: FusionResult
    passes: int
    sig: np.ndarray
    reps: list
    shape_nodes: list  # the step's nodes (each microbatch's pass): what `shapes` is built from, when rows need it
    layer: np.ndarray
    role: np.ndarray
    name: np.ndarray
    op_type: np.ndarray
    stream: np.ndarray
    fused_from: pa.Array
    node_id: np.ndarray  # node of the pass graph
    microbatch: np.ndarray
    comm: np.ndarray  # bool per node: an HCCL task (not slowed by a straggler, launched as a collective)
    sync: np.ndarray  # bool per node: joins the tp group (an HCCL task or an MC2 kernel): ends with its slowest rank
    receive: np.ndarray  # bool per node: a pipeline Receive (ends when the previous stage's Send has)
    send: np.ndarray  # bool per node: a pipeline Send

    @cached_property
    def shapes(self) -> ShapeColumns:
        """Shape and dtype strings (built on first use: a summary-only run never needs them)."""
        return ShapeColumns(self.shape_nodes)

    @property
    def n_nodes(self) -> int:
        """Tasks of one step (every microbatch's pass)."""
        return len(self.sig)

    @property
    def pass_nodes(self) -> int:
        return len(self.graph.nodes)


@dataclass
class StageModel:
    stage: int
    phases: dict[str, PhaseModel]
    comm: CommGroups


@dataclass
class RankTimes:
    """One rank class's timeline of a chunk (int ns arrays are steps x nodes)."""

    cls: RankClass
    dur: np.ndarray  # as run: a collective that waited for the group's slowest rank lasts until it ended
    start: np.ndarray
    wait: np.ndarray
    lstart: np.ndarray | None


@dataclass
class TimedChunk:
    """A chunk of steps of one pipeline stage after the device model and the timeline of its rank classes."""

    plan: StepPlan
    chunk: StepPlan
    pm: PhaseModel
    values: np.ndarray
    costs: KernelCosts
    dur_f: np.ndarray  # modelled durations (steps x nodes) before any rank's slowdown
    disp: np.ndarray | None
    ranks: list[RankTimes]
    op_index: int


@dataclass
class Dictionaries:
    """Run-wide dictionaries so every batch encodes roles/names/types identically."""

    roles: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)

    def index(self, values: list[str], table: list[str]) -> np.ndarray:
        pos = {v: i for i, v in enumerate(table)}
        return np.array([pos[v] for v in values], dtype=np.int32)
