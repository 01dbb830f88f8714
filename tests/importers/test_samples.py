"""Every real sample under shared/anchors imports, with pinned figures (rows, ns totals, types, steps)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc
import pytest

from atbprof.errors import InputError
from atbprof.importers import FRAMEWORK_SCHEMA, STEP_FRAMES_SCHEMA, load_profile
from atbprof.optable.schema import OPS_SCHEMA, check_table
from tests.importers.conftest import ASCEND, LEVEL0, LEVEL1, MSTT, OUT, QWEN, TRACES, shared


@dataclass(frozen=True)
class Pin:
    path: Path
    kind: str
    rows: int
    dur_ns: int  # sum of task_dur_ns
    types: int  # distinct op types
    first_type: str | None  # op type of the first row by start time
    steps: tuple[int, ...]  # step frames
    framework: int | None  # framework (cpu_op) rows; None: the input has none


KD = "kernel_details"
TV = "trace_view"
PINS = [
    Pin(LEVEL0 / OUT / "kernel_details.csv", KD, 191, 94_344_340, 34, "TransData", (50,), None),  # Level0: Type N/A
    Pin(LEVEL1 / OUT / "kernel_details.csv", KD, 191, 114_865_613, 34, "TransData", (50,), None),
    Pin(QWEN / OUT / "kernel_details.csv", KD, 2463, 651_464_360, 39, "ZerosLike", (13,), None),
    Pin(
        ASCEND / "msinsight_imagenet_cnn_level1_rank1" / OUT / "kernel_details.csv",
        KD,
        191,
        109_253_559,
        34,
        "TransData",
        (50,),
        None,
    ),  # the second data-parallel rank of the Level1 capture
    Pin(
        ASCEND / "msinsight_qwen3_0.6b_level2_cluster" / "rank_0_ascend_pt" / OUT / "kernel_details.csv",
        KD,
        2463,
        651_464_360,
        39,
        "ZerosLike",
        (13,),
        None,
    ),  # the cluster's rank 0: the same capture as QWEN
    Pin(
        MSTT / "kernel_details_fa_matmul_pipeutil.csv", KD, 26, 8_497_229, 5, "FlashAttentionScore", (19,), None
    ),  # 3 exact duplicates dropped (a hand-edited fixture)
    Pin(MSTT / "kernel_details_gpt_layernorm_train.csv", KD, 591, 396_807_040, 43, "ZerosLike", (1,), None),
    Pin(LEVEL0 / OUT / "trace_view.json", TV, 191, 94_344_340, 34, "TransData", (50,), 859),
    Pin(MSTT / "trace_view.json", TV, 274, 1_788_267, 29, "ZerosLike", (1,), 710),
    Pin(TRACES / "mstt_ascend_npu_trace_view.json", TV, 274, 1_788_267, 29, "ZerosLike", (1,), 710),
    Pin(LEVEL0, "ascend_pt", 191, 94_344_340, 34, "TransData", (50,), 859),
    Pin(LEVEL1, "ascend_pt", 191, 114_865_613, 34, "TransData", (50,), None),
    Pin(QWEN, "ascend_pt", 2463, 651_464_360, 39, "ZerosLike", (13,), None),
]
KINETO = "kineto"
STEPS_1009 = tuple(range(1009, 1015))
KINETO_PINS = [  # rows = GPU kernel, memcpy and memset events, framework = cpu_op events (ProfilerStep#N excluded)
    Pin(TRACES / "hta_amd_mi250_minitoy_train_ROCm6_2_kineto.json.gz", KINETO, 16, 149_042, 7,
        "Memcpy HtoD", (1, 2), 70),
    Pin(TRACES / "hta_critical_path_alexnet.json.gz", KINETO, 98, 66_203_000, 17, "Memcpy HtoD", (), 359),
    # MTIA: no ProfilerStep; four batches of 190-280 ops cut apart by device idle gaps
    Pin(TRACES / "hta_mtia_inference_rank_0.json.gz", KINETO, 974, 459_456_313, 4, "pe_exe", (0, 1, 2, 3), 10_346),
    Pin(TRACES / "hta_ns_resolution_rank0.pt.trace.json.gz", KINETO, 6095, 472_454_441, 58,
        "CatArrayBatchedCopy_aligned16_contig", tuple(range(101, 106)), 23_910),
    Pin(TRACES / "hta_trace_diff_control.json.gz", KINETO, 9450, 501_567_000, 106, "Memcpy HtoD", STEPS_1009, 40_506),
    Pin(TRACES / "hta_trace_diff_test.json.gz", KINETO, 15632, 963_762_000, 68, "Memcpy DtoD", STEPS_1009, 31_236),
    Pin(TRACES / "hta_triton_example.json.gz", KINETO, 1, 1760, 1, "triton_poi_fused_add_cos_sin", (1,), 3),
    Pin(TRACES / "kineto_tbplugin_resnet50_worker0.pt.trace.json.gz", KINETO, 9096, 603_558_000, 57,
        "Memcpy HtoD", tuple(range(5, 11)), 23_640),
]  # fmt: skip


@pytest.mark.parametrize("pin", PINS + KINETO_PINS, ids=lambda p: f"{p.kind}:{p.path.name}")
def test_sample_imports_with_pinned_figures(pin: Pin) -> None:
    profile = load_profile(shared(pin.path))
    ops = profile.ops
    check_table(ops)
    assert ops.schema.equals(OPS_SCHEMA, check_metadata=False)
    assert profile.kind == pin.kind
    assert ops.num_rows == pin.rows
    assert (pc.sum(ops["task_dur_ns"]).as_py() or 0) == pin.dur_ns
    assert len(pc.unique(ops["op_type"])) == pin.types
    assert (ops["op_type"][0].as_py() if ops.num_rows else None) == pin.first_type
    frames = profile.step_frames
    assert tuple(frames["step"].to_pylist() if frames is not None else ()) == pin.steps
    if frames is not None:
        assert frames.schema.equals(STEP_FRAMES_SCHEMA, check_metadata=False)
    if pin.framework is None:
        assert profile.framework is None
    else:
        assert profile.framework is not None
        assert profile.framework.num_rows == pin.framework
        assert profile.framework.schema.equals(FRAMEWORK_SCHEMA, check_metadata=False)
    # foreign inputs never claim what they cannot know
    for col in ("layer", "role", "phase", "node_id", "kv_len", "flops", "bound", "fused_from"):
        assert ops[col].null_count == ops.num_rows, col
    # op_index = row order = start order; times relative to the first event
    assert ops["op_index"].to_pylist() == list(range(ops.num_rows))
    starts = ops["task_start_ns"].to_pylist()
    assert starts == sorted(starts)
    assert not starts or starts[0] >= 0
    assert isinstance(profile.meta["origin_ns"], int)


def test_every_op_table_sample_is_covered() -> None:
    """A new kernel_details sample in shared/anchors must get a pin."""
    found = {p.resolve() for p in shared(ASCEND).rglob("kernel_details*.csv")}
    assert found == {p.path.resolve() for p in PINS if p.kind == KD}


def test_every_trace_sample_is_covered() -> None:
    found = {p.resolve() for p in shared(TRACES).glob("*.json*")}
    pinned = {p.path.resolve() for p in PINS + KINETO_PINS if p.path.parent == TRACES}
    assert found == pinned


def test_qwen3_residual_add_then_rmsnorm_pairs() -> None:
    """The unfused residual Add + RmsNorm of the real Qwen3 capture: 54 pairs on the same leading shape."""
    ops = load_profile(shared(QWEN / OUT / "kernel_details.csv")).ops
    names, types = ops["op_name"].to_pylist(), ops["op_type"].to_pylist()
    shapes = ops["input_shapes"].to_pylist()
    pairs = [
        i
        for i in range(len(names) - 1)
        if names[i] == "aclnnAdd_AddAiCore_Add"
        and types[i + 1] == "RmsNorm"
        and shapes[i].split(";")[0] == shapes[i + 1].split(";")[0]
    ]
    assert len(pairs) == 54
    assert {shapes[i] for i in pairs} == {"4096,1,1024;4096,1,1024"}
    assert {shapes[i + 1] for i in pairs} == {"4096,1,1024;1024"}


def test_qwen3_cells_parse_like_the_docs_say() -> None:
    profile = load_profile(shared(QWEN / OUT / "kernel_details.csv"))
    ops, origin = profile.ops, profile.meta["origin_ns"]
    assert isinstance(origin, int)
    rows = ops.to_pylist()
    rms = next(r for r in rows if r["op_name"] == "RmsNorm" and r["task_start_ns"] + origin == 1764246877078671380)
    # "1764246877078671.380\t": every ns digit kept, TAB stripped
    assert rms["task_dur_ns"] == 33_060
    assert rms["task_wait_ns"] == 543_470
    assert (rms["task_type"], rms["stream_id"], rms["task_id"], rms["step"]) == ("AI_VECTOR_CORE", 2, 34492, 13)
    assert (rms["block_dim"], rms["mix_block_dim"]) == (40, 0)
    assert rms["input_shapes"] == "4096,1,1024;1024"  # literal quotes stripped, msprof's ; and , kept
    assert (rms["input_dtypes"], rms["output_dtypes"]) == ("DT_BF16;DT_BF16", "DT_BF16;FLOAT")  # as written
    assert rms["output_shapes"] == "4096,1,1024;4096,1,1"
    fa = next(r for r in rows if r["op_type"] == "FlashAttentionScore")
    assert fa["task_type"] == "MIX_AIC" and fa["mix_block_dim"] == 40
    assert fa["input_shapes"] == "4096,1,2048;4096,1,1024;4096,1,1024;;;;2048,2048;;;;;;;;"  # empty slots kept
    comm = [r for r in rows if r["task_type"] == "COMMUNICATION"]
    assert comm and all(r["stream_id"] is None and r["task_id"] is None for r in comm)  # N/A -> null
    assert comm[0]["op_type"].startswith("hcom_")


def test_pmu_columns_map_to_pipes() -> None:
    """aic_*/aiv_* PipeUtilization columns -> our pipes; a pipe on both cores takes the busier side."""
    ops = load_profile(shared(QWEN / OUT / "kernel_details.csv")).ops.to_pylist()
    zeros = ops[0]  # aclnnInplaceZero_ZerosLikeAiCore_ZerosLike: a vector kernel (aiv_* only)
    assert zeros["op_type"] == "ZerosLike"
    assert (zeros["vec_time_ns"], zeros["mte2_time_ns"], zeros["mte3_time_ns"]) == (
        98_456,
        1,
        1_877_188,
    )  # 98.456, 0.001, 1877.188 µs
    assert zeros["vec_ratio"] == pytest.approx(0.052)
    assert zeros["mte3_ratio"] == pytest.approx(0.996)
    assert zeros["mac_time_ns"] == 0 and zeros["scalar_time_ns"] == 18_326
    matmul = next(r for r in ops if r["op_type"] == "MatMulV3")
    assert matmul["mac_time_ns"] > 0 and matmul["fixpipe_time_ns"] is not None


@pytest.mark.parametrize(
    ("sample", "mhz"),
    [
        (QWEN, 1650.0),  # below the 910B3's nominal 1800 (a frequency setting or power cap on that machine)
        (MSTT / "kernel_details_fa_matmul_pipeutil.csv", 1800.0),
        (MSTT / "kernel_details_gpt_layernorm_train.csv", 1850.0),  # the 910B1 clock
    ],
)
def test_the_ai_core_clock_is_read_from_the_cycle_counters(sample: Path, mhz: float) -> None:
    """aic_total_cycles / aicore_time / Block Dim over the kernels busy >= 10 us: every such kernel of these
    samples agrees to 0.1 MHz, so the median is the clock."""
    assert load_profile(shared(sample)).meta["aicore_clock_mhz"] == mhz


def test_a_table_without_cycle_counters_claims_no_clock(tmp_path: Path) -> None:
    with shared(MSTT / "kernel_details_gpt_layernorm_train.csv").open(newline="") as f:
        rows = list(csv.reader(f))
    drop = rows[0].index("aic_total_cycles")
    path = tmp_path / "kernel_details.csv"
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([c for i, c in enumerate(row) if i != drop] for row in rows)
    assert "aicore_clock_mhz" not in load_profile(path).meta


def test_old_header_without_pipe_columns_leaves_pipes_null() -> None:
    """2023 header (ArithmeticUtilization metrics, no OP State / HF32): no pipe columns to map."""
    ops = load_profile(shared(MSTT / "kernel_details_gpt_layernorm_train.csv")).ops
    for col in ("mac_ratio", "vec_time_ns", "mte2_ratio"):
        assert ops[col].null_count == ops.num_rows
    hccl = [r for r in ops.to_pylist() if r["task_type"] == "HCCL"]
    assert hccl and hccl[0]["op_type"] == "hcom_broadcast_"


def test_level0_types_come_from_names() -> None:
    profile = load_profile(shared(LEVEL0 / OUT / "kernel_details.csv"))
    assert profile.meta["op_types_from_names"] == 191
    ops = profile.ops.to_pylist()
    assert ops[0]["op_name"] == "trans_TransData_0" and ops[0]["op_type"] == "TransData"
    by_name = {r["op_name"]: r["op_type"] for r in ops}
    assert by_name["aclnnInplaceRelu_Relu_Relu"] == "Relu"
    assert by_name["Conv2D1"] == "Conv2D"
    assert by_name["hcom_allReduce__868_0_1"] == "hcom_allReduce_"
    # Accelerator Core is N/A at Level0, but for the communication ops
    assert {r["task_type"] for r in ops if not r["op_name"].startswith("hcom_")} == {None}
    assert {r["task_type"] for r in ops if r["op_name"].startswith("hcom_")} == {"HCCL"}


def test_level0_trace_view_tasks_equal_its_kernel_details() -> None:
    """The Ascend Hardware kernels (+ HCCL ops) of a trace are the rows of its kernel_details: same names, start
    times (communication ops within 1 ns); durations and (recomputed) waits within 1-2 ns (the JSON has sub-ns
    digits, the CSV rounds them)."""
    table = load_profile(shared(LEVEL0 / OUT / "kernel_details.csv"))
    trace = load_profile(shared(LEVEL0 / OUT / "trace_view.json"))
    a, b = table.ops, trace.ops
    shift = trace.meta["origin_ns"] - table.meta["origin_ns"]  # type: ignore[operator]
    assert a["op_name"].to_pylist() == b["op_name"].to_pylist()
    assert a["op_type"].to_pylist() == b["op_type"].to_pylist()
    assert [t for t in a["task_type"].to_pylist() if t] == [t for t in b["task_type"].to_pylist() if t == "HCCL"]
    durations = list(zip(a["task_dur_ns"].to_pylist(), b["task_dur_ns"].to_pylist(), strict=True))
    assert max(abs(x - y) for x, y in durations) == 1
    assert sum(x for x, _ in durations) == sum(y for _, y in durations)
    waits = list(zip(a["task_wait_ns"].to_pylist(), b["task_wait_ns"].to_pylist(), strict=True))
    assert max(abs(x - y) for x, y in waits) == 2  # = start - end of the previous task: both roundings
    names = a["op_name"].to_pylist()
    starts = list(zip(a["task_start_ns"].to_pylist(), b["task_start_ns"].to_pylist(), names, strict=True))
    assert all(x == y + shift for x, y, name in starts if not name.startswith("hcom_"))  # to the ns
    assert all(abs(x - y - shift) <= 1 for x, y, _ in starts)  # the HCCL layer's times differ by up to 1 ns
    assert trace.meta["dropped_device_tasks"] == {
        "EVENT_RECORD": 16,
        "EVENT_WAIT": 10,
        "MEMCPY_ASYNC": 24,
        "Notify Wait": 112,
        "SDMA": 72,
        "Write Value": 112,
    }


def test_ascend_pt_directory_joins_table_and_trace() -> None:
    profile = load_profile(shared(LEVEL0))
    assert profile.meta["op_rows_from"] == "op table"
    assert profile.meta["profiler_level"] == "Level0"
    ops = profile.ops
    # from the HostToDevice flows of trace_view.json, joined on the start time (Level0 has no Stream ID column);
    # the 4 HCCL ops have no host launch
    assert ops["host_launch_start_ns"].null_count == 4
    assert profile.framework is not None and profile.framework.num_rows == 859
    frame = profile.step_frames.to_pylist()[0]  # type: ignore[union-attr]
    assert (frame["step"], frame["frame"], frame["op_count"], frame["dur_ns"]) == (50, "ProfilerStep", 191, 136_897_820)
    assert load_profile(shared(LEVEL1)).meta["profiler_level"] == "Level1"


def test_framework_from_trace_view() -> None:
    """cpu_op events of the Python process: nested per thread, in ProfilerStep#50, input dims as msprof text."""
    fw = load_profile(shared(LEVEL0 / OUT / "trace_view.json")).framework
    assert fw is not None
    rows = fw.to_pylist()
    by_index = {r["index"]: r for r in rows}
    for r in rows:
        if r["parent"] is not None:
            p = by_index[r["parent"]]
            assert (p["pid"], p["tid"]) == (r["pid"], r["tid"])
            assert p["start_ns"] <= r["start_ns"] and r["start_ns"] + r["dur_ns"] <= p["start_ns"] + p["dur_ns"]
            assert r["depth"] == p["depth"] + 1
        else:
            assert r["depth"] == 0
    assert max(r["depth"] for r in rows) == 6
    assert {r["step"] for r in rows} == {50}
    # torch_npu writes "32,3,224,224;\r\n64,3,11,11;\r\n64;\r\n;..." (CRLF after each ';')
    assert next(r for r in rows if r["name"] == "aten::conv2d")["input_shapes"] == "32,3,224,224;64,3,11,11;64;;;;"
    assert not any(r["name"].startswith("ProfilerStep#") for r in rows)


def test_op_statistic_is_refused_with_a_clear_message() -> None:
    with pytest.raises(InputError, match=r"op_statistic\.csv: this is an op_statistic table.*kernel_details\.csv"):
        load_profile(shared(QWEN / OUT / "op_statistic.csv"))


@pytest.mark.parametrize("name", ["step_trace_time.csv", "api_statistic.csv", "communication.json"])
def test_other_profiler_outputs_are_refused(name: str) -> None:
    with pytest.raises(InputError, match=name.replace(".", r"\.")):
        load_profile(shared(QWEN / OUT / name))


def test_exact_duplicates_of_the_hand_edited_fixture_are_dropped_with_a_note() -> None:
    """The mstt fixture repeats 3 rows exactly (its README says so): dropped, and the profile says so."""
    profile = load_profile(shared(MSTT / "kernel_details_fa_matmul_pipeutil.csv"))
    assert profile.meta["warnings"] == [
        "dropped 3 exact duplicate task(s) (same name, stream, start and duration as an earlier row; first: row 10, "
        "aclnnMatmul_MatMulV3Common_MatMulV5)"
    ]
