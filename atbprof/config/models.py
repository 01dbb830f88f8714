"""The validated run configuration. Sections: model, device, workload, execution, fusion, output, seed."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    Strict,
    field_validator,
    model_serializer,
    model_validator,
)

from atbprof.errors import AtbprofError
from atbprof.suggest import did_you_mean

KV_REUSE_WITH_PAGED_ATTENTION = (
    "memory.enable_kv_cache_reuse together with paged attention is refused: ATB's KV-cache reuse and "
    "vLLM's PagedAttention manage the same cache and conflict (seed 002, pitfall 2). "
    "Keep paged attention and set enable_kv_cache_reuse: false"
)


def _range_list(value: object, expected: str) -> object:
    """A range list ('0-3,10,20-') as text, checked by the one parser of range lists; an int is one range."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str):
        from atbprof.writers.selection import parse_ranges

        try:
            parse_ranges(value, "ranges")
        except AtbprofError:
            raise ValueError(expected) from None
    return value


class _Section(BaseModel):
    # strict: `batch_size: true` or `trace: 1` is a mistake, not a value; no inf / nan anywhere
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


MODEL_LIMITS: dict[str, tuple[float, float]] = {
    "hidden_size": (1, 131_072),
    "intermediate_size": (1, 1_048_576),
    "num_attention_heads": (1, 1_024),
    "num_key_value_heads": (1, 1_024),
    "num_hidden_layers": (1, 1_024),
    "vocab_size": (1, 4_194_304),
    "rms_norm_eps": (1e-30, 1.0),
}
"""What a real model can have, with room (LLaMA-3-405B: hidden 16,384, 126 layers, vocab 128,256; Gemma: 256k
vocab). The same bounds apply to a Hugging Face config.json (graph/dims.py)."""
MAX_TOKENS_PER_STEP = 2**31 - 1
"""batch x prompt tokens of the prefill step: the op table counts tokens in int32."""


def _limited(key: str) -> object:
    lo, hi = MODEL_LIMITS[key]
    return Field(default=None, ge=lo, le=hi)


class ModelSection(_Section):
    """A preset name (atbprof/data/models) or a Hugging Face LLaMA config.json, plus optional overrides."""

    preset: str | None = Field(
        default=None,
        description="llama2-7b, llama2-13b, llama2-70b, llama3-8b, llama3-70b, qwen3-8b, mixtral-8x7b, qwen2.5-7b, "
        "llama3.1-8b",
    )
    hf_config: str | None = Field(default=None, description="path to a Hugging Face config.json")
    architecture: Literal["llama", "gpt"] = Field(
        default="llama",
        description="llama = RMSNorm + RoPE + SwiGLU; gpt = LayerNorm + GELU MLP (seed 000's path)",
    )
    dtype: Literal["fp16", "bf16"] = "fp16"
    quant: Literal["none", "w8a8"] = Field(
        default="none",
        description="w8a8 = the decoder's linears with int8 weights and per-token dynamic int8 activations "
        "(DynamicQuant + QuantBatchMatmulV3, as vllm-ascend's W8A8 dynamic quantisation runs them); the LM head "
        "stays in the model dtype",
    )
    kv_cache_dtype: Literal["auto", "int8"] = Field(
        default="auto",
        description="int8 = K and V stored as int8 in the cache (AscendQuant before the cache write; eager attention "
        "dequantises the cache with AscendAntiQuant, fused attention reads it as int8); auto = the model dtype",
    )
    qk_norm: bool | None = Field(
        default=None,
        description="RMSNorm over each query and key head before RoPE (Qwen3's q_norm / k_norm); default: from the "
        "config.json's model_type (qwen3, qwen3_moe)",
    )
    rope_scaling_factor: float | None = Field(
        default=None,
        ge=1.0,
        le=1024.0,
        description="RoPE scaling (linear / dynamic NTK / YaRN) stretching the context max_position_embeddings gives "
        "by this factor; default: the config.json's rope_scaling, else none (a longer prompt is refused)",
    )
    sampling: Literal["greedy", "top_k_top_p"] = Field(
        default="greedy",
        description="top_k_top_p = the sampler filters the logits by top-k and top-p and draws a token (vLLM's "
        "apply_top_k_top_p: Sort, masks, SoftmaxV2, Cumsum, ScatterElements; fused: ApplyTopKTopPWithSorted); "
        "greedy = argmax",
    )
    hidden_size: int | None = _limited("hidden_size")  # type: ignore[assignment]
    intermediate_size: int | None = _limited("intermediate_size")  # type: ignore[assignment]
    num_attention_heads: int | None = _limited("num_attention_heads")  # type: ignore[assignment]
    num_key_value_heads: int | None = _limited("num_key_value_heads")  # type: ignore[assignment]
    num_hidden_layers: int | None = _limited("num_hidden_layers")  # type: ignore[assignment]
    rms_norm_eps: float | None = _limited("rms_norm_eps")  # type: ignore[assignment]
    vocab_size: int | None = _limited("vocab_size")  # type: ignore[assignment]

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, value: str | None) -> str | None:
        from atbprof.data.models import PRESETS

        if value is not None and value not in PRESETS:
            allowed = ", ".join(PRESETS)
            raise ValueError(
                f"unknown preset{did_you_mean(value, PRESETS)} (allowed: {allowed}; or give model.hf_config: "
                "path/to/config.json)"
            )
        return value

    @model_validator(mode="after")
    def _one_source(self) -> ModelSection:
        if self.preset and self.hf_config:
            raise ValueError("give either model.preset or model.hf_config, not both")
        if not self.preset and not self.hf_config:
            from atbprof.data.models import PRESETS

            raise ValueError(f"model needs a preset ({', '.join(PRESETS)}) or an hf_config path")
        return self


class DeviceSection(_Section):
    preset: str | None = Field(default="910A", description="910A, 910B1, 910B2, 910B3, 910B4")
    spec: str | None = Field(default=None, description="path to a custom device spec YAML (same fields as presets)")
    ignore_capacity: bool = Field(
        default=False,
        description="simulate a run whose weights, KV cache and activations exceed the device's HBM (every output "
        "then says it does not fit)",
    )

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, value: str | None) -> str | None:
        from atbprof.device.spec import PRESETS  # lazy, like ModelSection's check

        if value is not None and value not in PRESETS:
            allowed = ", ".join(PRESETS)
            raise ValueError(
                f"unknown device{did_you_mean(value, PRESETS)} (allowed: {allowed}; or device.spec: path/to/spec.yaml)"
            )
        return value


LENGTH_NAMES = ("fixed", "sharegpt")
"""`workload.lengths` values that name a distribution (fixed, or atbprof/data/serving_lengths.yaml); any other value
is a lengths file."""
SERVING_FIELDS = (
    "requests",
    "rate_qps",
    "input_len",
    "output_len",
    "lengths",
    "max_num_seqs",
    "block_size",
    "scheduler",
    "gpu_memory_utilization",
    "max_concurrency",
    "dispatch",
    "slo_ttft_ms",
    "slo_tpot_ms",
)
"""The keys of `kind: serving` (a request stream through a vLLM-style scheduler: atbprof/serving/)."""
BATCH_FIELDS = ("batch_size", "prompt_len", "decode_tokens", "kv_cache", "kv_cache_len")
"""The keys of `kind: batch` (one batch, prefill then decode), which a serving workload does not read."""


class WorkloadSection(_Section):
    kind: Literal["batch", "serving"] = Field(
        default="batch",
        description="batch = one batch: prefill then decode_tokens steps; serving = a stream of requests through "
        "a vLLM-style scheduler (continuous batching, paged KV blocks): TTFT / TPOT percentiles under load",
    )
    batch_size: int = Field(default=1, ge=1, le=4096)
    prompt_len: int = Field(default=512, ge=1, le=1_048_576)
    decode_tokens: int = Field(default=128, ge=0, le=1_000_000)
    kv_cache: Literal["dynamic", "fixed"] = Field(
        default="dynamic",
        description="dynamic = eager attention attends over the tokens so far; fixed = the cache is allocated at "
        "kv_cache_len positions and eager decode attention runs over all of them, masked (TorchAir's fixed KV "
        "cache; FlashAttention kernels take the actual lengths)",
    )
    kv_cache_len: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TOKENS_PER_STEP,
        description="fixed cache: positions (default the model's max_position_embeddings)",
    )

    max_num_batched_tokens: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TOKENS_PER_STEP,
        description="chunked prefill (vLLM's scheduler budget): at most this many prompt tokens per prefill "
        "iteration, shared by the batch; each chunk attends to the cached prefix; activations are sized for one "
        "chunk. None = the whole batch's prompt in one step",
    )

    # -- kind: serving ---------------------------------------------------------------------------------------
    requests: int = Field(default=1000, ge=1, le=1_000_000, description="serving: requests in the stream")
    rate_qps: float = Field(
        default=1.0,
        ge=0.0,
        le=1e6,
        description="serving: mean arrival rate (requests/s) of a Poisson stream; 0 = every request at t = 0 "
        "(the closed-loop maximum); a lengths FILE with arrival_s gives its own times",
    )
    input_len: int = Field(default=512, ge=1, le=1_048_576, description="serving, lengths: fixed: prompt tokens")
    output_len: int = Field(
        default=128, ge=1, le=1_048_576, description="serving, lengths: fixed: generated tokens (the first included)"
    )
    lengths: str = Field(
        default="fixed",
        min_length=1,
        max_length=4096,
        description="serving: fixed (input_len, output_len), sharegpt (the ShareGPT distribution vLLM's "
        "benchmarks sample: atbprof/data/serving_lengths.yaml), or a CSV FILE with input_len, output_len and "
        "optionally arrival_s columns",
    )
    max_num_seqs: int = Field(default=256, ge=1, le=65_536, description="serving: sequences per iteration at most")
    block_size: int = Field(default=128, ge=1, le=65_536, description="serving: tokens per paged KV block")
    scheduler: Literal["prefill_first", "chunked"] = Field(
        default="prefill_first",
        description="serving: prefill_first = vLLM's scheduler without chunked prefill (waiting prompts first, "
        "whole, in their own iterations); chunked = chunked prefill (running decodes first, then prompt chunks "
        "in the rest of the max_num_batched_tokens budget, as vLLM V1)",
    )
    gpu_memory_utilization: float = Field(
        default=0.9,
        gt=0.0,
        le=1.0,
        description="serving: share of device memory the engine may use; the KV blocks get what weights, "
        "activations and workspace leave (vLLM's gpu_memory_utilization, default 0.9)",
    )
    max_concurrency: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="serving: requests the client keeps in flight at most (vLLM bench's --max-concurrency): a "
        "request is sent at its arrival time or when one of those finishes, whichever is later; none = no limit",
    )
    dispatch: Literal["shortest_queue", "round_robin"] = Field(
        default="shortest_queue",
        description="serving, parallel.dp > 1: which engine replica gets each request: shortest_queue = the least "
        "waiting x 4 + running as it arrives (vLLM V1's data-parallel balancer); round_robin = in turn",
    )
    slo_ttft_ms: float | None = Field(default=None, gt=0, le=1e9, description="serving: TTFT target for goodput")
    slo_tpot_ms: float | None = Field(default=None, gt=0, le=1e9, description="serving: TPOT target for goodput")

    @model_serializer(mode="wrap")
    def _dump_own_kind(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """Only the keys of the workload's kind (a batch workload's dump is what it was before serving existed:
        run.json and sweep keys stay byte-identical)."""
        out: dict[str, object] = handler(self)
        drop = {*SERVING_FIELDS, "kind"} if self.kind == "batch" else set(BATCH_FIELDS)
        return {k: v for k, v in out.items() if k not in drop}

    @model_validator(mode="after")
    def _kind_keys(self) -> WorkloadSection:
        other = BATCH_FIELDS if self.kind == "serving" else SERVING_FIELDS
        fields = type(self).model_fields
        # a key of the other kind at its default is no mistake (a config dumped whole, as older run.json files hold)
        stray = [k for k in other if k in self.model_fields_set and getattr(self, k) != fields[k].default]
        if stray:
            belongs = "batch" if self.kind == "serving" else "serving"
            raise ValueError(
                f"{', '.join(stray)}: {'keys' if len(stray) > 1 else 'a key'} of kind: {belongs}, while this "
                f"workload is kind: {self.kind}; remove {'them' if len(stray) > 1 else 'it'} or set kind: {belongs}"
            )
        budget = self.max_num_batched_tokens
        if self.kind == "serving" and budget is not None and budget < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens = {budget:,} is below max_num_seqs = {self.max_num_seqs:,}: a decode "
                "iteration of every sequence would not fit the token budget (vLLM requires max_num_batched_tokens "
                ">= max_num_seqs); raise it or lower max_num_seqs"
            )
        return self

    @model_validator(mode="after")
    def _tokens_fit(self) -> WorkloadSection:
        if self.max_num_batched_tokens is not None and self.max_num_batched_tokens < self.batch_size:
            raise ValueError(
                f"max_num_batched_tokens = {self.max_num_batched_tokens:,} is below batch_size = "
                f"{self.batch_size:,}: each prefill iteration gives every sequence at least one token (vLLM "
                "requires max_num_batched_tokens >= max_num_seqs); raise it to at least the batch size"
            )
        if self.batch_size * self.prompt_len > MAX_TOKENS_PER_STEP:
            raise ValueError(
                f"batch_size x prompt_len = {self.batch_size * self.prompt_len:,} tokens in one prefill step, more "
                f"than {MAX_TOKENS_PER_STEP:,}: reduce one of them"
            )
        return self


MAX_DEVICES = 65_536
"""Devices of one deployment at most (a large Ascend cluster has a few thousand)."""


class ParallelSection(_Section):
    """How the model is split over devices (Megatron / ATB style): tp ranks share every layer, pp stages split
    the layers, dp replicas serve independent batches."""

    tp: int = Field(default=1, ge=1, le=1024, description="tensor-parallel ranks (heads, FFN and vocab split)")
    pp: int = Field(default=1, ge=1, le=1024, description="pipeline stages (layers split)")
    dp: int = Field(default=1, ge=1, le=MAX_DEVICES, description="data-parallel replicas (each with tp x pp cards)")
    microbatches: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="pipeline microbatches the batch is split into (vLLM's virtual engines); default: the "
        "largest divisor of workload.batch_size up to pp",
    )
    sequence_parallel: bool = Field(
        default=False,
        description="Megatron's sequence parallelism: the norms and residual adds run on each rank's share of the "
        "tokens; a ReduceScatter ends each row-parallel linear and an AllGather starts each column-parallel one (the "
        "MC2 kernels MatmulReduceScatter / AllGatherMatmul fuse them). Needs tp > 1 and a batch divisible by tp",
    )
    stage_layers: tuple[int, ...] | None = Field(
        default=None,
        strict=False,  # YAML gives a list
        max_length=1024,
        description="decoder layers per pipeline stage (vLLM's VLLM_PP_LAYER_PARTITION); default: an even split, "
        "the remainder on the stages before the last",
    )

    @model_validator(mode="after")
    def _devices(self) -> ParallelSection:
        if self.tp * self.pp * self.dp > MAX_DEVICES:
            raise ValueError(f"tp x pp x dp = {self.tp * self.pp * self.dp:,} devices, more than {MAX_DEVICES:,}")
        if self.pp == 1 and (self.microbatches or 1) > 1:
            raise ValueError(
                f"parallel.microbatches = {self.microbatches} needs pipeline stages: set parallel.pp > 1 or drop it"
            )
        if self.sequence_parallel and self.tp == 1:
            raise ValueError("parallel.sequence_parallel splits the tokens over the tp ranks: set parallel.tp > 1")
        if self.stage_layers is not None:
            if len(self.stage_layers) != self.pp:
                raise ValueError(
                    f"parallel.stage_layers lists {len(self.stage_layers)} stages but parallel.pp = {self.pp}: give "
                    "one layer count per stage"
                )
            if min(self.stage_layers) < 1:
                raise ValueError("parallel.stage_layers: every stage needs at least one decoder layer")
        return self

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp

    def microbatches_for(self, batch_size: int) -> int:
        """The microbatch count: as set, else the largest divisor of the batch up to pp (1 without stages)."""
        if self.microbatches is not None:
            return self.microbatches
        return max(m for m in range(1, min(self.pp, batch_size) + 1) if batch_size % m == 0)


class JitterSection(_Section):
    """Seeded multiplicative noise on durations, off by default (simulated runs are otherwise exact)."""

    kernel_cv: float = Field(default=0.0, ge=0.0, le=1.0, description="coefficient of variation of kernel durations")
    host_cv: float = Field(default=0.0, ge=0.0, le=1.0, description="coefficient of variation of host dispatch")


class ExecutionSection(_Section):
    mode: Literal["eager", "graph"] = Field(
        default="eager",
        description="eager = one host dispatch per kernel (torch_npu); graph = captured graph (ATB)",
    )
    host_dispatch_us: float | None = Field(
        default=None, ge=0, le=1e6, description="host cost per kernel launch; default 44 (eager) / 0 (graph)"
    )
    graph_launch_us: float = Field(
        default=60.0, ge=0, le=1e6, description="graph mode: host cost to launch one step's graph"
    )
    device_gap_us: float = Field(default=1.5, ge=0, le=1e6, description="graph mode: device-side gap between kernels")
    launch_latency_us: float = Field(default=5.0, ge=0, le=1e6, description="host launch -> task visible to the device")
    queue_depth: int = Field(
        default=1024, ge=1, le=1_000_000, description="host->device task queue depth (host blocks when full)"
    )
    step_overhead_us: float | None = Field(
        default=None,
        ge=0,
        le=1e8,
        description="host work per step before its first launch (generate loop, KV management); "
        "default 1300 (eager, calibrated) / 300 (graph)",
    )
    sync_us: float = Field(
        default=20.0, ge=0, le=1e6, description="device->host sync + copy of the sampled token per step"
    )
    collective_launch_us: float | None = Field(
        default=None,
        ge=0,
        le=1e6,
        description="eager: host cost of launching one HCCL collective; default the device topology's "
        "host_launch_us (eager) / 0 (graph)",
    )
    weight_format: Literal["nd", "nz"] | None = Field(
        default=None,
        description="weights as stored: nd (eager default; GEMV pays the ND->NZ reformat) or nz (graph/ATB default, "
        "converted at load)",
    )
    jitter: JitterSection = JitterSection()
    rank_slowdown: dict[Annotated[int, Field(ge=0, le=MAX_DEVICES - 1)], Annotated[float, Field(ge=0.1, le=100.0)]] = (
        Field(
            default_factory=dict,
            strict=False,
            max_length=64,
            description="global rank -> factor on its compute kernels' durations (a straggler: {3: 1.15}); the other "
            "ranks of its group wait for it in every collective (at most 64 ranks: each distinct one is simulated)",
        )
    )


class FusionSection(_Section):
    """A named strategy plus per-rule switches; seed 002's atb_fusion_config.yaml is translated to this."""

    strategy: str = Field(
        default="default", description="none, default, aggressive, all (or a strategy in the rules file)"
    )
    enable: tuple[str, ...] = Field(default=(), strict=False, max_length=256)  # YAML gives lists
    disable: tuple[str, ...] = Field(default=(), strict=False, max_length=256)
    softmax_fusion_max_seq: int = Field(
        default=1024,
        ge=1,
        le=MAX_TOKENS_PER_STEP,
        description="attention-softmax fusion is switched off above this sequence length",
    )
    shape_buckets: tuple[Annotated[int, Strict(), Field(ge=1, le=MAX_TOKENS_PER_STEP)], ...] | None = Field(
        default=None,
        strict=False,
        max_length=4096,
        description="token counts the fused kernels were compiled for; None = all shapes",
    )
    rules_file: str | None = Field(default=None, description="extra/override fusion rules YAML")
    source_format: Literal["atbprof", "atb_fusion_config"] = "atbprof"

    @model_validator(mode="after")
    def _pitfalls(self) -> FusionSection:
        overlap = set(self.enable) & set(self.disable)
        if overlap:
            raise ValueError(f"rules both enabled and disabled: {', '.join(sorted(overlap))}")
        return self


class OutputSection(_Section):
    dir: str | None = Field(default=None, description="output directory; default traces/<name>")
    trace: bool = Field(default=True, description="write a trace (see trace_format)")
    trace_format: Literal["chrome", "perfetto", "both"] = Field(
        default="chrome",
        description="chrome = trace.json.gz (msprof layout, Ascend tools read it); perfetto = trace.pftrace "
        "(native Perfetto protobuf, exact ns, 1/3 of the JSON); both",
    )
    trace_steps: str | None = Field(
        default=None, description="steps in the trace, e.g. '0-8,100' (default: all that fit in trace_max_mb)"
    )
    trace_layers: str | None = Field(
        default=None, description="decoder layers in the trace, e.g. '0-1,31' (model-level ops always stay)"
    )

    trace_ranks: str | None = Field(
        default=None,
        description="ranks of a multi-device run in the trace besides rank 0, e.g. '1-3,8' (a process group per "
        "rank, flows between their collectives; the trace_max_mb budget is shared)",
    )

    @field_validator("trace_steps", "trace_layers", "trace_ranks", mode="before")
    @classmethod
    def _ranges(cls, value: object) -> object:
        return _range_list(value, "expected ranges like 0-3,10,20- (non-negative integers, low-high)")

    max_ops: int = Field(
        default=200_000_000,
        ge=1,
        le=10**10,
        description="refuse a run that would produce more ops (before any work; ~2.3 M ops/s, ~10 bytes/op of Parquet)",
    )
    trace_max_mb: float | None = Field(
        default=600,
        gt=0,
        le=1e7,
        description="without trace_steps, keep the whole steps that fit in this much estimated JSON (the Perfetto UI "
        "holds ~2 GB and a trace takes 2-4x its size there; null = no limit); ops.parquet always has every op",
    )


class NumericsTolerance(_Section):
    ratio: float = Field(
        default=2.0, ge=1.0, le=1e6, description="a fused kernel may have this many times the unfused error"
    )
    floor_ulp: float = Field(default=4.0, gt=0, le=1e6, description="errors below this many half-ULPs always pass")


class NumericsSection(_Section):
    """Execute the layers for real (numpy, NPU dtype behaviour): fused vs unfused vs float64 (off by default)."""

    enabled: bool = False
    layers: str = Field(default="0", description="decoder layers to execute, e.g. '0' or '0-1,31'")
    max_prompt: int = Field(
        default=8192, ge=1, le=1_048_576, description="prefill tokens executed at most (the prompt is capped)"
    )
    query_rows: int | None = Field(
        default=128,
        ge=1,
        le=1_048_576,
        description="prefill rows whose outputs are computed (all rows feed K/V); null = all",
    )
    decode: bool = Field(default=True, description="also one decode step over the prefill's KV cache")
    weights: str | None = Field(default=None, description="Hugging Face LLaMA .safetensors (default: seeded random)")
    logit_std: float = Field(default=1.8, gt=0, le=100, description="random weights: std of the attention logits")
    add_layernorm_stats: Literal["fp32", "fp16", "welford"] = Field(
        default="fp32", description="AddLayerNorm's one-pass statistics accumulators (gpt architecture)"
    )
    tolerance: NumericsTolerance = NumericsTolerance()

    @field_validator("layers", mode="before")
    @classmethod
    def _layer_ranges(cls, value: object) -> object:
        return _range_list(value, "expected layer ranges like 0 or 0-1,31 (non-negative integers)")


class RunConfig(_Section):
    name: str = Field(default="run", description="names the output directory traces/<name>")

    @field_validator("name")
    @classmethod
    def _directory_name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}", value):
            raise ValueError(
                "use 1-200 letters, digits, '.', '_' or '-', not starting with '.' (the name becomes the output "
                "directory traces/<name>)"
            )
        return value

    seed: int = Field(default=0, ge=0, le=2**63 - 1, description="seeds the jitter and the numerics' weights")
    model: ModelSection
    device: DeviceSection = DeviceSection()
    parallel: ParallelSection = ParallelSection()
    workload: WorkloadSection = WorkloadSection()
    execution: ExecutionSection = ExecutionSection()
    fusion: FusionSection = FusionSection()
    output: OutputSection = OutputSection()
    numerics: NumericsSection = NumericsSection()

    @model_validator(mode="after")
    def _slow_ranks_exist(self) -> RunConfig:
        devices = self.parallel.devices
        if self.numerics.enabled and self.parallel.tp * self.parallel.pp > 1:
            raise ValueError(
                "numerics executes one device's whole layer: run it with parallel.tp 1 and pp 1 (sharding does not "
                "change what a kernel computes, only on how many rows)"
            )
        m, b = self.parallel.microbatches, self.workload.batch_size
        if m is not None and b % m:
            raise ValueError(
                f"parallel.microbatches = {m} does not divide workload.batch_size = {b}: each microbatch takes an "
                f"equal share of the sequences; use a divisor of {b}"
            )
        outside = sorted(r for r in self.execution.rank_slowdown if r >= devices)
        if outside:
            raise ValueError(
                f"execution.rank_slowdown names rank {', '.join(map(str, outside))}, but the deployment has "
                f"{devices} device{'s' if devices > 1 else ''} (ranks 0-{devices - 1}; parallel.tp x pp x dp)"
            )
        return self
