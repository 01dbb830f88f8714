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

from atbprof.arrays import distinct
from atbprof.device.collectives import collective_ns, place_pair
from atbprof.export.cluster import KIND_OF, TRANSPORTS, CommContext, _comm_rows, comm_context
from atbprof.export.common import EPOCH_BASE_NS, RunSource
from atbprof.importers.cluster_comm import links_table, summed_links
from atbprof.importers.cluster_tables import BANDWIDTH_SCHEMA, OPS_SCHEMA

_P2P, _COLLECTIVE = 0, 1
_SECTIONS = ("p2p", "collective")


def _py_round4(values: np.ndarray) -> np.ndarray:
    """Python's round(x, 4) of each value (correctly rounded, unlike NumPy's), once per distinct value."""
    coded = pc.dictionary_encode(pa.array(values, pa.float64()))  # hashed: few distinct figures among many rows
    rounded = [round(v, 4) for v in coded.dictionary.to_pylist()]
    return np.array(rounded, dtype=np.float64)[coded.indices.to_numpy()]


def _ratio4(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """round(num / den, 4) where den is non-zero, else 0 (the JSON's bandwidth figures)."""
    out = np.zeros(len(num))
    nz = den != 0
    out[nz] = _py_round4(num[nz] / den[nz])
    return out


def communication_tables(
    source: RunSource, rank: int, warnings: list[str], where: str, rows: pa.Table | None = None
) -> tuple[pa.Table, pa.Table, pa.Table] | None:
    """(ops, bandwidth, links) of `rank`, as `json_tables(rank, *communication(source, rank), ...)` reads them; None
    where the dict path must decide (two ops of a step with one key). `rows`: as `communication` takes them."""
    rows = _comm_rows(source) if rows is None else rows
    if not rows.num_rows:
        return OPS_SCHEMA.empty_table(), BANDWIDTH_SCHEMA.empty_table(), links_table(rank, {"step": []}, [], "")
    c = comm_context(source, rank)
    device, tp = c.device, c.tp

    step = rows.column("step").to_numpy(zero_copy_only=False).astype(np.int64)
    # a rank has hundreds of thousands of collectives but few distinct names: strings are worked on once per name
    name_codes, name_values = _encode(rows.column("op_name"))
    type_codes, type_values = _encode(rows.column("op_type"))
    type_names = type_values.to_pylist()
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
    suffix_of, suffixes = _encode(pc.replace_substring_regex(name_values, r"^.*_", ""))  # str.rsplit("_", 1)[-1]
    suffix_codes = np.append(suffix_of, -1)[name_codes]  # a null name (-1): no suffix
    n_names, n_suffix, n_kinds = len(name_values) + 1, len(suffixes) + 1, len(kind_names)
    key = (step * 2 + section) * n_names + name_codes
    matrix_key = ((step * 2 + section) * n_kinds + kind) * n_suffix + suffix_codes
    used_suffixes = {suffixes[int(i)].as_py() for i in distinct(suffix_codes) if i >= 0}
    if len(distinct(key)) != n or len(distinct(matrix_key)) != n or "total" in used_suffixes:
        # a duplicate key: the JSON keeps the last op's figures at the first one's place; a `-total` key: the
        # matrix would read as torch_npu's summary rows
        return None

    step, section, start, dur, sent, transit = (a[order] for a in (step, section, start, dur, sent, transit))
    kind, transport, suffix_codes = kind[order], transport[order], suffix_codes[order]
    name_codes = name_codes[order]
    names = _strings(name_codes, name_values)
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
            "name": _strings(name_codes[op_at], name_values),
            "transport": _strings(t_at, list(TRANSPORTS)),
            "size_mb": bw_size,
            "time_ms": bw_time,
            "bandwidth_gbps": _ratio4(bw_size, bw_time),
        },
        schema=BANDWIDTH_SCHEMA,
    )
    send = kind == (kind_names.index("Send") if "Send" in kind_names else -1)
    links = _links(rank, c, step, section, send, names, gid, (transport, transports), size_mb, transit)
    return ops, bandwidth, summed_links(rank, links)


def _encode(values: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, pa.StringArray]:
    """(code per row, -1 for null; the values coded, a string array) of a string or dictionary column: a
    dictionary column's own codes (its dictionary may hold values no row has)."""
    if isinstance(values, pa.Array):
        values = pa.chunked_array([values])
    if not pa.types.is_dictionary(values.type):
        values = pc.dictionary_encode(values)
    values = values.unify_dictionaries()
    if not values.num_chunks:
        return np.zeros(0, dtype=np.int64), pa.array([], pa.string())
    parts = [pc.fill_null(c.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64) for c in values.chunks]
    return np.concatenate(parts), values.chunk(0).dictionary.cast(pa.string())


def _strings(codes: np.ndarray, values: list[str] | pa.Array) -> pa.Array:
    """A string array of `values[code]` per row (null for -1), without a Python string per row."""
    values = values if isinstance(values, pa.Array) else pa.array(values, pa.string())
    return values.take(pa.array(codes, mask=codes < 0) if len(codes) and codes.min() < 0 else pa.array(codes))


def _links(
    rank: int,
    c: CommContext,
    step: np.ndarray,
    section: np.ndarray,
    send: np.ndarray,
    names: pa.Array,
    gid: pa.Array,
    transport: tuple[np.ndarray, list[str]],
    size_mb: np.ndarray,
    transit: np.ndarray,
) -> pa.Table:
    """The matrix's links of the ops summed as `links_table` sums them (the input of `summed_links`): a
    collective's pairs to each peer of the tp group, a send's to the next stage, a receive's from the previous one,
    each followed by the rank's LOCAL entry.

    Summed per group of ops rather than per link (a collective has a link to each peer: millions of rows): the ops
    of a step and section with one transport (and, p2p, one pair) give each of their links the same figures, in
    op order, so a link's sum is its op group's, added in the same order."""
    tp, tp_ranks, pp_ranks = c.tp, c.tp_ranks, c.pp_ranks
    p2p = section == _P2P
    me_tp, me_pp = tp_ranks.index(rank), pp_ranks.index(rank)
    peers_tp = np.array([tp_ranks.index(r) for r in tp_ranks if r != rank], dtype=np.int64)
    codes, transports = transport
    labels = [*transports, "LOCAL"]
    local_code, n_labels = labels.index("LOCAL"), len(labels)  # a transport named LOCAL is one key with it
    with np.errstate(divide="ignore", invalid="ignore"):  # a collective without peers has only its LOCAL link
        share = size_mb / (np.where(p2p, 2, len(peers_tp) + 1) - 1)
    to_hbm = share / c.hbm_gbps
    src = np.full(len(step), me_tp, dtype=np.int64)
    dst = np.full(len(step), -1, dtype=np.int64)
    for is_send, peer in ((True, rank + tp), (False, rank - tp)):
        sel = p2p & (send == is_send)
        if sel.any():
            other = pp_ranks.index(peer)
            src[sel], dst[sel] = (me_pp, other) if is_send else (other, me_pp)
    out: list[dict[str, np.ndarray]] = []

    def add(ops: np.ndarray, key: np.ndarray, local: bool, fan: np.ndarray | None = None) -> None:
        """One row per distinct key of `ops` (per peer in `fan`): LOCAL rows, or the ops' own transport."""
        if not len(ops):
            return
        _, first, inverse, count = np.unique(key, return_index=True, return_inverse=True, return_counts=True)
        lead = ops[first]
        k = len(first)
        me = np.where(p2p[lead], me_pp, me_tp)
        rows = {
            "lead": lead,
            "src": me if local else src[lead],
            "dst": me if local else dst[lead],
            "transport": np.full(k, local_code) if local else codes[lead],
            "count": count,
            "size": np.bincount(inverse, weights=share[ops], minlength=k),
            "time": np.bincount(inverse, weights=(to_hbm if local else transit)[ops], minlength=k),
            "bandwidth": np.full(k, round(c.hbm_gbps, 4)) if local else _ratio4(share[lead], transit[lead]),
        }
        if fan is None:
            out.append(rows)
            return
        for peer in fan.tolist():
            out.append({**rows, "dst": np.full(k, peer, dtype=np.int64)})

    coll, pair = np.flatnonzero(~p2p), np.flatnonzero(p2p)
    add(coll, step[coll] * n_labels + codes[coll], local=False, fan=peers_tp)
    add(coll, step[coll], local=True)
    width = len(pp_ranks) + 1
    add(pair, ((step[pair] * width + src[pair] + 1) * width + dst[pair] + 1) * n_labels + codes[pair], local=False)
    add(pair, step[pair], local=True)
    cols = {k: np.concatenate([r[k] for r in out]) for k in out[0]}
    lead = pa.array(cols["lead"])
    return pa.table(
        {
            "step": pc.binary_join_element_wise("step", pc.cast(pa.array(step[cols["lead"]]), pa.string()), ""),
            "section": _strings(section[cols["lead"]], list(_SECTIONS)),
            "group": gid.take(lead),
            "src_local": pa.array(cols["src"].astype(np.int32)),
            "dst_local": pa.array(cols["dst"].astype(np.int32)),
            "transport": _strings(cols["transport"], labels),
            "name_first": names.take(lead),
            "name_count": cols["count"].astype(np.int64),
            "size_mb_sum": cols["size"],
            "time_ms_sum": cols["time"],
            "bandwidth_gbps_first": cols["bandwidth"],
        }
    )
