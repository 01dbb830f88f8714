"""The time of one serving iteration, from the run's own device model, fusion rules and host model.

An iteration runs the model once over every token it schedules: decode tokens (one per running sequence) and
prompt chunks. Its kernels are the fused graph of the run's config (the prefill graph when the iteration has a
prompt chunk, else the decode graph), each launched once:
- a kernel priced per token (linears, norms, RoPE, collectives: its cost is the same for one sequence of 2t tokens
  as for two of t, whatever the KV length) is priced at the iteration's tokens: decode-only at batch n x 1 token,
  with prompt chunks as one batch of T tokens (T = all tokens scheduled);
- a kernel priced per sequence (attention, whose cost moves with the KV length; the LM head over each sequence's
  last token) is priced per group: the decode sequences as one batch at their mean context, each prompt chunk
  alone at its length and cached prefix; with both in one iteration the decode group's time of each layer is added
  to that layer's first such kernel of the prompt graph.
The kernels then run through the host model of `execution` (eager launches with their dispatch and queue, or one
graph launch) with its per-iteration host overhead, ending when the sampled tokens are back on the host: the same
step timeline `atbprof run` uses, so one request alone gets exactly a batch-1 run's prefill and decode steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from atbprof.device.kernels import evaluate_costs
from atbprof.graph.expr import basis_values
from atbprof.sim.models import PhaseModel
from atbprof.sim.simulate import Simulation
from atbprof.sim.timeline import simulate_step

_BLOCK = 512
"""Token counts evaluated together when a table of per-token costs is extended."""
_MEMO = 1 << 17
"""Decode shapes (sequences, mean KV length) remembered at most: memory bounded for any stream, every iteration of
a 10,000-request run remembered."""


@dataclass(frozen=True)
class Priced:
    wall_ns: int  # host start to the tokens back on the host
    device_ns: int  # kernel time (busy)


class _Phase:
    """One phase graph: which representative kernels depend on the context, per-node arrays, dispatch costs."""

    def __init__(self, sim: Simulation, pm: PhaseModel) -> None:
        self.pm, self.sim = pm, sim
        # a kernel is per sequence when its cost moves with the KV length, or differs between one sequence of 128
        # tokens and two of 64 (causal attention, the LM head of the last tokens); the rest is priced per token
        probe = self.costs(np.array([1, 1, 1, 2]), np.array([1, 1, 128, 64]), np.array([1024, 4096, 128, 64]))
        self.ctx_rep = (probe[:, 0] != probe[:, 1]) | (probe[:, 2] != probe[:, 3])
        self.ctx_reps = [r for r, c in zip(pm.reps, self.ctx_rep, strict=True) if c]
        self.ctx_node = self.ctx_rep[pm.sig]
        self.ctx_index = np.cumsum(self.ctx_rep) - 1  # rep -> its row among the context reps
        host = sim.host
        self.dispatch: np.ndarray | None = None
        if host.mode == "eager":
            self.dispatch = np.full(len(pm.sig), host.dispatch_ns, dtype=np.int64)
            self.dispatch[pm.comm] = host.collective_launch_ns
        # per layer, the first context node (where a decode group's attention joins a prompt iteration's)
        layers = pm.layer[self.ctx_node]
        at = np.flatnonzero(self.ctx_node)
        _, first = np.unique(layers, return_index=True)
        self.layer_first = dict(zip(layers[first].tolist(), at[first].tolist(), strict=True))
        self.flat: dict[int, np.ndarray] = {}  # block of token counts -> (reps, _BLOCK) durations

    def costs(self, batch: np.ndarray, sq: np.ndarray, skv: np.ndarray, reps: list | None = None) -> np.ndarray:
        values = basis_values(batch, sq, skv, experts=self.sim.dims.moe)  # type: ignore[arg-type]
        st = self.sim.stages[0]
        return evaluate_costs(
            self.pm.reps if reps is None else reps,
            self.sim.device,
            values,
            self.sim.weights_nz,
            comm_groups=st.comm,
        ).dur

    def flat_costs(self, tokens: int, decode: bool) -> np.ndarray:
        """Durations of every representative at `tokens` tokens (decode: a batch of that many sequences x 1 token;
        prompt: one batch of that many tokens); only the context-free ones are used."""
        block = tokens // _BLOCK
        if block not in self.flat:
            t = np.arange(block * _BLOCK, (block + 1) * _BLOCK, dtype=np.int64)
            t[t == 0] = 1
            one = np.ones_like(t)
            self.flat[block] = self.costs(t, one, one) if decode else self.costs(one, t, t)
        return self.flat[block][:, tokens % _BLOCK]


class IterationPricer:
    def __init__(self, sim: Simulation) -> None:
        self.sim, self.host = sim, sim.host
        self.decode = _Phase(sim, sim.phases["decode"])
        self.prefill = _Phase(sim, sim.phases["prefill"])
        self._decode_ctx: dict[tuple[int, int], np.ndarray] = {}
        self._decode_walls: dict[tuple[int, int], Priced] = {}

    def _decode_group(self, n: int, ctx: int) -> np.ndarray:
        """Durations of the decode graph's context reps for n sequences at a mean KV length ctx."""
        key = (n, ctx)
        if key not in self._decode_ctx:
            if len(self._decode_ctx) >= _MEMO:
                self._decode_ctx.clear()
            d = self.decode
            self._decode_ctx[key] = d.costs(np.array([n]), np.array([1]), np.array([ctx]), d.ctx_reps)[:, 0]
        return self._decode_ctx[key]

    def decode_only(self, n: int, ctx: int) -> Priced:
        """n sequences, one token each, at a mean KV length (after appending) of ctx."""
        key = (n, ctx)
        if key not in self._decode_walls:
            if len(self._decode_walls) >= _MEMO:
                self._decode_walls.clear()
            d = self.decode
            reps = d.flat_costs(n, decode=True).copy()
            reps[d.ctx_rep] = self._decode_group(n, ctx)
            self._decode_walls[key] = self._run(reps[d.pm.sig], d)
        return self._decode_walls[key]

    def mixed(self, chunks: np.ndarray, prefixes: np.ndarray, n_decode: int, decode_ctx: int) -> Priced:
        """Prompt chunks (tokens, cached prefix before them) and n_decode decode sequences in one iteration."""
        p = self.prefill
        tokens = int(chunks.sum()) + n_decode
        reps = p.flat_costs(tokens, decode=False).copy()
        if p.ctx_reps:
            per_chunk = p.costs(np.ones_like(chunks), chunks, prefixes + chunks, p.ctx_reps)
            reps[p.ctx_rep] = per_chunk.sum(axis=1)
        dur = reps[p.pm.sig]
        if n_decode and self.decode.ctx_reps:
            d = self.decode
            group = self._decode_group(n_decode, decode_ctx)[d.ctx_index[d.pm.sig[d.ctx_node]]]
            layers = d.pm.layer[d.ctx_node]
            last = int(np.flatnonzero(p.ctx_node)[-1]) if p.ctx_node.any() else len(dur) - 1
            for layer in np.unique(layers).tolist():
                dur[p.layer_first.get(layer, last)] += group[layers == layer].sum()
        return self._run(dur, p)

    def _run(self, dur_f: np.ndarray, phase: _Phase) -> Priced:
        dur = np.maximum(np.rint(dur_f).astype(np.int64), 1)
        tl = simulate_step(dur, phase.dispatch, self.host, 0, 0)
        return Priced(wall_ns=int(tl.sync_end), device_ns=int(dur.sum()))
