"""The multi-device parts of a torch_npu export: one rank's communication.json and communication_matrix.json,
and the parallel groups of profiler_metadata.json, as torch_npu writes them (formats: the 4-rank Qwen3 cluster
sample in ../shared/anchors; ascend_profiling_formats.md 2.3), so msprof-analyze's `cluster` mode reads them."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.device.collectives import OP_TYPES, CollectiveGroup, collective_ns, place_group
from atbprof.device.spec import DeviceSpec
from atbprof.export.common import EPOCH_BASE_NS, RunSource

TRANSPORTS = ("RDMA", "HCCS", "PCIE", "SDMA", "SIO")
KIND_OF = {v: k for k, v in OP_TYPES.items()}
COMM_COLUMNS = ("step", "op_name", "op_type", "task_type", "task_start_ns", "task_dur_ns", "comm_bytes")


def parallel_of(source: RunSource) -> dict[str, int]:
    cfg = source.doc.get("config", {}).get("parallel", {}) or {}
    return {k: int(cfg.get(k, 1)) for k in ("tp", "pp", "dp")}


def tp_group(source: RunSource) -> CollectiveGroup:
    device = DeviceSpec.model_validate(source.doc["device"])
    return place_group(device.topology, parallel_of(source)["tp"], device.name)


def group_ranks(source: RunSource, rank: int) -> list[int]:
    tp = parallel_of(source)["tp"]
    first = rank - rank % tp
    return list(range(first, first + tp))


def group_hash(ranks: list[int]) -> str:
    """A stable 19-digit group id, as HCCL names communicators (op names carry its last 3 digits)."""
    digest = hashlib.sha256(",".join(map(str, ranks)).encode()).digest()
    return str(10**18 + int.from_bytes(digest[:8], "big") % (9 * 10**18))


def metadata(source: RunSource, rank: int) -> dict[str, Any]:
    """profiler_metadata.json's distributed_args and parallel_group_info (Megatron names: tp, dp, default_group)."""
    par = parallel_of(source)
    tp, dp = par["tp"], par["dp"]
    world = source.devices
    tp_ranks = group_ranks(source, rank)
    dp_ranks = list(range(rank % tp, world, tp))
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
            f"group_name_{group_hash(list(range(world)))[-3:]}": {
                "group_name": "default_group",
                "group_rank": rank,
                "global_ranks": list(range(world)),
            },
            f"group_name_{group_hash(tp_ranks)[-3:]}": {
                "group_name": "tp",
                "group_rank": tp_ranks.index(rank),
                "global_ranks": tp_ranks,
            },
            f"group_name_{group_hash(dp_ranks)[-3:]}": {
                "group_name": "dp",
                "group_rank": dp_ranks.index(rank),
                "global_ranks": dp_ranks,
            },
        },
    }


def _comm_rows(source: RunSource) -> pa.Table:
    parts = []
    for b in source.iter_batches(COMM_COLUMNS):
        keep = pc.equal(pc.cast(b.column("task_type"), pa.string()), "COMMUNICATION")
        sel = b.filter(keep)
        if sel.num_rows:
            parts.append(pa.Table.from_batches([sel]))
    return pa.concat_tables(parts) if parts else pa.Table.from_pylist([], schema=pa.schema([]))


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


def communication(source: RunSource, rank: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(communication.json, communication_matrix.json) of one rank: per step, each collective with its time split
    (Elapse = the task; Transit = the alpha-beta transfer; Wait = what it waited for the group's slowest rank),
    its bytes per transport, and the matrix of its links (this rank to each peer of its tp group)."""
    rows = _comm_rows(source)
    group = tp_group(source)
    transport = group.transport or "HCCS"
    static_ms = float(DeviceSpec.model_validate(source.doc["device"]).topology.collective_static_us) / 1e3  # type: ignore[union-attr]
    ranks = group_ranks(source, rank)
    gid = group_hash(ranks)
    hbm_gbps = float(source.doc["device"]["hbm"]["bandwidth_gbps"])
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
        sent = float(cols["comm_bytes"][i] or 0)
        elapse = cols["task_dur_ns"][i] / 1e6
        transit = _transfer_ms(kind, group, sent)
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
        name = f"{cols['op_name'][i]}@{gid}"
        comm.setdefault(step, {"p2p": {}, "collective": {}})["collective"][name] = info
        peers = [r for r in ranks if r != rank]
        local = ranks.index(rank)  # the matrix names ranks by their index in the group
        links = {
            f"{local}-{ranks.index(peer)}": {
                "Transport Type": transport,
                "Transit Size(MB)": size_mb / len(peers),
                "Transit Time(ms)": transit,
                "Bandwidth(GB/s)": round(size_mb / len(peers) / transit, 4) if transit else 0,
                "Op Name": cols["op_name"][i],
            }
            for peer in peers
        }
        # the rank's own entry (a local copy through HBM): msprof-analyze maps local to global ranks with it
        local_ms = size_mb / len(peers) / hbm_gbps
        links[f"{local}-{local}"] = {
            "Transport Type": "LOCAL",
            "Transit Size(MB)": size_mb / len(peers),
            "Transit Time(ms)": local_ms,
            "Bandwidth(GB/s)": round(hbm_gbps, 4),
            "Op Name": cols["op_name"][i],
        }
        matrix.setdefault(step, {"p2p": {}, "collective": {}})["collective"][
            f"{kind.lower()}-{cols['op_name'][i].rsplit('_', 1)[-1]}@{gid}"
        ] = links
    for step in comm.values():
        ops = list(step["collective"].values())
        total = {
            key: sum(o["Communication Time Info"][key] for o in ops)
            for key in (
                "Elapse Time(ms)",
                "Transit Time(ms)",
                "Wait Time(ms)",
                "Synchronization Time(ms)",
                "Idle Time(ms)",
            )
        }
        step["collective"]["Total Op Info"] = {
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
    return comm, matrix
