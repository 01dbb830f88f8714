"""Step plan: prefill (step 0) then decode steps 1..N, each with its query and KV lengths."""

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


def plan_steps(prompt_len: int, decode_tokens: int, fixed_cache_len: int | None = None) -> list[StepPlan]:
    """Prefill processes the prompt and samples the first token; decode step s reads a KV cache of prompt+s.
    With a fixed cache of `fixed_cache_len` positions, eager decode attention runs over all of them (masked);
    prefill attends over the prompt's own keys (TorchAir's fixed KV cache)."""
    prompt = np.array([prompt_len])
    prefill = StepPlan("prefill", np.array([0]), prompt, prompt, prompt)
    plans = [prefill]
    if decode_tokens:
        s = np.arange(1, decode_tokens + 1)
        skv = prompt_len + s
        attend = skv if fixed_cache_len is None else np.full_like(skv, fixed_cache_len)
        plans.append(StepPlan("decode", s, np.ones_like(s), skv, attend))
    return plans
