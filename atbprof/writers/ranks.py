"""Several ranks in one trace: each rank's processes (pids, names, labels, sort order) and flow ids, and the flows
that join the tasks of one collective (or of a pipeline Send and its Receive) across the traced ranks.

A one-rank trace keeps msprof's layout unchanged (pids 1 CANN, 65537 Ascend Hardware, 3 Overlap Analysis, 4
Model). With several ranks every process name says its rank ("Ascend Hardware (rank 3)", label "NPU 3", as
torch_npu labels a device) and the processes sort rank by rank; rank r > 0 uses pids 8r + 1/3/4 and 65537 + r
(the device's pid stays above every stream tid), its thread ids are offset by r x 2^20 (trace processors key a
thread by its tid alone, as Linux tids are unique: a stream tid shared by two ranks would merge their threads), and
its HostToDevice flow ids are op_index + 1 + r x 2^40.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PID_HOST, PID_DEVICE, PID_OVERLAP, PID_MODEL = 1, 65537, 3, 4
RANK_TID_SHIFT = 20  # thread ids of rank r: + (r << 20)
RANK_FLOW_SHIFT = 40  # HostToDevice ids of rank r: op_index + 1 + (r << 40) (op_index < 2^40)
COLLECTIVE_FLOW_BASE = 1 << 52  # ids of the flows between ranks: above every HostToDevice id
FLOW_MARKER = "FLOW_MARKER"  # Task Type of the zero-length slices that carry those flows (not device tasks)
FLOW_COLUMNS = (
    *("rank", "stage", "step", "microbatch", "node_id", "op_type", "op_name", "stream_id"),
    *("task_start_ns", "task_dur_ns"),
)


@dataclass(frozen=True)
class RankLayout:
    rank: int
    multi: bool  # the trace holds several ranks

    def _pid(self, base: int, k: int) -> int:
        if self.rank == 0:
            return base
        return PID_DEVICE + self.rank if base == PID_DEVICE else 8 * self.rank + k

    @property
    def host(self) -> int:
        return self._pid(PID_HOST, 1)

    @property
    def device(self) -> int:
        return self._pid(PID_DEVICE, 2)

    @property
    def overlap(self) -> int:
        return self._pid(PID_OVERLAP, 3)

    @property
    def model(self) -> int:
        return self._pid(PID_MODEL, 4)

    def tid(self, tid: int) -> int:
        return tid + (self.rank << RANK_TID_SHIFT)

    @property
    def flow_base(self) -> int:
        return self.rank << RANK_FLOW_SHIFT

    def name(self, process: str) -> str:
        return f"{process} (rank {self.rank})" if self.multi else process

    def label(self, label: str) -> str:
        return f"{label} {self.rank}" if self.multi and label == "NPU" else label

    def sort_index(self, pid: int) -> int:
        """Rank by rank, CANN / Ascend Hardware / Overlap Analysis / Model within a rank (one rank: the pid)."""
        if not self.multi:
            return pid
        k = {self.host: 1, self.device: 2, self.overlap: 3, self.model: 4}[pid]
        return 8 * self.rank + k


@dataclass(frozen=True)
class RankFlow:
    """A flow from one traced rank's task to another's: a collective's participant to the one it waited for
    (the last to arrive), or a pipeline Send to its Receive. Times in ns, inside their tasks."""

    name: str
    src_rank: int
    src_stream: int
    src_ts: int
    dst_rank: int
    dst_stream: int
    dst_ts: int


def comm_rows(batch: pa.RecordBatch) -> pa.Table | None:
    """The HCCL tasks of a batch, with what matching them across ranks needs (None: none)."""
    comm = pc.equal(pc.cast(batch.column("task_type"), pa.string()), "COMMUNICATION")
    if not pc.any(comm).as_py():
        return None
    cols = {k: batch.column(k) for k in FLOW_COLUMNS}
    for k in ("op_type", "op_name"):
        cols[k] = pc.cast(cols[k], pa.string())
    return pa.table(cols).filter(pa.array(comm))


def rank_flows(rows: pa.Table, tp: int, pp: int) -> list[RankFlow]:
    """Flows between the traced ranks' HCCL tasks (`rows` from comm_rows, every traced rank): each collective's
    participants to the one that arrived last, each Send to its Receive; deterministic order."""
    if rows.num_rows == 0:
        return []
    r = {k: rows.column(k).to_numpy(zero_copy_only=False) for k in FLOW_COLUMNS}
    kind = np.char.startswith(r["op_type"].astype(str), "hcom_send")
    recv = np.char.startswith(r["op_type"].astype(str), "hcom_receive")
    index = np.array([int(n.rsplit("_", 1)[-1]) if n.rsplit("_", 1)[-1].isdigit() else 0 for n in r["op_name"]])
    replica = r["rank"] // (tp * pp)
    flows: list[RankFlow] = []
    groups: dict[tuple[int, ...], list[int]] = {}
    sends: dict[tuple[int, ...], int] = {}
    for i in range(rows.num_rows):
        base = (int(r["step"][i]), int(r["microbatch"][i]), int(replica[i]))
        if kind[i]:  # the boundary after its stage, the sender's tp rank, the n-th send of the pass
            at = (*base, int(r["stage"][i]), int(r["rank"][i]) % tp, int(index[i]))
            sends[at] = i
        elif not recv[i]:
            group = (*base, int(r["stage"][i]), int(r["node_id"][i]))
            groups.setdefault(group, []).append(i)
    for key in sorted(groups):
        members = groups[key]
        if len(members) < 2:
            continue
        last = max(members, key=lambda i: (int(r["task_start_ns"][i]), -int(r["rank"][i])))
        for i in sorted(members, key=lambda i: int(r["rank"][i])):
            if i != last:
                flows.append(_flow(r, str(r["op_type"][i]), i, last))
    for i in np.flatnonzero(recv).tolist():
        key = (int(r["step"][i]), int(r["microbatch"][i]), int(replica[i]), int(r["stage"][i]) - 1)
        j = sends.get((*key, int(r["rank"][i]) % tp, int(index[i])))
        if j is not None:
            flows.append(_flow(r, "pipeline", j, i))
    return flows


def _flow(r: dict[str, np.ndarray], name: str, src: int, dst: int) -> RankFlow:
    """From the middle of src's task to a point of dst's task no earlier: inside both slices, away from their
    edges (where a trace processor may bind a flow to the neighbouring slice), ordered in time (the processors
    sort flow events by time)."""
    a = int(r["task_start_ns"][src] + r["task_dur_ns"][src] // 2)
    lo, hi = int(r["task_start_ns"][dst]), int(r["task_start_ns"][dst] + r["task_dur_ns"][dst])
    b = min(max(lo + (hi - lo) // 2, a + 1), max(hi - 1, lo))
    src_at = (int(r["rank"][src]), int(r["stream_id"][src]), a)
    return RankFlow(name, *src_at, int(r["rank"][dst]), int(r["stream_id"][dst]), b)
