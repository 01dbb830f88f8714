"""Per-kernel cost model, evaluated over arrays: (unique kernel signature) x (step).

For each kernel: tile the work over cores (Block Dim; GEMMs in L0C-sized output tiles, in waves, with their K-loop
MTE2 traffic), time every pipe (Cube=mac, Vector, Scalar, MTE1, MTE2, MTE3, FixPipe) from the device's per-cycle
rates and bandwidths, overlap them by double buffering (a kernel takes its slowest pipe plus the non-overlapped
fill/drain of the others; a split-core MIX kernel hides only `mix_overlap` of its shorter side), bound a vector
kernel's traffic by the rate vector kernels are measured at, add the static per-task device cost and the
instruction-cache penalty of large composite fusions. Roofline invariant: no kernel is faster than its HBM bytes
over HBM bandwidth or its FLOPs over peak (tested for every op of every run).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from atbprof.device.collectives import CommGroups, collective_ns, transit_bytes
from atbprof.device.spec import DeviceSpec
from atbprof.graph.expr import BASIS, Lin
from atbprof.graph.memo import NodeMemo
from atbprof.graph.nodes import Graph, Node
from atbprof.optable.schema import PIPES

BOUND_NAMES = ("compute", "memory", "launch", "communication")
INT8_GEMMS = frozenset({"QuantBatchMatmulV3"})  # Work kinds that multiply int8 operands
TASK_TYPES = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "AI_CPU", "COMMUNICATION")


@dataclass
class KernelCosts:
    """Arrays (signatures, steps) unless noted; times in ns (float; rounded once by the timeline)."""

    dur: np.ndarray
    pipes: dict[str, np.ndarray]
    flops: np.ndarray
    hbm_read: np.ndarray
    hbm_write: np.ndarray
    block_dim: np.ndarray
    mix_block_dim: np.ndarray
    bound: np.ndarray  # index into BOUND_NAMES
    task_type: np.ndarray  # (signatures,) index into TASK_TYPES
    comm_bytes: np.ndarray  # bytes a collective sends over the links (msprof Transit Size), 0 for other kernels
    iters: np.ndarray | None = None  # tile iterations each kernel pipelines over (MC2 hides all but one's comm)


def _ceil_to(x: np.ndarray, m: int) -> np.ndarray:
    return np.ceil(x / m) * m


def _sig(node: Node) -> tuple[object, ...]:
    """Nodes with the same signature cost the same at every step (layers repeat the same graph)."""
    return (
        tuple(
            (
                w.unit,
                w.kind,
                w.mm and tuple(d.key() for d in w.mm),
                w.vec_bytes.key(),
                w.vec_flops.key(),
                w.stream_bytes.key(),
                w.comm_bytes.key(),
            )
            for w in node.work
        ),
        tuple(e.tensor.nbytes.key() for e in node.inputs),
        tuple(t.nbytes.key() for t in node.outputs),
        node.writes_params.key(),
        tuple(h.key() for h in node.handoff),
        node.units,
        node.icache,
    )


def signatures(graph: Graph) -> tuple[np.ndarray, list[Node]]:
    """(node -> signature index, one representative node per signature); remembered per node sequence."""
    out, reps = _GRAPH_SIGS(graph.nodes)
    return out.copy(), list(reps)


def _signatures(nodes: Sequence[Node]) -> tuple[np.ndarray, list[Node]]:
    index: dict[tuple[object, ...], int] = {}
    reps: list[Node] = []
    out = np.empty(len(nodes), dtype=np.int32)
    for i, n in enumerate(nodes):
        key = _sig(n)
        if key not in index:
            index[key] = len(reps)
            reps.append(n)
        out[i] = index[key]
    return out, reps


_GRAPH_SIGS = NodeMemo(_signatures)


class _Evaluator:
    def __init__(self, values: np.ndarray) -> None:
        self.v = values.astype(np.float64)

    def __call__(self, e: Lin) -> np.ndarray:
        return np.asarray(e.coef @ self.v)


def evaluate_costs(
    reps: list[Node],
    spec: DeviceSpec,
    values: np.ndarray,
    weights_nz: bool = False,
    block_caps: np.ndarray | None = None,
    comm_groups: CommGroups | None = None,
) -> KernelCosts:
    """Cost of each representative node at each step; `values` is (len(BASIS), steps) from `basis_values`.
    `block_caps` (reps, 2): the most cube / vector cores a kernel may use (a measured kernel's Block Dim).
    `comm_groups`: the ranks the graph's collectives and sends/receives run over (device/collectives.py)."""
    assert values.shape[0] == len(BASIS)
    ev = _Evaluator(values)
    steps = values.shape[1]
    u = len(reps)
    f = spec.clock_ghz  # cycles per ns
    eff = spec.efficiency
    hbm = spec.hbm_bytes_per_s / 1e9  # bytes per ns
    l2_bw = spec.l2.bandwidth_gbps
    l2_fit = spec.l2.size_mb * 1e6 / 2  # a tensor this small was just produced and is still in L2
    ub_tile = spec.buffers_kb.get("ub", 192) * 1024 / 2  # double-buffered UB tile
    # cube output tiles: 128 rows, the columns filling L0C with fp32 partial sums (A2: 128 x 256, the base block
    # of CANN's Ascend C Matmul tiling, baseM 128 / baseN 256 / baseK 64, L1 steps of 4 x baseK); narrower
    # candidates for matrices with too few tiles to occupy every core (GEMV tiling)
    tile_m = 128.0
    widest = max(16.0, (spec.buffers_kb.get("l0c", 128) * 1024 / 4 / tile_m) // 16 * 16)
    tile_ns = [w for w in (widest, 256.0, 128.0, 64.0, 32.0, 16.0) if w <= widest]
    z = lambda: np.zeros((u, steps))  # noqa: E731
    pipes = {p: z() for p in PIPES}
    flops, reads, writes = z(), z(), z()
    block, mix = np.ones((u, steps)), np.zeros((u, steps))
    iters = np.ones((u, steps))
    static = np.zeros((u, 1))
    task_type = np.zeros(u, dtype=np.int8)
    dur = z()
    comm_bytes = z()
    bound = np.zeros((u, steps), dtype=np.int8)
    caps = np.array([[spec.cores.aic, spec.cores.aiv]] * u, dtype=np.float64) if block_caps is None else block_caps
    for i, node in enumerate(reps):
        cap_cube, cap_vec = min(caps[i, 0], spec.cores.aic), min(caps[i, 1], spec.cores.aiv)
        units = {w.unit for w in node.work}
        has_cube, has_vec = "cube" in units, bool(units & {"vector"})
        comm_ns = np.zeros(steps)
        for w in node.work:
            if w.unit == "comm":
                if comm_groups is None or spec.topology is None:
                    raise AssertionError(f"{node.op_type}: a collective without a communication group")
                nb = ev(w.comm_bytes)
                group = comm_groups.of(w.kind)
                comm_ns += collective_ns(w.kind, group, nb)
                comm_bytes[i] += transit_bytes(w.kind, group, nb)
        if units == {"comm"}:  # an HCCL task: alpha-beta transfer over the topology, no core pipes
            task_type[i] = TASK_TYPES.index("COMMUNICATION")
            static_ns = spec.topology.collective_static_us * 1e3 if spec.topology else 0.0
            for e in node.inputs:
                reads[i] += ev(e.tensor.nbytes)
            for t in node.outputs:
                writes[i] += ev(t.nbytes)
            dur[i] = static_ns + comm_ns
            bound[i] = np.where(static_ns >= comm_ns, 2, 3)
            continue
        if units == {"aicpu"}:
            task_type[i], static[i] = 3, spec.static_cost_us.aicpu * 1e3
        elif has_cube and has_vec:
            task_type[i] = 2 if spec.cores.split else 0
            static[i] = spec.static_cost_us.mix * 1e3
        elif has_cube:
            task_type[i], static[i] = 0, spec.static_cost_us.cube * 1e3
        else:
            task_type[i] = 1 if spec.cores.split else 0
            static[i] = spec.static_cost_us.vector * 1e3
        bd_c = np.zeros(steps)
        bd_v = np.zeros(steps)
        stream_time = np.zeros(steps)
        operand_time = np.zeros(steps)
        fill_drain = np.zeros(steps)
        for w in node.work:
            if w.unit == "comm":
                continue
            stream = ev(w.stream_bytes)
            reads[i] += stream
            if w.mm is not None:
                b, m, k, n = (ev(d) for d in w.mm)
                # an int8 GEMM: twice the MACs per cycle (16 x 32 x 16 fractals), one byte per operand element
                int8 = w.kind in INT8_GEMMS
                macs = (spec.cube_int8_macs_per_cycle or spec.cube_macs_per_cycle) if int8 else spec.cube_macs_per_cycle
                elem = 1 if int8 else 2
                mp, kp, np_ = _ceil_to(m, 16), _ceil_to(k, 16), _ceil_to(n, 16)
                tm = np.minimum(tile_m, mp)
                # the widest tile that still gives every core an output tile, else the narrowest
                tn = np.minimum(tile_ns[-1], np_)
                for width in reversed(tile_ns[:-1]):
                    wide_enough = b * np.ceil(mp / tm) * np.ceil(np_ / np.minimum(width, np_)) >= cap_cube
                    tn = np.where(wide_enough, np.minimum(width, np_), tn)
                out_tiles = np.maximum(b * np.ceil(mp / tm) * np.ceil(np_ / tn), 1)
                # still too few output tiles for the cores (a decode GEMV with a narrow N): split K over the idle
                # cores, as GEMV kernels do, in 256-deep slices; the partial sums are added in the output (fixpipe)
                k_split = np.clip(np.floor(cap_cube / out_tiles), 1, np.maximum(np.ceil(kp / 256), 1))
                tiles = out_tiles * k_split
                bd = np.minimum(cap_cube, tiles)
                bd_c = np.maximum(bd_c, bd)
                waves = np.ceil(tiles / bd)  # the last wave leaves cores idle: quantised, not averaged
                kt = kp / k_split
                pipes["mac"][i] += waves * tm * tn * kt / (macs * f * eff.cube)
                # each tile streams its A rows and B columns over its whole K through MTE2 (L2 hits after the
                # first read): the K-loop traffic that bounds wide-K GEMMs
                operand_time += waves * (tm + tn) * kt * elem / (spec.l2_read_bytes_per_cycle * f)
                # every wave starts by loading its first K slice before the cube can start and ends by draining
                # its tile through FixPipe: not hidden by double buffering within the tile
                first = (tm + tn) * np.minimum(kt, 256) * elem / (spec.l2_read_bytes_per_cycle * f)
                fill_drain += waves * (first + tm * tn * 2 / (spec.fixpipe_bytes_per_cycle * f))
                pipes["mte1"][i] += (
                    b
                    * (mp * kp * np.ceil(np_ / 256) + kp * np_ * np.ceil(mp / 128))
                    * elem
                    / (bd * spec.mte1_bytes_per_cycle * f)
                )
                pipes["fixpipe"][i] += b * m * n * 2 * k_split / (bd * spec.fixpipe_bytes_per_cycle * f)
                flops[i] += 2 * b * m * k * n
                iters[i] = np.maximum(iters[i], np.ceil(tiles / bd) * np.ceil(kp / 256 / k_split))
                # weights stored ND are reformatted to the cube's NZ fractals while MTE2 streams them (calibrated
                # efficiency); hidden when the GEMM is compute-bound (prefill). Not the KV cache.
                nd = (not weights_nz) and w.kind == "MatMulV2"
                bw = (eff.gemv_nd if nd else eff.hbm_stream) * hbm
                stream_time += stream / np.minimum(bw, bd * spec.core_gm_bytes_per_cycle * f)
            else:
                vb = ev(w.vec_bytes)
                # what a vector kernel streams (a KV cache read by fused attention) passes through UB tiles too: it
                # is split over cores like its vector work, not pushed through one core's GM port
                tiles = np.maximum(np.ceil(np.maximum(vb, stream) / ub_tile), 1)
                bd = np.minimum(cap_vec, tiles)
                bd_v = np.maximum(bd_v, bd)
                pipes["vec"][i] += vb / (bd * spec.vector_bytes_per_cycle * f * eff.vector)
                flops[i] += ev(w.vec_flops)
                iters[i] = np.maximum(iters[i], np.ceil(tiles / bd))
                bw = eff.hbm_stream * hbm
                stream_time += stream / np.minimum(bw, bd * spec.core_gm_bytes_per_cycle * f)
        bd_all = np.maximum(np.maximum(bd_c, bd_v), 1)
        port = bd_all * spec.core_gm_bytes_per_cycle * f
        act_bw_hbm = (eff.vector_hbm if not has_cube else eff.hbm_stream) * hbm
        act_in = np.zeros(steps)
        l2_bytes = np.zeros(steps)  # traffic served by L2: inputs just produced, outputs read soon
        for e in node.inputs:
            nb = ev(e.tensor.nbytes)
            reads[i] += np.where(nb <= l2_fit, 0, nb)
            l2_bytes += np.where(nb <= l2_fit, nb, 0)
            act_in += nb / np.minimum(np.where(nb <= l2_fit, l2_bw, act_bw_hbm), port)
        pipes["mte2"][i] += np.maximum(stream_time + act_in, operand_time)
        cache_writes = ev(node.writes_params)  # KV-cache updates land in HBM
        out_bytes = sum((ev(t.nbytes) for t in node.outputs), np.zeros(steps)) + cache_writes
        writes[i] += np.where(out_bytes - cache_writes <= l2_fit, 0, out_bytes - cache_writes) + cache_writes
        l2_bytes += np.where(out_bytes - cache_writes <= l2_fit, out_bytes - cache_writes, 0)
        out_time = out_bytes / np.minimum(np.where(out_bytes <= l2_fit, l2_bw, act_bw_hbm), port)
        if has_vec or not has_cube:
            pipes["mte3"][i] += out_time * (1 if has_vec and not has_cube else 0.5)
            pipes["fixpipe"][i] += out_time * (0 if not has_cube else 0.5)
        else:
            pipes["fixpipe"][i] += out_time
        if spec.cores.split:
            # no L0C->UB path on A2: cube<->vector hand-offs inside a fused kernel go through L2 (write + read)
            for h in node.handoff:
                hb = ev(h) * 2 / (l2_bw * 1.0)
                pipes["mte2"][i] += hb / 2
                pipes["mte3"][i] += hb / 2
        if spec.cores.split and has_cube and has_vec:
            block[i], mix[i] = bd_c, np.minimum(2 * bd_c, spec.cores.aiv)
        elif has_cube:
            block[i] = np.maximum(bd_c, 1)
        else:
            block[i] = np.maximum(bd_v, 1)
        icache = 1.0
        if node.icache and node.units > spec.fusion_icache.free_ops:
            icache += spec.fusion_icache.penalty_per_op * (node.units - spec.fusion_icache.free_ops)
        pipes["scalar"][i] = 0.04 * np.maximum.reduce([pipes[p][i] for p in ("mac", "vec", "mte2")]) + 0.3 * iters[i]
        per_block = spec.block_scalar_cycles.get(node.op_type)
        if per_block and node.work[0].mm is not None:  # FlashAttention's block bookkeeping on the AIC scalar unit
            b, m, _, n = (ev(d) for d in node.work[0].mm)
            blocks = b * np.ceil(m / 128) * np.ceil(n / 128)
            pipes["scalar"][i] = np.maximum(pipes["scalar"][i], blocks * per_block / (f * np.maximum(bd_c, 1)))
        stacked = np.stack([pipes[p][i] for p in PIPES])
        longest = stacked.max(axis=0)
        # double buffering overlaps pipes across tile iterations; fill and drain are not overlapped
        exec_ns = longest + (stacked.sum(axis=0) - longest) / np.maximum(iters[i], 1)
        # the cube's own critical path: its MACs plus each wave's fill and drain (a streaming GEMV hides them in
        # its weight stream; a compute-bound GEMM pays them)
        exec_ns = np.maximum(exec_ns, pipes["mac"][i] + fill_drain)
        if has_cube:
            # a GEMM's cube waits on its MTE2 operand loads part of the time, even double-buffered: the real
            # kernels' PMU counters show the MAC pipe at peak while busy, yet busy only 52-82 % of the duration
            # (fused kernels with a GEMM inside load its operands the same way)
            mac_side, load_side = pipes["mac"][i], pipes["mte2"][i]
            exec_ns = np.maximum(
                exec_ns,
                np.maximum(mac_side, load_side) + (1 - eff.mac_mte2_overlap) * np.minimum(mac_side, load_side),
            )
        if has_cube and has_vec and spec.cores.split:
            # a MIX kernel's cube and vector cores hand each block over through GM and wait on each other's
            # flags: only `mix_overlap` of the shorter side hides under the longer one
            cube_side = np.maximum.reduce([pipes[p][i] for p in ("mac", "mte1", "fixpipe")])
            vec_side = np.maximum(pipes["vec"][i], pipes["mte3"][i])
            shorter = np.minimum(cube_side, vec_side)
            exec_ns = np.maximum(exec_ns, np.maximum(cube_side, vec_side) + (1 - eff.mix_overlap) * shorter)
        # reads and writes share the HBM: their sum can not move faster than the streaming bandwidth
        exec_ns = np.maximum(exec_ns, (reads[i] + writes[i]) / (eff.hbm_stream * hbm))
        if not has_cube:
            # vector_hbm is the measured rate of eager elementwise kernels in bytes read plus written (M2: 640
            # GB/s); no faster rate is published for data L2 holds, so all of a vector kernel's traffic moves at it
            # a fill reads nothing: vector_hbm, measured on kernels that read and write, does not describe its
            # one-way write stream, which moves at the streaming rate (a 3 GB ZerosLike on the Qwen3 sample:
            # 1.59 TB/s)
            fill = not node.inputs and not node.params
            rate = np.where(fill, eff.hbm_stream, eff.vector_hbm) * hbm
            exec_ns = np.maximum(exec_ns, (reads[i] + writes[i] + l2_bytes) / rate)
        exec_ns *= icache * spec.op_time_scale.get(node.op_type, 1.0)  # 1 unless a calibrated spec says
        if "comm" in units:
            # MC2 (MatMul + collective in one kernel): each finished tile is sent while the next is computed, so
            # only one tile's share of the shorter side shows
            longer, shorter = np.maximum(exec_ns, comm_ns), np.minimum(exec_ns, comm_ns)
            exec_ns = longer + shorter / np.maximum(iters[i], 1)
        for p in PIPES:
            pipes[p][i] = np.minimum(pipes[p][i] * icache, exec_ns)
        dur[i] = static[i, 0] + exec_ns
        bound[i] = np.where(
            static[i, 0] >= exec_ns, 2, np.where(np.argmax(stacked, axis=0) <= PIPES.index("scalar"), 0, 1)
        )
    return KernelCosts(dur, pipes, flops, reads, writes, block, mix, bound, task_type, comm_bytes, iters)
