"""Data edges of a run of ours: the phase graphs rebuilt from the config its run.json records.

The op table's `node_id` is the position of the task's node in its phase graph, so (phase, node_id) -> the
positions of the nodes reading its outputs is exactly the information a foreign profile lacks.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pyarrow as pa

from atbprof.analyze.view import dict_codes, int_column
from atbprof.arrays import distinct
from atbprof.errors import AtbprofError

if TYPE_CHECKING:
    from atbprof.config.models import RunConfig

EDGES_SCHEMA = pa.schema(
    [
        pa.field("phase", pa.string(), nullable=False),
        pa.field("node_id", pa.int32(), nullable=False, metadata={"doc": "position in the phase graph"}),
        pa.field("op_type", pa.string(), nullable=False),
        pa.field("consumers", pa.list_(pa.int32()), nullable=False, metadata={"doc": "node_ids reading its output"}),
    ],
    metadata={"atbprof.table": "analyze.edges"},
)


def run_config(meta: dict[str, object]) -> RunConfig | None:
    """The config of a run of ours from its run.json, or None (not ours, or written by an incompatible version)."""
    doc = meta.get("config")
    if not isinstance(doc, dict):
        return None
    from pydantic import ValidationError

    from atbprof.config.models import RunConfig  # runs of ours only: other profiles have no config

    try:
        return RunConfig.model_validate(doc)
    except ValidationError:
        return None


def config_key(cfg: RunConfig) -> tuple[str, str]:
    """What a simulation of `cfg` depends on: the config and the stamps of the files it reads (a memo's key)."""
    files = (cfg.model.hf_config, cfg.device.spec, cfg.fusion.rules_file)
    return cfg.model_dump_json(), " ".join(_file_stamp(f) for f in files if f)


def _file_stamp(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return "missing"  # the loader says what is wrong with it
    return f"{st.st_mtime_ns}:{st.st_size}"


_EDGES: dict[tuple[str, str], pa.Table] = {}
"""graph_edges by config_key: the ranks of a cluster, one config, rebuild the same graphs."""


def graph_edges(cfg: RunConfig) -> pa.Table:
    """EDGES_SCHEMA rows for every node of every phase graph of the run."""
    key = config_key(cfg)
    if key not in _EDGES:
        if len(_EDGES) >= 8:
            _EDGES.clear()
        _EDGES[key] = _build_edges(cfg)
    return _EDGES[key]


def _build_edges(cfg: RunConfig) -> pa.Table:
    from atbprof.sim.simulate import Simulation  # the simulator is only needed for runs of ours

    sim = Simulation(cfg)
    phase: list[str] = []
    node: list[int] = []
    op_type: list[str] = []
    consumers: list[list[int]] = []
    for name, pm in sim.phases.items():
        nodes = pm.graph.nodes
        pos = {n.id: i for i, n in enumerate(nodes)}
        readers = pm.graph.consumers()
        for i, n in enumerate(nodes):
            phase.append(name)
            node.append(i)
            op_type.append(n.op_type)
            consumers.append(sorted(pos[c] for c in readers.get(n.id, []) if c in pos))
    return pa.table({"phase": phase, "node_id": node, "op_type": op_type, "consumers": consumers}, schema=EDGES_SCHEMA)


def edges_for_run(meta: dict[str, object], ops: pa.Table) -> tuple[pa.Table | None, str | None]:
    """(edges, None) when the graph rebuilt from run.json describes `ops`; else (None, why not)."""
    cfg = run_config(meta)
    if cfg is None:
        return None, "run.json has no readable config: Add->Norm and Norm->MatMul edges were inferred from shapes"
    try:
        edges = graph_edges(cfg)
    except AtbprofError as err:
        return None, f"the run's graph could not be rebuilt ({err}): edges were inferred from shapes"
    if not edges_match(edges, ops):
        return None, "the rebuilt graph does not match ops.parquet: edges were inferred from shapes"
    return edges, None


def edges_match(edges: pa.Table, ops: pa.Table) -> bool:
    """Does every op's (phase, node_id) name a node of the same op type?"""
    need = {"phase", "node_id", "op_type"}
    if not need <= set(ops.column_names) or ops.column("node_id").null_count:
        return False
    e_phase, e_phases = dict_codes(edges.column("phase"))
    e_node = int_column(edges, "node_id")
    e_type = edges.column("op_type").to_pylist()
    lookup: dict[tuple[str, int], str] = {
        (e_phases[p], int(n)): t for p, n, t in zip(e_phase.tolist(), e_node.tolist(), e_type, strict=True)
    }
    phase, phases = dict_codes(ops.column("phase"))
    node = int_column(ops, "node_id")
    types, type_names = dict_codes(ops.column("op_type"))
    if (phase < 0).any() or (node < 0).any() or node.max(initial=0) >= 1 << 24 or len(type_names) >= 1 << 20:
        return False
    # a run repeats the same few thousand (phase, node, type) triples: compare each distinct one once
    keys = distinct((phase << 44) | (node << 20) | types)
    for key in keys.tolist():
        p, n, t = key >> 44, (key >> 20) & ((1 << 24) - 1), key & ((1 << 20) - 1)
        if lookup.get((phases[p], n)) != type_names[t]:
            return False
    return bool(len(keys))
