"""Graph pass: the tensor-parallel collectives (data/parallel.yaml `collectives`) inserted into one rank's graph.

Each goes right after the kernel whose partial result it joins, on the communication stream; every kernel that
read that result reads the collective's output instead, so the next kernel waits for it (no overlap: a
row-parallel linear's sum is needed at once). Inserted nodes get new ids; the others keep theirs."""

from __future__ import annotations

from atbprof.device.collectives import OP_TYPES
from atbprof.graph.dims import ModelDims
from atbprof.graph.expr import Lin
from atbprof.graph.nodes import Edge, Graph, Node, Tensor, Work
from atbprof.parallel.sharding import CollectiveAfter, tensor_parallel_rules

COMM_STREAM = 6
"""Stream id of the HCCL tasks (compute runs on stream 2)."""


def _output(rule: CollectiveAfter, node: Node, dims: ModelDims) -> Tensor:
    out = node.outputs[0]
    if rule.tokens:  # the tokens axis (rows) scattered over the ranks or gathered from them
        scale = dims.tp if rule.collective == "AllGather" else 1 / dims.tp
        shape = (*out.shape[:-2], out.shape[-2] * scale, out.shape[-1])
        return Tensor(shape, out.dtype, out.nbytes * scale)
    if rule.collective != "AllGather":
        return out
    # the gathered tensor: the last axis times tp (the vocab-parallel logits -> the whole vocabulary)
    full, local = dims.local("vocab")
    return Tensor((*out.shape[:-1], Lin(one=full)), out.dtype, out.nbytes * (full / local))


def insert_collectives(graph: Graph, dims: ModelDims) -> Graph:
    """One tp rank's graph with its collectives; the graph itself when tp is 1."""
    if dims.tp == 1:
        return graph
    tp_rules = tensor_parallel_rules()
    rules = tp_rules.sequence_parallel if dims.sp else tp_rules.collectives
    next_id = max(n.id for n in graph.nodes) + 1
    last_of: dict[tuple[int, int], int] = {}  # (rule, layer) -> the last kernel of its role (rules with `last`)
    for n in graph.nodes:
        for k, rule in enumerate(rules):
            if rule.last and n.role == rule.after:
                last_of[(k, n.layer)] = n.id
    nodes: list[Node] = []
    redirect: dict[int, tuple[int, Tensor]] = {}  # producer id -> the collective that now delivers its result
    seen: set[tuple[int, int]] = set()  # (rule, layer) already placed
    for n in graph.nodes:
        if any(e.producer in redirect for e in n.inputs):
            n = n.clone(inputs=[Edge(*redirect[e.producer]) if e.producer in redirect else e for e in n.inputs])
        nodes.append(n)
        for k, rule in enumerate(rules):
            if n.role != rule.after or (rule.op_type and n.op_type != rule.op_type) or (k, n.layer) in seen:
                continue
            if rule.last and last_of.get((k, n.layer)) != n.id:
                continue
            seen.add((k, n.layer))
            out = _output(rule, n, dims)
            op_type = OP_TYPES[rule.collective]
            comm = Node(
                id=next_id,
                op_type=op_type,
                op_name=f"{op_type}_0_{len(seen)}",  # msprof: hcom_allReduce__<group>_<index>
                role=rule.role,
                layer=n.layer,
                inputs=[Edge(n.id, n.outputs[0])],
                outputs=[out],
                params=[],
                work=[Work("comm", kind=rule.collective, comm_bytes=out.nbytes)],
                stream=COMM_STREAM,
            )
            redirect[n.id] = (comm.id, out)
            nodes.append(comm)
            next_id += 1
    return Graph(nodes, graph.phase, graph.notes)
