"""Serving loops without ProfilerStep frames: iterations from framework ranges, graph launches or idle gaps, and
every nanosecond of their span in exactly one row of every table."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atbprof.analyze.api import analyze as analyze_profile
from atbprof.importers import load_profile
from atbprof.importers.kineto_steps import vocabulary


class Trace:
    """A hand-made Kineto trace (µs), kernels each launched by a runtime call with a correlation id."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.corr = 0

    def host(self, cat: str, name: str, ts: float, dur: float, tid: int = 1) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur})

    def kernel(self, name: str, launch: float, start: float, dur: float, call: str = "cudaLaunchKernel") -> None:
        self._launch(call, launch, 3.0)
        self._device(name, start, dur)

    def graph(self, launch: float, kernels: list[tuple[str, float, float]]) -> None:
        """One cudaGraphLaunch replaying `kernels` (name, start, dur)."""
        self._launch("cudaGraphLaunch", launch, 20.0)
        for name, start, dur in kernels:
            self._device(name, start, dur)

    def _launch(self, call: str, at: float, dur: float) -> None:
        self.corr += 1
        self.host("cuda_runtime", call, at, dur)
        self.events[-1]["args"] = {"correlation": self.corr}

    def _device(self, name: str, start: float, dur: float) -> None:
        """A kernel of the last launch call."""
        args = {"correlation": self.corr, "stream": 7}
        self.events.append(
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": start, "dur": dur, "args": args}
        )

    def write(self, path: Path) -> Path:
        path.write_bytes(gzip.compress(orjson.dumps({"traceEvents": self.events})))
        return path


def _serving(lag_us: float = 0.0, iterations: int = 3) -> Trace:
    """A vLLM-style loop: each iteration an execute_… annotation on the host, 4 kernels on the device `lag_us`
    after their launches, and 2 ms of scheduling between iterations."""
    t = Trace()
    for i in range(iterations):
        t0 = 1000.0 + i * 3000.0
        t.host("user_annotation", f"execute_8_context_0(sq0)_generation_8(sq8)_{i}", t0, 500.0)
        for k in range(4):
            launch = t0 + 10 + k * 20
            t.kernel(f"k{k}", launch, launch + lag_us + 5, 15.0)
    return t


def test_framework_ranges_make_the_steps(tmp_path: Path) -> None:
    profile = load_profile(_serving().write(tmp_path / "s.json.gz"))
    frames = profile.step_frames
    assert frames is not None
    assert frames["frame"].to_pylist() == ["iteration"] * 3
    assert frames["op_count"].to_pylist() == [4, 4, 4]
    assert "execute_" in str(profile.meta["steps_from"])
    report = analyze_profile(profile, whatif=False)
    b = report.breakdown
    assert (b.steps_from, b.steps) == ("iteration", 3)
    assert b.steps_rule is not None and "annotation" in b.steps_rule
    # step k runs from the end of step k-1's device work to the end of its own: the 2 ms of scheduling between
    # iterations is in the step it delays, and the span is first kernel .. last kernel
    assert b.span_us == pytest.approx(2 * 3000.0 + 3 * 20 + 15, abs=0.01)
    assert b.outside_steps.ops == 0


def test_a_device_lagging_its_host_still_gets_its_iterations(tmp_path: Path) -> None:
    """The kernels run 100 ms after the host ranges ended (a real vLLM trace lags 150 ms): an op is placed by its
    launch, the windows are device time."""
    profile = load_profile(_serving(lag_us=100_000.0).write(tmp_path / "lag.json.gz"))
    frames = profile.step_frames
    assert frames is not None and frames["op_count"].to_pylist() == [4, 4, 4]
    assert analyze_profile(profile, whatif=False).breakdown.outside_steps.ops == 0


def test_graph_launches_make_the_steps(tmp_path: Path) -> None:
    t = Trace()
    for i in range(4):
        t0 = 1000.0 + i * 2000.0
        t.graph(t0, [(f"g{k}", t0 + 30 + k * 10, 8.0) for k in range(5)])
        t.kernel("sample", t0 + 200, t0 + 210, 5.0)  # eager work between two replays: the iteration's
    profile = load_profile(t.write(tmp_path / "g.json.gz"))
    frames = profile.step_frames
    assert frames is not None and frames["op_count"].to_pylist() == [6, 6, 6, 6]
    assert "graph launches" in str(profile.meta["steps_from"])
    assert profile.meta["graph_launches"] == {"launches": 4, "kernels": 20, "host_ns": 4 * 20_000}
    graph = profile.ops["graph_launch"].to_pylist()
    assert graph.count(True) == 20 and graph.count(False) == 4  # the replayed kernels vs the eager sampler


def test_idle_gaps_cut_only_repeated_work(tmp_path: Path) -> None:
    """Without ranges or graph launches, long device idle cuts iterations - only when the pieces repeat."""
    t = Trace()
    for i in range(3):
        for k in range(6):
            at = 1000.0 + i * 5000.0 + k * 20
            t.kernel(f"k{k}", at, at + 5, 10.0)
    profile = load_profile(t.write(tmp_path / "gaps.json.gz"))
    assert profile.step_frames is not None and profile.step_frames["op_count"].to_pylist() == [6, 6, 6]
    assert "idle gaps" in str(profile.meta["steps_from"])
    odd = Trace()
    for i, n in enumerate((1, 9, 2)):
        for k in range(n):
            at = 1000.0 + i * 5000.0 + k * 20
            odd.kernel(f"k{k}", at, at + 5, 10.0)
    profile = load_profile(odd.write(tmp_path / "odd.json.gz"))
    assert "steps_from" not in profile.meta  # a step with syncs inside it, not a loop: one step of ops


def test_idle_is_split_by_what_the_host_was_doing(tmp_path: Path) -> None:
    """Between two kernels the device idles 1,000 µs: 300 in a blocking cudaMemcpy (synchronisation), 100 in a
    launch call for nothing on the device (graph/launch), 200 in a framework op (host dispatch), 3 waiting for b's
    launch (b's own charge), the rest with no host record (unexplained)."""
    t = Trace()
    t.host("user_annotation", "execute_1_context_0(x)_generation_1(y)", 0.0, 5000.0)
    t.kernel("a", 10.0, 20.0, 80.0)  # device busy 20..100
    t.host("cuda_runtime", "cudaMemcpy", 100.0, 300.0)
    t.host("cuda_runtime", "cudaFuncGetAttributes", 400.0, 100.0)
    t.host("cpu_op", "aten::empty", 500.0, 200.0)
    t.kernel("b", 1096.0, 1100.0, 50.0)  # launch 1096..1099 ends 1 µs before its start: that wait is b's
    report = analyze_profile(load_profile(t.write(tmp_path / "idle.json.gz")), whatif=False)
    causes = {r.name: r.charged_us for r in report.breakdown.idle.causes}
    assert causes == pytest.approx(
        {
            "idle: synchronisation": 300.0,
            "idle: graph/launch": 101.0,  # + the first µs of b's own launch call (its last 3 µs are b's wait)
            "idle: host dispatch": 200.0,
            "idle: unexplained": 396.0,
        },
        abs=0.01,
    )
    cats = {r.name: r.charged_us for r in report.breakdown.phases[0].categories}
    assert sum(cats.values()) == pytest.approx(report.breakdown.span_us, abs=0.01)


@st.composite
def _loops(draw: st.DrawFn) -> Trace:
    """Random serving loops: iterations of random kernels, host syncs and framework ops, device lag and overlap."""
    t = Trace()
    lag = draw(st.sampled_from([0.0, 7.0, 5000.0]))
    at, free = 100.0, 0.0  # host clock; when the stream is free
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(1, 6))
        t.host("user_annotation", f"execute_{n}_context_0(a)_generation_{n}(b)", at, 40.0 * n + 50)
        for _ in range(n):
            start = max(free, at + lag + draw(st.floats(0, 300)))
            dur = draw(st.floats(0.5, 200))
            t.kernel(
                draw(st.sampled_from(["rms_norm_kernel", "flash_fwd_kernel", "nvjet_gemm", "add"])), at, start, dur
            )
            free = start + dur
            if draw(st.booleans()):
                cat, name = draw(
                    st.sampled_from(
                        [
                            ("cuda_runtime", "cudaDeviceSynchronize"),
                            ("cuda_runtime", "cudaGetDevice"),
                            ("cpu_op", "aten::mul"),
                        ]
                    )
                )
                t.host(cat, name, at + 4, draw(st.floats(0, 400)))
            at += 40.0
        at += draw(st.floats(0, 3000))
    return t


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=_loops())
def test_every_table_adds_up_to_the_span(tmp_path: Path, trace: Trace) -> None:
    report = analyze_profile(load_profile(trace.write(tmp_path / "h.json.gz")), whatif=False)
    b = report.breakdown
    span = b.phases[0].span_us if b.phases else 0.0
    for rows in ([r for p in b.phases for r in p.categories], b.by_op_type, b.by_bound, b.by_layer or None):
        if rows is None:
            continue
        assert sum(r.charged_us for r in rows) == pytest.approx(span, abs=0.01 + 1e-6 * span)
    assert all(r.charged_us >= -0.001 for r in b.idle.causes)


def test_the_vocabulary_names_its_sources() -> None:
    vocab = vocabulary()
    assert vocab.ranges and vocab.graph_launch_calls
    text = Path(__file__).parents[2].joinpath("atbprof/importers/step_ranges.yaml").read_text()
    assert text.count("seen:") == len(vocab.ranges)
