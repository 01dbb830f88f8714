"""Step plan: the prefill (step 0, or steps 0..C-1 when chunked) then the decode steps, each with its query and KV
lengths."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PHASES = ("prefill", "decode")


@dataclass(frozen=True)
class StepPlan:
    phase: str
    steps: np.ndarray  # step numbers
    sq: np.ndarray  # new tokens per sequence
    skv: np.ndarray  # KV length after appending them
    attend: np.ndarray  # cache positions eager attention runs over (skv, or a fixed cache's size)

    def chunks(self, size: int) -> list[StepPlan]:
        return [
            StepPlan(
                self.phase,
                self.steps[a : a + size],
                self.sq[a : a + size],
                self.skv[a : a + size],
                self.attend[a : a + size],
            )
            for a in range(0, len(self.steps), size)
        ]


def prefill_chunk(prompt_len: int, batch: int, max_num_batched_tokens: int | None) -> int:
    """Prompt tokens of each sequence one prefill iteration processes: the whole prompt, or with chunked prefill
    (vLLM's `max_num_batched_tokens`, a token budget per iteration shared by the batch) the budget's share of
    each sequence."""
    if max_num_batched_tokens is None or batch * prompt_len <= max_num_batched_tokens:
        return prompt_len
    return max(1, max_num_batched_tokens // batch)


def plan_steps(
    prompt_len: int, decode_tokens: int, fixed_cache_len: int | None = None, chunk: int | None = None
) -> list[StepPlan]:
    """Prefill processes the prompt and samples the first token; decode step s reads a KV cache of prompt+s.
    With a fixed cache of `fixed_cache_len` positions, eager decode attention runs over all of them (masked);
    prefill attends over the prompt's own keys (TorchAir's fixed KV cache). `chunk`: chunked prefill, `chunk`
    prompt tokens per sequence per iteration (the last one the rest), each attending to the cached prefix and
    causally to itself; its steps are 0..C-1 and the decode steps follow."""
    size = min(chunk or prompt_len, prompt_len)
    ends = np.minimum(np.arange(size, prompt_len + size, size), prompt_len)
    sq = np.diff(ends, prepend=0)
    prefill = StepPlan("prefill", np.arange(len(ends)), sq, ends, ends)
    plans = [prefill]
    if decode_tokens:
        s = np.arange(1, decode_tokens + 1)
        skv = prompt_len + s
        attend = skv if fixed_cache_len is None else np.full_like(skv, fixed_cache_len)
        plans.append(StepPlan("decode", s + len(ends) - 1, np.ones_like(s), skv, attend))
    return plans
