"""The cluster's communication (pure): per op and rank its time split and bandwidth per transport (summed over
steps), the matrix of links (src -> dst per transport), slow links, and which rank the others waited for.

Waiting: the ranks of one collective (the same op name and communicator in a step) arrive at different times; the
one that waited least is the one the others waited for. A link is slow when it carried at least 1 MB at under half
the median bandwidth of its transport's links (no nominal figure is assumed for a real cluster's links)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.importers.cluster import Cluster

SLOW_LINK_SHARE = 0.5
SLOW_LINK_MIN_MB = 1.0


def op_table(cluster: Cluster) -> pa.Table:
    """Per rank and op: count over steps and summed times (ms); with its transit size and time per transport."""
    ops = cluster.op_sums  # summed as the cluster was read (importers/cluster_ops.py)
    ops = ops.rename_columns([n.removesuffix("_sum") for n in ops.column_names])
    # every key in the order: a hash group-by's output order is its own (ranks summed apart give another)
    keys = [("rank", "ascending"), ("name", "ascending"), ("section", "ascending"), ("group", "ascending")]
    return ops.rename_columns([{"step_count": "count"}.get(n, n) for n in ops.column_names]).sort_by(keys)


def bandwidth_table(cluster: Cluster) -> pa.Table:
    """Per rank, op and transport: transit size (MB) and time (ms) over steps, bandwidth = size / time (GB/s)."""
    agg = cluster.bandwidth  # summed over steps as the cluster was read (cluster_tables.sum_bandwidth)
    bw = pc.if_else(pc.greater(agg.column("time_ms"), 0), pc.divide(agg.column("size_mb"), agg.column("time_ms")), 0.0)
    return agg.append_column("bandwidth_gbps", bw).sort_by([("rank", "ascending"), ("name", "ascending")])


def matrix_table(cluster: Cluster) -> pa.Table:
    """Per link (src -> dst, transport): size (MB) and time (ms) over steps and ops, bandwidth (GB/s); a rank's own
    LOCAL copies left out. Each link counted once (from the sending rank's file where both report it)."""
    m = cluster.matrix.filter(pc.not_equal(cluster.matrix.column("transport"), "LOCAL"))
    m = m.filter(pc.equal(m.column("rank"), m.column("src_rank")))
    agg = m.group_by(["src_rank", "dst_rank", "transport"], use_threads=False).aggregate(
        [("size_mb", "sum"), ("time_ms", "sum")]
    )
    agg = agg.rename_columns([n.removesuffix("_sum") for n in agg.column_names])
    bw = pc.if_else(pc.greater(agg.column("time_ms"), 0), pc.divide(agg.column("size_mb"), agg.column("time_ms")), 0.0)
    return agg.append_column("bandwidth_gbps", bw).sort_by([("src_rank", "ascending"), ("dst_rank", "ascending")])


def slow_links(matrix: pa.Table) -> pa.Table:
    """Links that moved >= 1 MB at under half the median bandwidth of their transport."""
    keep = []
    for transport in pc.unique(matrix.column("transport")).to_pylist():
        rows = matrix.filter(
            pc.and_(pc.equal(matrix.column("transport"), transport), pc.greater_equal(matrix.column("size_mb"), 1.0))
        )
        if rows.num_rows < 2:
            continue
        median = float(pc.approximate_median(rows.column("bandwidth_gbps")).as_py())
        keep.append(rows.filter(pc.less(rows.column("bandwidth_gbps"), SLOW_LINK_SHARE * median)))
    return pa.concat_tables(keep) if keep else matrix.slice(0, 0)


def waited_for(cluster: Cluster) -> dict[int, int]:
    """Per rank: how many collectives (op, communicator, step) it was the one the others waited for (it waited
    least; only collectives with two or more ranks in the cluster)."""
    c = cluster.collectives
    if not len(c.rank):
        return {}
    # vectorised (a large cluster has millions of op rows): sort by collective, then wait; per collective the
    # first row waited least, and counts when it waited strictly less than the second
    ids, wait, rank = c.ids(), c.wait_ms, c.rank
    order = np.lexsort((rank, wait, ids))
    ids, wait, rank = ids[order], wait[order], rank[order]
    first = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    size = np.diff(np.r_[first, len(ids)])
    multi = first[size >= 2]
    clear = multi[wait[multi] < wait[multi + 1]]  # ties: nobody was waited for
    winners, counts = np.unique(rank[clear], return_counts=True)
    return {int(r): int(c) for r, c in zip(winners.tolist(), counts.tolist(), strict=True)}
