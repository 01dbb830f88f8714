"""Matching runs of ours exactly: every kernel knows which nodes of the unfused graph it executes (`Node.origin`,
kept by the fusion passes), so two runs of one model - whatever their fusion - share that unfused graph, and the
kernels of A and B that execute overlapping sets of its nodes form one group (union-find over the node ids).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from atbprof.analyze.graph_edges import run_config
from atbprof.config.models import RunConfig
from atbprof.diff.groups import GroupInfo, Matching, pair_frames, structure_of
from atbprof.diff.measure import Side
from atbprof.errors import InputError
from atbprof.graph.nodes import Graph
from atbprof.importers.base import Profile
from atbprof.sim.summary import CATEGORIES


@lru_cache(maxsize=8)
def _phase_graphs(cfg_json: str) -> tuple[dict[str, Graph], tuple[tuple[str, ...], ...]]:
    """(fused phase graphs, signature of the unfused graph) of a run's config."""
    from atbprof.graph.builder import build_graph
    from atbprof.sim.simulate import Simulation

    cfg = RunConfig.model_validate_json(cfg_json)
    sim = Simulation(cfg)
    base = build_graph(sim.dims)
    signature = tuple((n.op_type, n.role, str(n.layer)) for n in base.nodes)
    return {name: pm.graph for name, pm in sim.phases.items()}, signature


def graphs_of(profile: Profile) -> tuple[dict[str, Graph], tuple[tuple[str, ...], ...]] | None:
    """(fused phase graphs, signature of the unfused graph) of a run of ours; None without a readable config."""
    cfg = run_config(profile.meta)
    if cfg is None:
        return None
    # the seed and the jitter do not change the graphs: runs that differ only there share them
    quiet = cfg.execution.model_copy(update={"jitter": type(cfg.execution.jitter)()})
    graph_cfg = cfg.model_copy(update={"seed": 0, "execution": quiet})
    return _phase_graphs(graph_cfg.model_dump_json())


def _describe(cfg: RunConfig | None) -> str:
    if cfg is None:
        return "?"
    m = cfg.model
    return f"{m.preset or m.hf_config or 'custom'} ({m.architecture}, {m.dtype})"


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, x: int) -> int:
        root = x
        while self.parent.setdefault(root, root) != root:
            root = self.parent[root]
        while self.parent[x] != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, ids: tuple[int, ...]) -> None:
        first = self.find(ids[0])
        for i in ids[1:]:
            self.parent[self.find(i)] = first


GraphGroups = tuple[list[GroupInfo], dict[str, np.ndarray], dict[str, np.ndarray]]
"""(the groups, and per phase of each run: graph node id -> group code, one more entry -1 for ops of no node)."""


def match_runs(base: Side, new: Side, force: bool = False) -> Matching | None:
    """The exact matching of two runs of ours, or None when either lacks a readable config (then: alignment). Runs
    of different models are refused, or with `force` matched by alignment like any two profiles."""
    found = graph_groups(base.profile, new.profile, force)
    if found is None:
        return None
    groups, luts_b, luts_n = found
    base_group = groups_of_ops(base.per_op("node_id"), *base.codes("phase"), luts_b)
    new_group = groups_of_ops(new.per_op("node_id"), *new.codes("phase"), luts_n)
    return matching_of(base, new, groups, base_group, new_group)


def matching_of(
    base: Side, new: Side, groups: list[GroupInfo], base_group: np.ndarray | None, new_group: np.ndarray | None
) -> Matching:
    """The graph matching of two runs: their groups, each op's (None: summed as read, diff/parts.py) and the
    frames paired."""
    pairs, how = pair_frames(base.charges.frame_step, new.charges.frame_step, base.frame_phase, new.frame_phase)
    return Matching("graph", base_group, new_group, groups, pairs, (f"steps paired {how}",))


def graph_groups(base: Profile, new: Profile, force: bool = False) -> GraphGroups | None:
    """The groups of two runs of one model (the kernels of either that execute overlapping nodes of the unfused
    graph), from their configs alone; None when either lacks a readable config, or when they are runs of different
    models and `force` is on. Runs of different models are refused otherwise."""
    gb, gn = graphs_of(base), graphs_of(new)
    if gb is None or gn is None:
        return None
    (phases_b, sig_b), (phases_n, sig_n) = gb, gn
    if sig_b != sig_n:
        if force:
            return None
        raise InputError(
            f"{base.source} and {new.source} are runs of different models: "
            f"{_describe(run_config(base.meta))} vs {_describe(run_config(new.meta))} "
            f"({len(sig_b)} vs {len(sig_n)} kernels per step unfused). `atbprof diff` compares runs of one model "
            "(fusion, device, execution or workload may differ): re-run one of them with the other's `model` section, "
            "or pass --force to compare them op by op anyway"
        )
    groups: list[GroupInfo] = []
    luts_b: dict[str, np.ndarray] = {}
    luts_n: dict[str, np.ndarray] = {}
    for phase in dict.fromkeys([*phases_b, *phases_n]):
        nodes_b = phases_b[phase].nodes if phase in phases_b else []
        nodes_n = phases_n[phase].nodes if phase in phases_n else []
        uf = _UnionFind()
        for node in (*nodes_b, *nodes_n):
            uf.union(node.origin_ids)
        comp_b = [uf.find(n.origin_ids[0]) for n in nodes_b]
        comp_n = [uf.find(n.origin_ids[0]) for n in nodes_n]
        code: dict[int, int] = {}
        for c in (*comp_b, *comp_n):
            code.setdefault(c, len(groups) + len(code))
        members_b: dict[int, list[int]] = {}
        members_n: dict[int, list[int]] = {}
        for i, c in enumerate(comp_b):
            members_b.setdefault(code[c], []).append(i)
        for i, c in enumerate(comp_n):
            members_n.setdefault(code[c], []).append(i)
        for g in sorted(set(code.values())):
            mb = [nodes_b[i] for i in members_b.get(g, [])]
            mn = [nodes_n[i] for i in members_n.get(g, [])]
            bt, nt = tuple(n.op_type for n in mb), tuple(n.op_type for n in mn)
            lead = (mn or mb)[-1]
            rb, rn = "+".join(dict.fromkeys(n.role for n in mb)), "+".join(dict.fromkeys(n.role for n in mn))
            first = (mb or mn)[0]
            groups.append(
                GroupInfo(
                    base_types=bt,
                    new_types=nt,
                    structure=structure_of(bt, nt),
                    rule=next((n.rule for n in (*mn, *mb) if n.rule), ""),
                    layer=lead.layer,
                    roles=rb if rb == rn else f"{rb or '(none)'} -> {rn or '(none)'}",
                    category=CATEGORIES.get(lead.role.split(".")[0], "other"),
                    shape=";".join(",".join(str(d) for d in t.dims_key()) for t in [e.tensor for e in first.inputs]),
                )
            )
        luts_b[phase] = np.array([code[c] for c in comp_b] + [-1], dtype=np.int64)
        luts_n[phase] = np.array([code[c] for c in comp_n] + [-1], dtype=np.int64)
    return groups, luts_b, luts_n


def groups_of_ops(node: np.ndarray, codes: np.ndarray, names: list[str], luts: dict[str, np.ndarray]) -> np.ndarray:
    """The group code of each op of a run (-1: none) from its graph node id and its phase (codes into `names`)."""
    out = np.full(len(node), -1, dtype=np.int64)
    for code, name in enumerate(names):
        lut = luts.get(name)
        if lut is None:
            continue
        at = codes == code
        ids = node[at]
        ok = (ids >= 0) & (ids < len(lut) - 1)
        out[at] = np.where(ok, lut[np.where(ok, ids, len(lut) - 1)], -1)
    return out
