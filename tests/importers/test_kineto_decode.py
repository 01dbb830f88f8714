"""The fast Kineto decoder gives exactly what the general (orjson) path gives, or steps aside for it."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atbprof.errors import InputError
from atbprof.importers.base import Profile
from atbprof.importers.detect import _fast_kineto, _kineto_profile
from atbprof.importers.kineto_decode import decode_kineto
from atbprof.importers.trace_events import load_trace
from tests.importers.conftest import TRACES, mutate, shared

KINETO = sorted(p.name for p in TRACES.glob("*.json.gz")) if TRACES.exists() else []


def _data(name: str) -> bytes:
    return gzip.decompress(shared(TRACES / name).read_bytes())


def _general(path: Path, data: bytes) -> Profile | InputError:
    try:
        return _kineto_profile(path, load_trace(path, data))
    except InputError as err:
        return err


def _same(fast: Profile, general: Profile) -> None:
    assert fast.kind == general.kind
    assert fast.ops.equals(general.ops, check_metadata=True)
    assert (fast.framework is None) == (general.framework is None)
    if fast.framework is not None and general.framework is not None:
        assert fast.framework.equals(general.framework, check_metadata=True)
    assert (fast.step_frames is None) == (general.step_frames is None)
    if fast.step_frames is not None and general.step_frames is not None:
        assert fast.step_frames.equals(general.step_frames)
    assert fast.meta == general.meta


@pytest.mark.parametrize("name", KINETO)
def test_fast_path_equals_general_path_on_every_kineto_anchor(name: str) -> None:
    path = TRACES / name
    data = _data(name)
    fast = _fast_kineto(path, data)
    assert fast is not None, "the fast path should read every real Kineto trace"
    general = _general(path, data)
    assert isinstance(general, Profile)
    _same(fast, general)


def test_ascend_timelines_and_bad_json_go_to_the_general_path(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    assert decode_kineto(path, b'[{"ph": "X"}]') is None  # a bare array (Ascend)
    assert decode_kineto(path, b'{"traceEvents": [{"ph": "X", "ts": 1') is None  # cut off
    assert decode_kineto(path, b'{"traceEvents": [{"ph": "X", "pid": true}]}') is None  # odd type
    assert decode_kineto(path, '{"traceEvents": [{"ph": "X", "name": "\xe9"}]}'.encode("latin-1")) is None
    ascend = b'{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "CANN"}}]}'
    assert _fast_kineto(path, ascend) is None


@pytest.fixture(scope="module")
def small_trace() -> bytes:
    doc = orjson.loads(_data("hta_ns_resolution_rank0.pt.trace.json.gz"))
    doc["traceEvents"] = doc["traceEvents"][:300]
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_traces_fast_path_agrees_or_steps_aside(small_trace: bytes, data: st.DataObject) -> None:
    mutated = mutate(data, small_trace, b'0123456789.-"[]{},:eE ntx\xff')
    path = Path("mutated.json")
    fast = _fast_kineto(path, mutated)
    if fast is None:
        return
    general = _general(path, mutated)
    assert isinstance(general, Profile), f"the fast path accepted what the general path rejects: {general}"
    _same(fast, general)


def test_a_number_past_double_range_in_an_unread_field_steps_aside(small_trace: bytes) -> None:
    """Found by the mutation test: a top-level key renamed (so its value is not read) holding 3e079637504. orjson
    refuses the file; the fast paths (the C scanner, and msgspec where it is not built) step aside, so the general
    path names the problem."""
    mutated = bytearray(small_trace)
    mutated[small_trace.index(b'"deviceProperties"') + 1] = ord("0")
    at = small_trace.index(b"34079637504")
    mutated[at + 1] = ord("e")
    path = Path("mutated.json")
    assert _fast_kineto(path, bytes(mutated)) is None
    assert decode_kineto(path, bytes(mutated)) is None
    assert not isinstance(_general(path, bytes(mutated)), Profile)
