"""The multi-device parts of a torch_npu export: one rank's communication.json and communication_matrix.json,
and the parallel groups of profiler_metadata.json, as torch_npu writes them (formats: the 4-rank Qwen3 cluster
sample in ../shared/anchors; ascend_profiling_formats.md 2.3), so msprof-analyze's `cluster` mode reads them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.device.collectives import OP_TYPES, CollectiveGroup, collective_ns, place_group, place_pair
from atbprof.device.spec import DeviceSpec
from atbprof.export.common import EPOCH_BASE_NS, RunSource, matches

TRANSPORTS = ("RDMA", "HCCS", "PCIE", "SDMA", "SIO")
KIND_OF = {v: k for k, v in OP_TYPES.items()}
COMM_COLUMNS = ("step", "op_name", "op_type", "task_type", "task_start_ns", "task_dur_ns", "comm_bytes")


def parallel_of(source: RunSource) -> dict[str, int]:
    cfg = source.doc.get("config", {}).get("parallel", {}) or {}
    return {k: int(cfg.get(k, 1)) for k in ("tp", "pp", "dp")}


def tp_group(source: RunSource) -> CollectiveGroup:
    device = DeviceSpec.model_validate(source.doc["device"])
    return place_group(device.topology, parallel_of(source)["tp"], device.name)


def group_ranks(source: RunSource, rank: int, kind: str = "tp") -> list[int]:
    """Global ranks of `rank`'s group: tp (its stage's tensor-parallel ranks), pp (the same tp rank of every stage
    of its replica), mp (its replica: tp x pp), dp (the same position in every replica)."""
    par = parallel_of(source)
    tp, pp = par["tp"], par["pp"]
    mp = tp * pp
    if kind == "tp":
        first = rank - rank % tp
        return list(range(first, first + tp))
    if kind == "pp":
        first = rank - rank % mp + rank % tp
        return list(range(first, first + mp, tp))
    if kind == "mp":
        first = rank - rank % mp
        return list(range(first, first + mp))
    return list(range(rank % mp, source.devices, mp))


GROUP_KINDS = ("default_group", "tp", "pp", "mp", "dp")


def group_key(source: RunSource, rank: int, kind: str) -> str:
    """The group's key in profiler_metadata.json's parallel_group_info (`group_name_<n>`, n unique per group as
    torch_npu numbers its process groups): default 0, then every tp group, every pp group, every mp group, every
    dp group, each numbered by its lowest rank."""
    par = parallel_of(source)
    world, tp, mp = source.devices, par["tp"], par["tp"] * par["pp"]
    counts = {"default_group": 1, "tp": world // tp, "pp": world // par["pp"], "mp": world // mp, "dp": mp}
    offset = sum(counts[k] for k in GROUP_KINDS[: GROUP_KINDS.index(kind)])
    first = min(group_ranks(source, rank, kind)) if kind != "default_group" else 0
    index = {
        "default_group": 0,
        "tp": first // tp,
        "pp": (first // mp) * tp + first % tp,
        "mp": first // mp,
        "dp": first,
    }[kind]
    return f"group_name_{offset + index}"


def group_hash(key: str) -> str:
    """The HCCL communicator name of a parallel group, as op names carry it after '@': the two 32-bit polynomial
    hashes (primes 29 and 131) of its parallel_group_info key, which is how msprof-analyze maps a communicator to
    its group (and so a p2p group to its `pp` name, from which it infers the pipeline stages)."""
    h0 = h1 = 0
    for ch in key:
        h0 = (h0 * 29 + ord(ch)) & 0xFFFFFFFF
        h1 = (h1 * 131 + ord(ch)) & 0xFFFFFFFF
    return str((h0 << 32) | h1)


def metadata(source: RunSource, rank: int) -> dict[str, Any]:
    """profiler_metadata.json's distributed_args and parallel_group_info (Megatron names: tp, dp, default_group)."""
    par = parallel_of(source)
    tp, dp = par["tp"], par["dp"]
    world = source.devices
    kinds = [k for k in GROUP_KINDS if k in ("default_group", "tp", "dp") or par["pp"] > 1]
    groups = {k: list(range(world)) if k == "default_group" else group_ranks(source, rank, k) for k in kinds}
    return {
        "distributed_args": {
            "tensor_model_parallel_size": tp,
            "pipeline_model_parallel_size": par["pp"],
            "data_parallel_size": dp,
            "context_parallel_size": 1,
            "expert_model_parallel_size": 1,
            "sequence_parallel": False,
            "rank": rank,
            "world_size": world,
        },
        "parallel_group_info": {
            group_key(source, rank, name): {
                "group_name": name,
                "group_rank": ranks.index(rank),
                "global_ranks": ranks,
            }
            for name, ranks in groups.items()
        },
    }


def is_last_stage(source: RunSource, rank: int) -> bool:
    """Whether `rank` runs the last pipeline stage (it samples the token: its steps end with the copy to the host)."""
    par = parallel_of(source)
    return (rank // par["tp"]) % par["pp"] == par["pp"] - 1


def comm_of(b: pa.RecordBatch) -> pa.RecordBatch:
    """The collectives and pipeline transfers of an op batch of COMM_COLUMNS (or more), those columns only."""
    return b.filter(matches(b.column("task_type"), lambda v: pc.equal(v, "COMMUNICATION"))).select(list(COMM_COLUMNS))


def comm_rows(batches: Iterable[pa.RecordBatch]) -> pa.Table:
    """The `comm_of` rows of op batches as one table (a table with no columns where there are none)."""
    parts = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
    return pa.concat_tables(parts) if parts else pa.Table.from_pylist([], schema=pa.schema([]))


def _comm_rows(source: RunSource) -> pa.Table:
    return comm_rows(comm_of(b) for b in source.iter_batches(COMM_COLUMNS))


def _transfer_ms(kind: str, group: CollectiveGroup, sent: float) -> float:
    """The alpha-beta transfer time of a collective that sent `sent` bytes (the inverse of transit_bytes)."""
    p = group.size
    if kind in ("Send", "Receive", "Broadcast"):
        message = sent
    else:
        message = sent / ((2 if kind == "AllReduce" else 1) * (p - 1) / p)
    return float(collective_ns(kind, group, np.array([message]))[0]) / 1e6


def _bandwidth(transport: str, size_mb: float, time_ms: float) -> dict[str, Any]:
    return {
        "Transit Size(MB)": size_mb,
        "Transit Time(ms)": time_ms,
        "Bandwidth(GB/s)": round(size_mb / time_ms, 4) if time_ms else 0,
        "Large Packet Ratio": 0,
        "Size Distribution": {repr(size_mb): [1, time_ms]} if size_mb else {},
    }


def _links(
    ranks: list[int],
    pairs: list[tuple[int, int]],
    me: int,
    transport: str,
    size_mb: float,
    ms: float,
    op: str,
    hbm_gbps: float,
) -> dict[str, Any]:
    """communication_matrix.json links of one task: src-dst by index in the group, plus the rank's own (local)
    entry, with which msprof-analyze maps group indices to global ranks."""
    share = size_mb / len(pairs)
    links = {
        f"{ranks.index(a)}-{ranks.index(b)}": {
            "Transport Type": transport,
            "Transit Size(MB)": share,
            "Transit Time(ms)": ms,
            "Bandwidth(GB/s)": round(share / ms, 4) if ms else 0,
            "Op Name": op,
        }
        for a, b in pairs
    }
    local = ranks.index(me)
    links[f"{local}-{local}"] = {
        "Transport Type": "LOCAL",
        "Transit Size(MB)": share,
        "Transit Time(ms)": share / hbm_gbps,
        "Bandwidth(GB/s)": round(hbm_gbps, 4),
        "Op Name": op,
    }
    return links


def _total(ops: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("Elapse Time(ms)", "Transit Time(ms)", "Wait Time(ms)", "Synchronization Time(ms)", "Idle Time(ms)")
    total = {key: sum(o["Communication Time Info"][key] for o in ops) for key in keys}
    return {
        "Communication Time Info": {**total, "Wait Time Ratio": 0, "Synchronization Time Ratio": 0},
        "Communication Bandwidth Info": {
            t: {
                "Transit Time(ms)": sum(o["Communication Bandwidth Info"][t]["Transit Time(ms)"] for o in ops),
                "Transit Size(MB)": sum(o["Communication Bandwidth Info"][t]["Transit Size(MB)"] for o in ops),
                "Size Distribution": {},
            }
            for t in TRANSPORTS
        },
    }


@dataclass(frozen=True)
class CommContext:
    """What pricing and placing one rank's communication needs: the device, its tp group, the collectives' static
    cost, the rank's tp and pp groups and their communicator names, and the HBM rate (a LOCAL link's)."""

    device: DeviceSpec
    tp: int
    group: CollectiveGroup
    static_ms: float
    tp_ranks: list[int]
    pp_ranks: list[int]
    gids: dict[str, str]
    hbm_gbps: float


def comm_context(source: RunSource, rank: int) -> CommContext:
    device = DeviceSpec.model_validate(source.doc["device"])
    return CommContext(
        device=device,
        tp=parallel_of(source)["tp"],
        group=tp_group(source),
        static_ms=float(device.topology.collective_static_us) / 1e3,  # type: ignore[union-attr]
        tp_ranks=group_ranks(source, rank),
        pp_ranks=group_ranks(source, rank, "pp"),
        gids={k: group_hash(group_key(source, rank, k)) for k in ("tp", "pp")},
        hbm_gbps=float(source.doc["device"]["hbm"]["bandwidth_gbps"]),
    )


def communication(source: RunSource, rank: int, rows: pa.Table | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(communication.json, communication_matrix.json) of one rank: per step, each collective (and, in `p2p`, each
    pipeline send and receive) with its time split (Elapse = the task; Transit = the alpha-beta transfer; Wait =
    what it waited for its peers), its bytes per transport, and the matrix of its links (a collective: this rank to
    each peer of its tp group; a send: to the next stage; a receive: from the previous one). `rows`: the rank's
    `comm_rows`, where a pass over its ops already took them."""
    rows = _comm_rows(source) if rows is None else rows
    c = comm_context(source, rank)
    device, tp, group, static_ms, hbm_gbps = c.device, c.tp, c.group, c.static_ms, c.hbm_gbps
    tp_ranks, pp_ranks, gids = c.tp_ranks, c.pp_ranks, c.gids
    comm: dict[str, Any] = {}
    matrix: dict[str, Any] = {}
    if not rows.num_rows:
        return comm, matrix
    cols = {
        c: rows.column(c).to_pylist()
        for c in ("step", "op_name", "op_type", "task_start_ns", "task_dur_ns", "comm_bytes")
    }
    for i in range(rows.num_rows):
        step = f"step{cols['step'][i]}"
        kind = KIND_OF.get(str(cols["op_type"][i]), "AllReduce")
        if kind in ("Send", "Receive"):
            peer = rank + tp if kind == "Send" else rank - tp
            link = place_pair(device.topology, min(rank, peer), max(rank, peer), device.name)
            section, ranks, pairs = "p2p", pp_ranks, [(rank, peer) if kind == "Send" else (peer, rank)]
        else:
            link, section, ranks = group, "collective", tp_ranks
            pairs = [(rank, r) for r in ranks if r != rank]
        transport = link.transport or "HCCS"
        gid = gids["pp" if section == "p2p" else "tp"]
        sent = float(cols["comm_bytes"][i] or 0)
        elapse = cols["task_dur_ns"][i] / 1e6
        transit = _transfer_ms(kind, link, sent)
        # what the task lasted beyond its own modelled time (rounded to ns as the task was): waiting for peers
        wait = max(0, cols["task_dur_ns"][i] - round((transit + static_ms) * 1e6)) / 1e6
        size_mb = sent / 1e6
        info = {
            "Communication Time Info": {
                "Start Timestamp(us)": (EPOCH_BASE_NS + cols["task_start_ns"][i]) / 1000.0,
                "Elapse Time(ms)": elapse,
                "Transit Time(ms)": transit,
                "Wait Time(ms)": wait,
                "Synchronization Time(ms)": wait,
                "Idle Time(ms)": max(0.0, elapse - transit - wait),
                "Wait Time Ratio": round(wait / (wait + transit), 4) if wait + transit else 0,
                "Synchronization Time Ratio": round(wait / (wait + transit), 4) if wait + transit else 0,
            },
            "Communication Bandwidth Info": {
                t: _bandwidth(t, size_mb if t in (transport, "SDMA") else 0, transit if t in (transport, "SDMA") else 0)
                for t in TRANSPORTS
            },
        }
        op = cols["op_name"][i]
        comm.setdefault(step, {"p2p": {}, "collective": {}})[section][f"{op}@{gid}"] = info
        matrix.setdefault(step, {"p2p": {}, "collective": {}})[section][
            f"{kind.lower()}-{op.rsplit('_', 1)[-1]}@{gid}"
        ] = _links(ranks, pairs, rank, transport, size_mb, transit, op, hbm_gbps)
    for sections in comm.values():
        for ops in sections.values():
            if ops:
                ops["Total Op Info"] = _total(list(ops.values()))
    return comm, matrix
