"""Graph nodes. One Node per kernel the framework issues; sizes are `Lin` expressions of the step variables."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from atbprof.graph.expr import ZERO, Lin

Unit = Literal["cube", "vector", "aicpu", "comm"]


@dataclass(frozen=True)
class Tensor:
    shape: tuple[Lin, ...]
    dtype: str  # msprof dtype names: DT_FLOAT16, DT_BF16, DT_FLOAT, DT_INT64, DT_INT32
    nbytes: Lin

    def dims_key(self) -> tuple[tuple[float, ...], ...]:
        return tuple(d.key() for d in self.shape)


@dataclass(frozen=True)
class Work:
    """The work of one original (unfused) kernel: what its pipes must move and compute."""

    unit: Unit
    mm: tuple[Lin, Lin, Lin, Lin] | None = None  # cube: (batch, M, K, N)
    vec_bytes: Lin = ZERO  # operand bytes through the vector unit, all passes
    vec_flops: Lin = ZERO
    stream_bytes: Lin = ZERO  # weights / KV cache streamed from HBM (never L2-resident)
    kind: str = ""  # op type of the original kernel (for the icache and bound models); comm: the collective
    comm_bytes: Lin = ZERO  # comm: bytes of the collective's tensor (AllReduce: input = output; AllGather: output)


@dataclass(frozen=True)
class Edge:
    producer: int  # node id, or -1 for a graph input
    tensor: Tensor


@dataclass(eq=False)
class Node:
    id: int
    op_type: str
    op_name: str
    role: str
    layer: int
    inputs: list[Edge]
    outputs: list[Tensor]
    params: list[Tensor]  # weights / caches: listed in Input Shapes, streamed from HBM
    work: list[Work]
    fused_from: tuple[str, ...] = ()
    rule: str = ""  # fusion rule that produced this node
    units: int = 1  # kernels merged, for the instruction-cache model
    icache: bool = False  # a composite fusion (pays the icache penalty beyond the free op count)
    handoff: list[Lin] = field(default_factory=list)  # internal cube<->vector edges (through L2 on split cores)
    stream: int = 2
    writes_params: Lin = ZERO  # bytes written into params (KV-cache update)
    origin: tuple[int, ...] = ()  # ids of the unfused graph's nodes this kernel executes (empty: just its own id)

    @property
    def origin_ids(self) -> tuple[int, ...]:
        return self.origin or (self.id,)

    def clone(self, **changes: object) -> Node:
        return replace(self, **changes)  # type: ignore[arg-type]


@dataclass
class Graph:
    """Nodes in issue order (a topological order)."""

    nodes: list[Node]
    phase: str = "any"
    notes: list[str] = field(default_factory=list)

    def consumers(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            nid = n.id
            for e in n.inputs:
                if e.producer >= 0:
                    readers = out[e.producer]
                    # nodes come in order: a repeat can only be this node reading one producer twice
                    if not readers or readers[-1] != nid:
                        readers.append(nid)
        return out

    def by_id(self) -> dict[int, Node]:
        return {n.id: n for n in self.nodes}
