"""Steps of a profile with ProfilerStep frames partition its timeline (issue 13 item 1): small Kineto traces that
reproduce each failure seen on real ones, and a Hypothesis invariant over random frames and kernels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atbprof.analyze import analyze
from atbprof.analyze.charges import charge
from atbprof.analyze.view import OpView
from atbprof.importers import load_profile


def _x(name: str, cat: str, ts: float, dur: float, stream: int = 7, **args: Any) -> dict[str, Any]:
    gpu = cat == "kernel"
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 0 if gpu else 10,
        "tid": stream if gpu else 1,
        "ts": ts,
        "dur": dur,
        "args": {**args, **({"stream": stream} if gpu else {})},
    }


def _trace(
    tmp_path: Path,
    steps: list[tuple[float, float]],
    kernels: list[tuple[float, float]],
    cpu: bool = False,
    streams: list[int] | None = None,
) -> Path:
    """ProfilerStep#1.. frames (start, dur in us) and kernels (start, dur), each launched at its own start or, when
    that is after every frame, inside the last one (a GPU lagging the host)."""
    events: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": 10, "tid": 0, "args": {"name": "py"}}]
    events += [_x(f"ProfilerStep#{i + 1}", "user_annotation", s, d) for i, (s, d) in enumerate(steps)]
    events += [_x("aten::mm", "cpu_op", s + 1.0, d / 2) for s, d in steps] if cpu else []
    for c, (s, d) in enumerate(kernels):
        launch = min(s, steps[-1][0] + 0.5) if steps else s
        events.append(_x("cudaLaunchKernel", "cuda_runtime", launch, 0.1, correlation=c + 1))
        stream = streams[c] if streams else 7
        events.append(_x(f"kernel_{c % 3}", "kernel", s, d, stream=stream, correlation=c + 1))
    path = tmp_path / "trace.json"
    path.write_bytes(orjson.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def test_a_lagging_gpu_does_not_stretch_the_steps(tmp_path: Path) -> None:
    """Five 200 us ProfilerSteps whose kernels each run 300 us (the GPU falls behind): the steps are the frames,
    5 x 200 us, not 5 x 300; what runs after the last frame is outside every step."""
    steps = [(i * 200.0, 200.0) for i in range(5)]
    kernels = [(10.0 + i * 300.0 + j * 100.0, 95.0) for i in range(5) for j in range(3)]
    report = analyze(load_profile(_trace(tmp_path, steps, kernels)))
    b = report.breakdown
    assert b.steps_from == "ProfilerStep" and b.steps == 5 and b.span_us == 1000.0
    last_end = 10.0 + 4 * 300.0 + 2 * 100.0 + 95.0
    assert b.outside_steps.us == last_end - 1000.0 and b.outside_steps.ops == 5  # the tail after frame 5
    (phase,) = b.phases
    assert abs(sum(r.share for r in phase.categories) - 1) < 1e-3


def test_ops_before_the_first_step_are_not_a_phantom_step(tmp_path: Path) -> None:
    """One 75.5 ms ProfilerStep with a kernel before it: 1 step of 75.5 ms (not 2 steps / 151 ms), per-step counts
    not halved, and the early kernel outside the step."""
    kernels = [(0.0, 200.0), *[(1000.0 + i * 1000.0, 500.0) for i in range(70)]]
    report = analyze(load_profile(_trace(tmp_path, [(900.0, 75_500.0)], kernels)))
    b = report.breakdown
    assert b.steps == 1 and b.span_us == 75_500.0 and b.outside_steps.ops == 1
    rows = {r.name: r for r in b.by_op_type}
    assert sum(r.count for r in rows.values()) == 70  # the one before the step is not in it
    assert b.outside_steps.us == 900.0


def test_a_cpu_only_trace_keeps_its_step(tmp_path: Path) -> None:
    """No device ops at all: the 210 ms ProfilerStep is the step (reported as 0.015 ms before)."""
    report = analyze(load_profile(_trace(tmp_path, [(0.0, 210_000.0)], [], cpu=True)))
    assert report.breakdown.steps == 1 and report.breakdown.span_us == 210_000.0


def test_a_frame_without_device_work_is_not_a_step(tmp_path: Path) -> None:
    """The AMD sample's pattern: ProfilerStep#2 is 49 us long and runs no kernel; it is not averaged in."""
    report = analyze(load_profile(_trace(tmp_path, [(0.0, 9000.0), (9000.0, 49.0)], [(100.0, 50.0), (500.0, 60.0)])))
    b = report.breakdown
    assert b.steps == 1 and b.span_us == 9000.0 and b.outside_steps.empty_frames == 1 and b.outside_steps.us == 49.0


FRAMES = st.lists(st.tuples(st.integers(0, 50), st.integers(1, 400)), min_size=1, max_size=5)
KERNELS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 400), st.integers(1, 300)), max_size=25)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(FRAMES, KERNELS)
def test_steps_and_outside_partition_the_timeline(
    tmp_path: Path, gaps: list[tuple[int, int]], kernels: list[tuple[int, int, int]]
) -> None:
    """For any frames and kernels: steps + outside = the timeline from the first event to the last; every op is in
    at most one step; within a step the charges never exceed the frame, and the rows add up to it."""
    steps, at = [], 0.0
    for gap, dur in gaps:
        steps.append((at + gap, float(dur)))
        at += gap + dur
    free = [0.0] * 4  # kernels on up to 4 streams, one at a time on each
    placed = []
    for stream, gap, dur in kernels:
        placed.append((free[stream] + gap, float(dur)))
        free[stream] += gap + dur
    streams = [k[0] + 1 for k in kernels]
    profile = load_profile(_trace(tmp_path, steps, placed, cpu=True, streams=streams))
    ch = charge(OpView.build(profile.ops), None, profile.step_frames)
    starts = [s for s, _ in steps] + [s for s, _ in placed]
    ends = [s + d for s, d in steps] + [s + d for s, d in placed]
    extent_ns = (max(ends) - min(starts)) * 1e3
    assert abs(ch.wall.sum() + ch.outside_ns - extent_ns) < 1.0
    assert len(ch.step) + ch.outside_ops == profile.ops.num_rows
    frame_of_op = ch.frame_of_op
    for f in range(len(ch.wall)):
        assert ch.charged[frame_of_op == f].sum() <= ch.wall[f] + 1e-6
    b = analyze(profile).breakdown
    for phase in b.phases:
        total = sum(r.charged_us for r in phase.categories)
        assert abs(total - phase.span_us) <= 0.01 * max(len(phase.categories), 1)
