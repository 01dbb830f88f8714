"""The host->device task queue: recurrences checked against a plain per-task loop (Hypothesis)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from atbprof.sim.timeline import HostModel, simulate_step


def reference(dur, disp, host: HostModel, host_start: int, prev_end: int):
    """The obvious sequential model: launch i after launch i-1 and after task i-Q ended; run when ready."""
    n = len(dur)
    ls = np.zeros(n, np.int64)
    s = np.zeros(n, np.int64)
    e = np.zeros(n, np.int64)
    t_host = host_start + host.step_overhead_ns
    last = prev_end
    for i in range(n):
        if i >= host.queue_depth:
            t_host = max(t_host, e[i - host.queue_depth])
        ls[i] = t_host
        t_host += disp[i]
        s[i] = max(last, ls[i] + disp[i] + host.latency_ns)
        e[i] = s[i] + dur[i]
        last = e[i]
    return ls, s, e


@settings(max_examples=80, deadline=None)
@given(
    durs=st.lists(st.integers(1, 300_000), min_size=1, max_size=300),
    dispatch=st.integers(0, 80_000),
    depth=st.integers(1, 64),
    latency=st.integers(0, 10_000),
    prev_end=st.integers(0, 10**9),
)
def test_eager_queue_matches_the_sequential_model(durs, dispatch, depth, latency, prev_end) -> None:
    host = HostModel("eager", dispatch, 0, 0, latency, depth, 700_000, 20_000)
    dur = np.array(durs, np.int64)
    disp = np.full(len(dur), dispatch, np.int64)
    tl = simulate_step(dur, disp, host, prev_end + 5, prev_end)
    ls, s, e = reference(dur, disp, host, prev_end + 5, prev_end)
    assert (tl.launch_start == ls).all() and (tl.start == s).all() and (tl.end == e).all()
    # Task Wait Time is the gap since the previous task ended
    assert (tl.wait[1:] == tl.start[1:] - tl.end[:-1]).all() and (tl.wait >= 0).all()
    # a task never starts before its launch finished and reached the device
    assert (tl.start >= tl.launch_start + disp + latency).all()
    # the host never has more than `depth` tasks outstanding
    for i in range(depth, len(dur)):
        assert tl.launch_start[i] >= tl.end[i - depth]
    assert tl.sync_end == tl.end[-1] + host.sync_ns


def test_graph_mode_runs_back_to_back_after_one_launch() -> None:
    host = HostModel("graph", 0, 60_000, 1_500, 5_000, 1024, 300_000, 20_000)
    dur = np.array([10_000, 20_000, 5_000], np.int64)
    tl = simulate_step(dur, None, host, 1_000_000, 900_000)
    assert tl.launch_start is None
    assert tl.start[0] == 1_000_000 + 300_000 + 60_000 + 5_000
    assert list(tl.wait[1:]) == [1_500, 1_500]


def test_host_bound_device_waits_for_every_launch() -> None:
    host = HostModel("eager", 45_000, 0, 0, 5_000, 1024, 0, 0)
    dur = np.full(100, 3_000, np.int64)
    tl = simulate_step(dur, np.full(100, 45_000, np.int64), host, 0, 0)
    assert (tl.wait[1:] == 42_000).all()  # 45 us launch cadence minus the 3 us kernel


def reference_with_floors(dur, disp, host: HostModel, host_start: int, prev_end: int, floor):
    """The sequential model where task i may not end before floor[i] (a collective waiting for the slowest rank)."""
    n = len(dur)
    s = np.zeros(n, np.int64)
    e = np.zeros(n, np.int64)
    t_host = host_start + host.step_overhead_ns
    last = prev_end
    if host.mode == "graph":
        ready = t_host + host.graph_launch_ns + host.latency_ns
        for i in range(n):
            s[i] = max(last, ready) if i == 0 else last + host.device_gap_ns
            e[i] = max(s[i] + dur[i], floor[i])
            last = e[i]
        return s, e
    for i in range(n):
        if i >= host.queue_depth:
            t_host = max(t_host, e[i - host.queue_depth])
        ls = t_host
        t_host += disp[i]
        s[i] = max(last, ls + disp[i] + host.latency_ns)
        e[i] = max(s[i] + dur[i], floor[i])
        last = e[i]
    return s, e


@settings(max_examples=80, deadline=None)
@given(
    durs=st.lists(st.integers(1, 300_000), min_size=1, max_size=200),
    floors=st.lists(st.integers(0, 30_000_000), min_size=200, max_size=200),
    floored=st.lists(st.booleans(), min_size=200, max_size=200),
    mode=st.sampled_from(["eager", "graph"]),
    dispatch=st.integers(0, 80_000),
    depth=st.integers(1, 64),
)
def test_collective_floors_match_the_sequential_model(durs, floors, floored, mode, dispatch, depth) -> None:
    host = HostModel(mode, dispatch, 60_000, 1_500, 5_000, depth, 700_000, 20_000)
    dur = np.array(durs, np.int64)
    n = len(dur)
    floor = np.where(np.array(floored[:n]), np.array(floors[:n], np.int64), 0)
    disp = np.full(n, dispatch, np.int64)
    tl = simulate_step(dur, disp if mode == "eager" else None, host, 1_000, 500, floor)
    s, e = reference_with_floors(dur, disp, host, 1_000, 500, floor)
    assert np.array_equal(tl.start, s) and np.array_equal(tl.end, e)
    # no floor: exactly the timeline without floors
    plain = simulate_step(dur, disp if mode == "eager" else None, host, 1_000, 500)
    zero = simulate_step(dur, disp if mode == "eager" else None, host, 1_000, 500, np.zeros(n, np.int64))
    assert np.array_equal(plain.start, zero.start) and np.array_equal(plain.end, zero.end)
