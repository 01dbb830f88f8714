"""Pipeline parallelism: which decoder layers each stage runs, and one stage's graph with the Receive and Send
that join it to its neighbours (data/parallel.yaml `pipeline`).

A stage's graph is the model graph cut to its layers (and the model-level ops it runs); a tensor it reads from a
node of an earlier stage arrives through a Receive just before the first kernel that reads it, and a tensor a
later stage reads is sent right after it is computed. Both are HCCL point-to-point tasks on the communication
stream: the stage's next kernel waits for its Receive, and its Send completes before the stage goes on (the
stream waits for it, as an eager `dist.send` on the compute stream does; decode's hidden state takes a few µs to
send)."""

from __future__ import annotations

from atbprof.device.collectives import OP_TYPES
from atbprof.errors import ConfigError
from atbprof.graph.nodes import Edge, Graph, Node, Tensor, Work
from atbprof.parallel.collectives import COMM_STREAM
from atbprof.parallel.sharding import pipeline_rules


def stage_layers(layers: int, pp: int, override: tuple[int, ...] | None, model: str) -> tuple[tuple[int, int], ...]:
    """[first, last) decoder layers of each of `pp` stages: `override` (parallel.stage_layers), else vLLM's
    get_pp_indices: an even split with the remainder on the stages before the last (it also runs the LM head)."""
    if override is not None:
        if sum(override) != layers:
            raise ConfigError(
                f"parallel.stage_layers adds up to {sum(override)} layers but {model} has {layers}: list how many "
                "of its layers each stage runs"
            )
        parts = list(override)
    else:
        if layers < pp:
            raise ConfigError(
                f"parallel.pp = {pp}: {model} has only {layers} decoder layers, fewer than the stages; use "
                f"parallel.pp <= {layers}"
            )
        parts = [layers // pp] * pp
        for i in range(2, layers % pp + 2):
            parts[-i] += 1
    bounds, first = [], 0
    for n in parts:
        bounds.append((first, first + n))
        first += n
    return tuple(bounds)


def _on_stage(graph: Graph, stage: int, pp: int, layers: tuple[int, int]) -> list[Node]:
    every = set(pipeline_rules().every_stage)
    first_layer_at = next((i for i, n in enumerate(graph.nodes) if n.layer >= 0), len(graph.nodes))
    kept = []
    for i, n in enumerate(graph.nodes):
        if n.layer >= 0:
            keep = layers[0] <= n.layer < layers[1]
        elif i < first_layer_at:  # before the first layer: the embedding (stage 0) and per-stage tables
            keep = stage == 0 or n.role in every
        else:  # after the last layer: final norm, LM head, sampling
            keep = stage == pp - 1
        if keep:
            kept.append(n)
    return kept


def _p2p(kind: str, node_id: int, role: str, layer: int, index: int, tensor: Tensor, inputs: list[Edge]) -> Node:
    op_type = OP_TYPES[kind]
    return Node(
        id=node_id,
        op_type=op_type,
        op_name=f"{op_type}_1_{index}",  # msprof: hcom_send__<group>_<index>; group 1 = the pipeline's
        role=role,
        layer=layer,
        inputs=inputs,
        outputs=[tensor] if kind == "Receive" else [],
        params=[],
        work=[Work("comm", kind=kind, comm_bytes=tensor.nbytes)],
        stream=COMM_STREAM,
    )


def stage_graph(graph: Graph, stage: int, bounds: tuple[tuple[int, int], ...]) -> Graph:
    """Stage `stage`'s graph of the (tensor-parallel) model graph: its nodes, a Receive per tensor it reads from
    an earlier stage, a Send after each node a later stage reads; the graph itself without pipeline stages."""
    pp = len(bounds)
    if pp == 1:
        return graph
    rules = pipeline_rules()
    stages = [_on_stage(graph, s, pp, bounds[s]) for s in range(pp)]
    where = {n.id: s for s, nodes in enumerate(stages) for n in nodes if n.role not in rules.every_stage}
    mine = stages[stage]
    ids = {n.id for n in mine}
    # what the next stage reads and does not compute itself (each stage computes the every-stage tables)
    after = stages[stage + 1] if stage + 1 < pp else []
    held_next = {n.id for n in after}
    read_next = {e.producer for n in after for e in n.inputs if e.producer >= 0 and e.producer not in held_next}
    next_id = max(n.id for n in graph.nodes) + 1
    nodes: list[Node] = []
    received: dict[int, Edge] = {}  # producer on an earlier stage -> the Receive that delivers its tensor
    sends = 0
    for n in mine:
        for e in n.inputs:
            if e.producer >= 0 and e.producer not in ids and e.producer not in received:
                if where.get(e.producer) != stage - 1:  # the model graph joins adjacent stages only
                    raise AssertionError(f"node {n.id} reads node {e.producer}, which the previous stage does not run")
                recv = _p2p("Receive", next_id, rules.receive.role, n.layer, len(received) + 1, e.tensor, [])
                received[e.producer] = Edge(recv.id, e.tensor)
                nodes.append(recv)
                next_id += 1
        if any(e.producer in received for e in n.inputs):
            n = n.clone(inputs=[received.get(e.producer, e) for e in n.inputs])
        nodes.append(n)
        if n.id in read_next and n.outputs:
            sends += 1
            out = n.outputs[0]
            nodes.append(_p2p("Send", next_id, rules.send.role, n.layer, sends, out, [Edge(n.id, out)]))
            next_id += 1
    return Graph(nodes, graph.phase, graph.notes)
