"""One step of a deployment's timeline: every microbatch's pass through every pipeline stage, on the host and
device of each rank class (sim/timeline.py runs one pass of one class).

A pass (microbatch i, stage s) starts on its host once the host is free (the last stage's host waits for its
sampled token; the others go on once a pass is launched) and - stage 0 - microbatch i's previous token is back, or
- later stages - stage 0 has started the pass. A Receive ends no earlier than the previous stage's matching Send;
a collective of a rank that is not its tp group's slowest ends no earlier than the slowest rank's. Without stages
and microbatches this is the single-device step: host start, device tasks, token back on the host."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from atbprof.parallel.plan import ParallelPlan, RankClass
from atbprof.sim.models import RankTimes, TimedChunk
from atbprof.sim.timeline import HostModel, StepTimeline, simulate_step


@dataclass
class StepOutcome:
    """Per rank class (index into `ParallelPlan.classes`): the end of its step (its token on the host on the last
    stage), its first task's start, and how long its collectives waited for the group's slowest rank."""

    ends: dict[int, int] = field(default_factory=dict)
    first_start: dict[int, int] = field(default_factory=dict)
    waited: dict[int, int] = field(default_factory=dict)


class DeploymentClock:
    """The host and device clocks of every rank class, carried from step to step."""

    def __init__(self, plan: ParallelPlan, host: HostModel) -> None:
        self.plan, self.host = plan, host
        self.index_of = {id(rc): c for c, rc in enumerate(plan.classes)}
        n_pipes, pp, m = len(plan.pipelines), plan.pp, plan.microbatches
        self.host_free = [[0] * pp for _ in range(n_pipes)]  # per pipeline and stage
        self.token_ready = [[0] * m for _ in range(n_pipes)]  # per pipeline and microbatch: its last token on the host
        self.prev_end = [0] * len(plan.classes)  # per class: its device's last task end
        self._chunk: list[TimedChunk] | None = None
        self._times: dict[int, RankTimes] = {}

    def batch_token(self, pipeline: int = 0) -> int:
        """When the whole batch of `pipeline` last had its token (its last microbatch's)."""
        return self.token_ready[pipeline][-1]

    def step(self, tcs: list[TimedChunk], j: int) -> StepOutcome:
        """Step `j` of the chunk (`tcs`: one per stage); fills the classes' start / dur / wait rows in place."""
        out = StepOutcome()
        if self._chunk is not tcs:  # the classes' timelines change per chunk, not per step
            self._chunk = tcs
            self._times = {self.index_of[id(rt.cls)]: rt for tc in tcs for rt in tc.ranks}
        times = self._times
        for p, pipe in enumerate(self.plan.pipelines):
            for i in range(self.plan.microbatches):
                first_host = max(self.host_free[p][0], self.token_ready[p][i])
                send_end: np.ndarray | None = None
                for s, stage_classes in enumerate(pipe.stages):
                    host_start = first_host if s == 0 else max(self.host_free[p][s], first_host)
                    send_end = self._pass(tcs[s], j, i, (p, s), stage_classes, times, host_start, send_end, out)
        return out

    def _pass(
        self,
        tc: TimedChunk,
        j: int,
        i: int,
        where: tuple[int, int],
        stage_classes: tuple[RankClass, ...],
        times: dict[int, RankTimes],
        host_start: int,
        send_end: np.ndarray | None,
        out: StepOutcome,
    ) -> np.ndarray:
        """Microbatch i's pass on one stage, every rank class of it (the critical one first); returns the ends of
        the pass's Sends (the latest over the classes), which the next stage's Receives wait for."""
        p, s = where
        last_stage = s == self.plan.pp - 1
        pm = tc.pm
        n = pm.pass_nodes
        lo, hi = i * n, (i + 1) * n
        recv, sends, sync = pm.receive[lo:hi], pm.send[lo:hi], pm.sync[lo:hi]
        recv_floor = None
        if recv.any():
            assert send_end is not None and len(send_end) == int(recv.sum())
            recv_floor = np.zeros(n, dtype=np.int64)
            recv_floor[recv] = send_end
        stage_send = np.zeros(int(sends.sum()), dtype=np.int64)
        crit: RankTimes | None = None
        for rc in stage_classes:
            c = self.index_of[id(rc)]
            rt = times[c]
            floor = recv_floor
            if not rc.critical:  # its collectives end when the group's slowest rank's do
                assert crit is not None
                tp_floor = np.where(sync, crit.start[j, lo:hi] + crit.dur[j, lo:hi], 0)
                floor = tp_floor if floor is None else np.maximum(floor, tp_floor)
            dur = rt.dur[j, lo:hi]
            disp = None if tc.disp is None else tc.disp[j, lo:hi]
            tl = simulate_step(dur, disp, self.host, host_start, self.prev_end[c], floor)
            rt.start[j, lo:hi], rt.wait[j, lo:hi] = tl.start, tl.wait
            out.waited[c] = out.waited.get(c, 0) + int((tl.end - tl.start - dur)[sync & ~recv].sum())
            rt.dur[j, lo:hi] = tl.end - tl.start
            if rt.lstart is not None and tl.launch_start is not None:
                rt.lstart[j, lo:hi] = tl.launch_start
            self.prev_end[c] = int(tl.end[-1])
            out.ends[c] = tl.sync_end if last_stage else int(tl.end[-1])
            out.first_start.setdefault(c, int(tl.start[0]))
            stage_send = np.maximum(stage_send, tl.end[sends])
            if crit is None:  # the critical class leads its stage: its host and token pace the others
                crit = rt
                self.host_free[p][s] = self._host_free(tl, last_stage)
                if last_stage:
                    self.token_ready[p][i] = tl.sync_end
        return stage_send

    def _host_free(self, tl: StepTimeline, last_stage: bool) -> int:
        """When a stage's host may start its next pass: the last stage waits for the sampled token; the others
        go on once the pass is launched."""
        if last_stage:
            return tl.sync_end
        if tl.launch_start is not None and tl.launch_dur is not None:
            return int(tl.launch_start[-1] + tl.launch_dur[-1])
        return tl.host_start + self.host.step_overhead_ns + self.host.graph_launch_ns
