"""A vLLM-style continuous-batching scheduler over paged KV blocks, iteration by iteration.

Every running sequence has `pending` tokens to compute (its prompt, or after a preemption its prompt and what it
had generated; then 1 per decode step); an iteration computes some of them, and a sequence whose pending tokens
are all computed samples a token at the iteration's end. A sequence holds ceil(tokens in cache / block_size)
blocks.

- prefill_first (vLLM's scheduler without chunked prefill): if waiting requests fit (first come, first served:
  the whole prompt within max_num_batched_tokens, at most max_num_seqs running, their blocks free), an iteration
  of their prompts alone; else a decode iteration of every running sequence.
- chunked (chunked prefill, as vLLM V1): the running sequences in order get their tokens first (decodes 1, a
  partial prompt the rest of the budget), then waiting requests' prompts, chunked to the budget left.
- Out of blocks: the most recently admitted running sequence is preempted (its blocks freed; it goes back to the
  front of the queue and recomputes its prompt and output so far), as vLLM's preemption by recompute.

The iteration is priced by `pricing.IterationPricer`; the host runs one iteration after the other (the next starts
when the previous one's tokens are back), idle until the next arrival when nothing is queued. Engine replicas
(parallel.dp) each run this loop on their own KV cache, the requests sent to them by `serve_replicas`. The per-sequence
state lives in arrays; only admissions and preemptions walk sequences one by one.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field, replace

import numpy as np

from atbprof.config.models import WorkloadSection
from atbprof.errors import ConfigError
from atbprof.serving.pricing import IterationPricer
from atbprof.serving.requests import RequestStream

DEFAULT_BATCHED_TOKENS = 8192
"""max_num_batched_tokens when a serving workload leaves it out (vLLM's default has moved between releases, 2,048 to
8,192: docs/serving.md shows what it does to the tails)."""


@dataclass
class Iterations:
    """Per iteration (lists while simulating)."""

    start_ns: list[int] = field(default_factory=list)
    end_ns: list[int] = field(default_factory=list)
    device_ns: list[int] = field(default_factory=list)
    prefill_seqs: list[int] = field(default_factory=list)
    prefill_tokens: list[int] = field(default_factory=list)
    decode_seqs: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)  # sequences holding blocks after the iteration
    waiting: list[int] = field(default_factory=list)  # arrived, not running, at the iteration's start
    in_system: list[int] = field(default_factory=list)  # arrived and not finished, at the iteration's start
    kv_blocks_used: list[int] = field(default_factory=list)  # once the iteration's tokens are written
    preempted: list[int] = field(default_factory=list)
    replica: list[int] = field(default_factory=list)  # the engine replica that ran it (parallel.dp)


@dataclass(frozen=True)
class Served:
    arrival_ns: np.ndarray
    first_scheduled_ns: np.ndarray
    first_token_ns: np.ndarray
    finish_ns: np.ndarray
    preemptions: np.ndarray
    iterations: Iterations
    replica: np.ndarray  # per request: the engine replica that served it


class _Engine:
    def __init__(self, stream: RequestStream, w: WorkloadSection, kv_blocks: int, share: _Engine | None = None) -> None:
        """`share`: an engine whose per-request arrays this one uses too (replicas serve disjoint requests: memory
        stays one set of arrays for any number of them)."""
        n = len(stream)
        self.w, self.bs = w, w.block_size
        self.budget = w.max_num_batched_tokens or DEFAULT_BATCHED_TOKENS
        self.chunked = w.scheduler == "chunked"
        self.inp, self.out = stream.input_len, stream.output_len
        if share is None:
            self.computed = np.zeros(n, dtype=np.int64)  # tokens with their KV in the cache
            self.generated = np.zeros(n, dtype=np.int64)
            self.held = np.zeros(n, dtype=np.int64)  # blocks
            self.preemptions = np.zeros(n, dtype=np.int64)
        else:
            self.computed, self.generated, self.held = share.computed, share.generated, share.held
            self.preemptions = share.preemptions
        self.waiting: deque[int] = deque()
        self.running: list[int] = []
        self.free = self.kv_blocks = kv_blocks
        # this iteration's: request -> tokens computed, and how many were preempted
        self.take: dict[int, int] = {}
        self.preempted = 0

    def pending(self, r: int) -> int:
        return int(self.inp[r] + self.generated[r] - self.computed[r])

    def blocks_for(self, r: int, k: int) -> int:
        return -(-(int(self.computed[r]) + k) // self.bs) - int(self.held[r])

    def give(self, r: int, k: int) -> None:
        need = self.blocks_for(r, k)
        self.take[r] = k
        self.free -= need
        self.held[r] += need

    def preempt_last(self) -> None:
        victim = self.running.pop()
        self.free += int(self.held[victim])
        self.held[victim] = self.computed[victim] = 0
        self.preemptions[victim] += 1
        self.take.pop(victim, None)
        self.waiting.appendleft(victim)
        self.preempted += 1

    def schedule(self) -> None:
        """Fill `take` for one iteration."""
        self.take, self.preempted = {}, 0
        if not self.chunked and self.waiting and self._admit_whole():
            return
        left = self._running_tokens()
        if self.chunked and not self.preempted:  # then new prompts in the budget left
            while self.waiting and left > 0 and len(self.running) < self.w.max_num_seqs:
                r = self.waiting[0]
                k = min(self.pending(r), left)
                if self.blocks_for(r, k) > self.free:
                    break
                self.running.append(self.waiting.popleft())
                self.give(r, k)
                left -= k

    def _admit_whole(self) -> bool:
        """prefill_first: waiting requests first come first served while their whole prompts fit; True when any
        was admitted (the iteration is theirs alone)."""
        left = self.budget
        while self.waiting and len(self.running) < self.w.max_num_seqs:
            r = self.waiting[0]
            k = self.pending(r)
            if k > left or self.blocks_for(r, k) > self.free:
                break
            self.running.append(self.waiting.popleft())
            self.give(r, k)
            left -= k
        return bool(self.take)

    def _running_tokens(self) -> int:
        """The running sequences' tokens in order (decodes 1, a partial prompt the rest of the budget): all at once
        when their blocks are free (the common case), else one by one, preempting the most recent; the budget
        left."""
        left, bs = self.budget, self.bs
        run = np.array(self.running, dtype=np.int64)
        pend = self.inp[run] + self.generated[run] - self.computed[run]
        k = np.clip(left - (np.cumsum(pend) - pend), 0, pend) if self.chunked else pend
        need = np.where(k > 0, -(-(self.computed[run] + k) // bs) - self.held[run], 0)
        if int(need.sum()) <= self.free:
            sel = k > 0
            self.take.update(zip(run[sel].tolist(), k[sel].tolist(), strict=True))
            self.held[run] += need
            self.free -= int(need.sum())
            return left - int(k.sum())
        i = 0
        while i < len(self.running) and left > 0:
            r = self.running[i]
            n = min(self.pending(r), left) if self.chunked else self.pending(r)
            while self.blocks_for(r, n) > self.free and self.running[-1] != r:
                self.preempt_last()
            if self.blocks_for(r, n) > self.free:  # r itself is the most recent: back to the queue
                self.preempt_last()
                break
            self.give(r, n)
            left -= n
            i += 1
        return left


@dataclass
class _Outcome:
    """Per request (by its id in the stream), shared by the engines that serve them."""

    first_sched: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray

    @classmethod
    def of(cls, n: int) -> _Outcome:
        return cls(*(np.full(n, -1, dtype=np.int64) for _ in range(3)))


def _iterate(
    e: _Engine, t: int, pricer: IterationPricer, out: _Outcome, it: Iterations, replica: int
) -> tuple[int, np.ndarray]:
    """One iteration of engine `e` from host time t: scheduled, priced, its tokens written and sampled, recorded in
    `it`. Returns (its end, the requests it finished)."""
    n_waiting, n_in = len(e.waiting), len(e.waiting) + len(e.running)
    e.schedule()
    if not e.take:  # _check_fits rules this out: every request fits an empty cache and the budget
        raise AssertionError("serving: an iteration with nothing to compute")
    used = e.kv_blocks - e.free
    inp = e.inp
    ids = np.fromiter(e.take, dtype=np.int64, count=len(e.take))
    k = np.fromiter(e.take.values(), dtype=np.int64, count=len(e.take))
    computed, generated = e.computed, e.generated
    is_decode = (k == 1) & (generated[ids] > 0) & (computed[ids] + 1 == inp[ids] + generated[ids])
    dec, pre = ids[is_decode], ids[~is_decode]
    ctx = round(float((computed[dec] + 1).mean())) if len(dec) else 0
    if len(pre):
        priced = pricer.mixed(k[~is_decode], computed[pre], len(dec), ctx)
    else:
        priced = pricer.decode_only(len(dec), ctx)
    end = t + priced.wall_ns
    out.first_sched[ids[out.first_sched[ids] < 0]] = t
    computed[ids] += k
    emits = ids[computed[ids] == inp[ids] + generated[ids]]
    generated[emits] += 1
    out.first_token[emits[out.first_token[emits] < 0]] = end
    over = emits[generated[emits] >= e.out[emits]]
    if len(over):
        out.finish[over] = end
        e.free += int(e.held[over].sum())
        e.held[over] = 0
        gone = set(over.tolist())
        e.running[:] = [r for r in e.running if r not in gone]
    it.start_ns.append(t)
    it.end_ns.append(end)
    it.device_ns.append(priced.device_ns)
    it.prefill_seqs.append(len(pre))
    it.prefill_tokens.append(int(k[~is_decode].sum()))
    it.decode_seqs.append(len(dec))
    it.running.append(len(e.running))
    it.waiting.append(n_waiting)
    it.in_system.append(n_in)
    it.kv_blocks_used.append(used)
    it.preempted.append(e.preempted)
    it.replica.append(replica)
    return end, over


def serve(stream: RequestStream, pricer: IterationPricer, w: WorkloadSection, kv_blocks: int) -> Served:
    n = len(stream)
    e = _Engine(stream, w, kv_blocks)
    _check_fits(stream, w, e.budget, kv_blocks)
    arrival = stream.arrival_ns.copy()  # when each request is sent: later than the stream's with max_concurrency
    limit = w.max_concurrency or n
    in_flight, free_since = 0, 0  # requests sent and not finished; since when fewer than `limit` are
    out = _Outcome.of(n)
    it = Iterations()
    t, nxt, done = 0, 0, 0
    while done < n:
        while nxt < n and in_flight < limit and arrival[nxt] <= t:
            arrival[nxt] = max(arrival[nxt], free_since)  # a request waiting for a free slot is sent then
            e.waiting.append(nxt)
            nxt += 1
            in_flight += 1
        if not e.running and not e.waiting:
            t = int(arrival[nxt])
            continue
        end, over = _iterate(e, t, pricer, out, it, 0)
        if len(over):
            done += len(over)
            if in_flight == limit:
                free_since = end  # the client sends the next request as this one's tokens come back
            in_flight -= len(over)
        t = end
    return Served(arrival, out.first_sched, out.first_token, out.finish, e.preemptions, it, np.zeros(n, np.int64))


def serve_replicas(
    stream: RequestStream, pricer: IterationPricer, w: WorkloadSection, kv_blocks: int, replicas: int
) -> Served:
    """`replicas` engines (parallel.dp), each with its own KV cache, the requests sent to them by `w.dispatch`:
    - shortest_queue: each request, as it arrives, to the engine with the least waiting x 4 + running (the lowest
      index among equals), the score vLLM V1's front end balances its data-parallel engines by
      (DPLBAsyncMPClient.get_core_engine_for_request); here the counts are those the engine's next iteration finds,
      where vLLM's front end sees the engines' counts up to 100 ms old plus the requests it sent since;
    - round_robin: request i to engine i mod replicas.
    The iterations are merged in time order (engine order at a tie)."""
    if replicas == 1:
        return serve(stream, pricer, w, kv_blocks)
    n = len(stream)
    first = _Engine(stream, w, kv_blocks)
    engines = [first, *(_Engine(stream, w, kv_blocks, share=first) for _ in range(replicas - 1))]
    _check_fits(stream, w, first.budget, kv_blocks)
    clock = [0] * replicas  # when each engine's last iteration ends
    its = [Iterations() for _ in range(replicas)]
    out = _Outcome.of(n)
    replica = np.zeros(n, dtype=np.int64)
    busy: list[tuple[int, int]] = []  # (clock, engine) of the engines with work, a heap

    def advance(until: float) -> None:
        """Every engine's iterations that start before `until` (one starting at it sees what arrives then)."""
        while busy and busy[0][0] < until:
            t, k = heapq.heappop(busy)
            e = engines[k]
            clock[k], _ = _iterate(e, t, pricer, out, its[k], k)
            if e.running or e.waiting:
                heapq.heappush(busy, (clock[k], k))

    def load(j: int) -> tuple[int, int]:
        return 4 * len(engines[j].waiting) + len(engines[j].running), j

    in_turn = w.dispatch == "round_robin"
    for r, at in enumerate(stream.arrival_ns.tolist()):
        advance(at)
        k = r % replicas if in_turn else min(range(replicas), key=load)
        e = engines[k]
        if not e.running and not e.waiting:
            clock[k] = max(clock[k], at)  # an idle engine starts at the arrival
            heapq.heappush(busy, (clock[k], k))
        e.waiting.append(r)
        replica[r] = k
    advance(float("inf"))
    served = Served(
        stream.arrival_ns.copy(), out.first_sched, out.first_token, out.finish, first.preemptions, Iterations(), replica
    )
    return _with_iterations(served, its)


def _with_iterations(served: Served, per_engine: list[Iterations]) -> Served:
    """`served` with the engines' iterations merged in time order (engine order at a tie)."""
    merged = Iterations()
    columns = list(Iterations.__dataclass_fields__)
    for its in per_engine:
        for name in columns:
            getattr(merged, name).extend(getattr(its, name))
    order = np.lexsort((np.array(merged.replica), np.array(merged.start_ns))).tolist()
    for name in columns:
        values = getattr(merged, name)
        values[:] = [values[i] for i in order]
    return replace(served, iterations=merged)


def _check_fits(stream: RequestStream, w: WorkloadSection, budget: int, kv_blocks: int) -> None:
    """Refuse what no schedule could serve: a request whose tokens need more blocks than the cache holds, or a
    prompt (with its recomputed output) over the budget of a whole-prompt scheduler."""
    total = stream.input_len + stream.output_len
    blocks = -(-total // w.block_size)
    worst = int(np.argmax(blocks))
    if blocks[worst] > kv_blocks:
        raise ConfigError(
            f"workload: request {worst} needs {int(blocks[worst]):,} KV blocks of {w.block_size} tokens "
            f"({int(total[worst]):,} tokens) but the cache holds {kv_blocks:,}: shorten the requests, raise "
            "gpu_memory_utilization, use more tensor-parallel ranks or a device with more memory"
        )
    if budget < w.max_num_seqs:
        raise ConfigError(
            f"workload: max_num_seqs = {w.max_num_seqs:,} is above the token budget of {budget:,} "
            "(max_num_batched_tokens): set max_num_batched_tokens to at least max_num_seqs"
        )
    if w.scheduler == "prefill_first":
        longest = int(total.max()) - 1  # a preempted request recomputes its prompt and output so far
        if longest > budget:
            raise ConfigError(
                f"workload: a request of {longest + 1:,} tokens may need a prefill of {longest:,} tokens, more than "
                f"max_num_batched_tokens = {budget:,}: the prefill_first scheduler never splits a prompt; raise "
                "max_num_batched_tokens or use scheduler: chunked"
            )
