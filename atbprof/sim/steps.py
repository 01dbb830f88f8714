"""Step plan: prefill (step 0) then decode steps 1..N, each with its query and KV lengths."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StepPlan:
    phase: str
    steps: np.ndarray  # step numbers
    sq: np.ndarray  # new tokens per sequence
    skv: np.ndarray  # KV length after appending them

    def chunks(self, size: int) -> list[StepPlan]:
        return [
            StepPlan(self.phase, self.steps[a : a + size], self.sq[a : a + size], self.skv[a : a + size])
            for a in range(0, len(self.steps), size)
        ]


def plan_steps(prompt_len: int, decode_tokens: int) -> list[StepPlan]:
    """Prefill processes the prompt and samples the first token; decode step s reads a KV cache of prompt+s."""
    prefill = StepPlan("prefill", np.array([0]), np.array([prompt_len]), np.array([prompt_len]))
    plans = [prefill]
    if decode_tokens:
        s = np.arange(1, decode_tokens + 1)
        plans.append(StepPlan("decode", s, np.ones_like(s), prompt_len + s))
    return plans
