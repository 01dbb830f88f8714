"""One rank's communication of a run of ours as the cluster tables (ops, bandwidth, links), computed column-wise.

`communication()` (export/cluster.py) builds communication.json and communication_matrix.json as torch_npu writes
them, a dict per op and per link: right for an export, but a 20 M-op TP8 run has 3.5 M collectives, and building
and re-reading those dicts took 300 s. This computes the same rows as `json_tables(communication())` gives, with
the same figures (the same float expressions, element-wise) and the same row order (the JSON's: step, then p2p
before collective, then first appearance), so the cluster analysis is byte-identical either way (tested). Where two
ops of a step share a key (a JSON object keeps only the last), it returns None and the caller takes the dict path,
which models that exactly.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.device.collectives import collective_ns, place_pair
from atbprof.export.cluster import KIND_OF, TRANSPORTS, CommContext, _comm_rows, comm_context
from atbprof.export.common import EPOCH_BASE_NS, RunSource
from atbprof.importers.cluster_comm import links_table
from atbprof.importers.cluster_tables import BANDWIDTH_SCHEMA, OPS_SCHEMA

_P2P, _COLLECTIVE = 0, 1
_SECTIONS = ("p2p", "collective")


def _py_round4(values: np.ndarray) -> np.ndarray:
    """Python's round(x, 4) of each value (correctly rounded, unlike NumPy's), once per distinct value."""
    uniq, inverse = np.unique(values, return_inverse=True)
    return np.array([round(float(v), 4) for v in uniq.tolist()], dtype=np.float64)[inverse]


def _ratio4(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """round(num / den, 4) where den is non-zero, else 0 (the JSON's bandwidth figures)."""
    out = np.zeros(len(num))
    nz = den != 0
    out[nz] = _py_round4(num[nz] / den[nz])
    return out


def communication_tables(
    source: RunSource, rank: int, warnings: list[str], where: str
) -> tuple[pa.Table, pa.Table, pa.Table] | None:
    """(ops, bandwidth, links) of `rank`, as `json_tables(rank, *communication(source, rank), ...)` reads them; None
    where the dict path must decide (two ops of a step with one key)."""
    rows = _comm_rows(source)
    if not rows.num_rows:
        return OPS_SCHEMA.empty_table(), BANDWIDTH_SCHEMA.empty_table(), links_table(rank, {"step": []}, [], "")
    c = comm_context(source, rank)
    device, tp = c.device, c.tp

    step = rows.column("step").to_numpy(zero_copy_only=False).astype(np.int64)
    names = rows.column("op_name").cast(pa.string()).combine_chunks()
    name_codes, _ = _encode(names)
    type_codes, type_names = _encode(rows.column("op_type").cast(pa.string()).combine_chunks())
    kind_of_type = [KIND_OF.get(str(t), "AllReduce") for t in type_names]
    kind_names = sorted({*kind_of_type, "AllReduce"})
    kind = np.array([kind_names.index(k) for k in [*kind_of_type, "AllReduce"]], dtype=np.int64)[type_codes]
    start = rows.column("task_start_ns").to_numpy(zero_copy_only=False).astype(np.int64)
    dur = rows.column("task_dur_ns").to_numpy(zero_copy_only=False).astype(np.int64)
    sent = pc.fill_null(rows.column("comm_bytes"), 0).to_numpy(zero_copy_only=False).astype(np.float64)

    n = rows.num_rows
    section = np.full(n, _COLLECTIVE, dtype=np.int64)
    transit = np.zeros(n)
    transports: list[str] = []
    transport = np.zeros(n, dtype=np.int64)
    for k, kind_name in enumerate(kind_names):
        at = np.flatnonzero(kind == k)
        if not len(at):
            continue
        if kind_name in ("Send", "Receive"):
            peer = rank + tp if kind_name == "Send" else rank - tp
            link = place_pair(device.topology, min(rank, peer), max(rank, peer), device.name)
            section[at] = _P2P
            message = sent[at]
        else:
            link = c.group
            p = link.size
            factor = (2 if kind_name == "AllReduce" else 1) * (p - 1) / p
            message = sent[at] if kind_name == "Broadcast" else sent[at] / factor
        transit[at] = collective_ns(kind_name, link, message) / 1e6
        used = link.transport or "HCCS"
        transports += [used] if used not in transports else []
        transport[at] = transports.index(used)

    # the JSON's order: steps by first appearance, p2p before collective, then each op's first appearance
    _, first, inverse = np.unique(step, return_index=True, return_inverse=True)
    order = np.lexsort((np.arange(n), section, first[inverse]))
    suffix_codes, suffixes = _encode(pc.replace_substring_regex(names, r"^.*_", ""))  # str.rsplit("_", 1)[-1]
    n_names, n_suffix, n_kinds = int(name_codes.max()) + 2, len(suffixes) + 1, len(kind_names)
    key = (step * 2 + section) * n_names + name_codes
    matrix_key = ((step * 2 + section) * n_kinds + kind) * n_suffix + suffix_codes
    if len(np.unique(key)) != n or len(np.unique(matrix_key)) != n:
        return None  # a duplicate key: the JSON keeps the last op's figures at the first one's place

    step, section, start, dur, sent, transit = (a[order] for a in (step, section, start, dur, sent, transit))
    kind, transport, suffix_codes = kind[order], transport[order], suffix_codes[order]
    names = names.take(pa.array(order))
    gid = _strings(np.where(section == _P2P, 1, 0), [c.gids["tp"], c.gids["pp"]])

    elapse = dur / 1e6
    wait = np.maximum(0, dur - np.round((transit + c.static_ms) * 1e6)) / 1e6
    idle = np.maximum(0.0, elapse - transit - wait)
    ops = pa.table(
        {
            "rank": np.full(n, rank, dtype=np.int32),
            "step": step.astype(np.int32),
            "section": _strings(section, list(_SECTIONS)),
            "name": names,
            "group": gid,
            "start_us": (EPOCH_BASE_NS + start) / 1000.0,
            "elapse_ms": elapse,
            "transit_ms": transit,
            "wait_ms": wait,
            "synchronization_ms": wait,
            "idle_ms": idle,
        },
        schema=OPS_SCHEMA,
    )

    size_mb = sent / 1e6
    # bandwidth: per op, its transport and SDMA carry the bytes (one row when the transport is SDMA)
    t_of = [TRANSPORTS.index(t) if t in TRANSPORTS else -1 for t in transports]
    own = np.array(t_of, dtype=np.int64)[transport] if transports else np.full(n, -1)
    used_rows = np.zeros((n, len(TRANSPORTS)), dtype=bool)
    used_rows[np.flatnonzero(own >= 0), own[own >= 0]] = True
    used_rows[:, TRANSPORTS.index("SDMA")] = True
    used_rows &= ((size_mb != 0) | (transit != 0))[:, None]
    op_at, t_at = np.nonzero(used_rows)
    bw_size, bw_time = size_mb[op_at], transit[op_at]
    bandwidth = pa.table(
        {
            "rank": np.full(len(op_at), rank, dtype=np.int32),
            "step": step[op_at].astype(np.int32),
            "name": names.take(pa.array(op_at)),
            "transport": _strings(t_at, list(TRANSPORTS)),
            "size_mb": bw_size,
            "time_ms": bw_time,
            "bandwidth_gbps": _ratio4(bw_size, bw_time),
        },
        schema=BANDWIDTH_SCHEMA,
    )
    matrix_keys = pc.binary_join_element_wise(
        _strings(kind, [k.lower() for k in kind_names]), _strings(suffix_codes, suffixes), "-"
    )
    send = kind == (kind_names.index("Send") if "Send" in kind_names else -1)
    links = _links(
        rank, c, step, section, send, matrix_keys, names, gid, _strings(transport, transports), size_mb, transit
    )
    return ops, bandwidth, links_table(rank, links, warnings, where)


def _encode(values: pa.Array) -> tuple[np.ndarray, list[str]]:
    """(code per value, -1 for null; the distinct values) of a string array."""
    encoded = pc.dictionary_encode(values)
    return pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False).astype(
        np.int64
    ), encoded.dictionary.to_pylist()


def _strings(codes: np.ndarray, values: list[str]) -> pa.Array:
    """A string array of `values[code]` per row, without a Python string per row."""
    return pa.array(values, pa.string()).take(pa.array(codes))


def _links(
    rank: int,
    c: CommContext,
    step: np.ndarray,
    section: np.ndarray,
    send: np.ndarray,
    matrix_keys: pa.Array,
    names: pa.Array,
    gid: pa.Array,
    transport: pa.Array,
    size_mb: np.ndarray,
    transit: np.ndarray,
) -> dict[str, object]:
    """The matrix's links of the ops as `links_table` columns (in the JSON's order): a collective's pairs to each
    peer of the tp group, a send's to the next stage, a receive's from the previous one, each followed by the
    rank's LOCAL entry."""
    n, tp, tp_ranks, pp_ranks = len(step), c.tp, c.tp_ranks, c.pp_ranks
    p2p = section == _P2P
    me_tp = tp_ranks.index(rank)
    peers_tp = [tp_ranks.index(r) for r in tp_ranks if r != rank]
    links_per = np.where(p2p, 2, len(peers_tp) + 1)
    owner = np.repeat(np.arange(n), links_per)
    slot = np.arange(len(owner)) - np.repeat(np.cumsum(links_per) - links_per, links_per)
    local = slot == links_per[owner] - 1
    src = np.empty(len(owner), dtype=np.int64)
    dst = np.empty(len(owner), dtype=np.int64)
    coll = ~p2p[owner] & ~local
    src[coll] = me_tp
    dst[coll] = np.array(peers_tp, dtype=np.int64)[slot[coll]] if peers_tp else 0
    pp_link = p2p[owner] & ~local
    me_pp = pp_ranks.index(rank)
    for is_send, peer in ((True, rank + tp), (False, rank - tp)):
        sel = pp_link & (send[owner] == is_send)
        if sel.any():
            other = pp_ranks.index(peer)
            src[sel], dst[sel] = (me_pp, other) if is_send else (other, me_pp)
    me = np.where(p2p, me_pp, me_tp)
    src[local] = dst[local] = me[owner[local]]
    share = (size_mb / (links_per - 1))[owner]
    ms = transit[owner]
    take = pa.array(owner)
    steps = pc.binary_join_element_wise("step", pc.cast(pa.array(step), pa.string()), "")
    return {
        "step": steps.take(take),
        "section": _strings(section[owner], list(_SECTIONS)),
        "key": matrix_keys.take(take),
        "name": names.take(take),
        "group": gid.take(take),
        "src": src,
        "dst": dst,
        "transport": pc.if_else(pa.array(local), "LOCAL", transport.take(take)),
        "size_mb": share,
        "time_ms": np.where(local, share / c.hbm_gbps, ms),
        "bandwidth_gbps": np.where(local, round(c.hbm_gbps, 4), _ratio4(share, np.where(local, 0.0, ms))),
    }
