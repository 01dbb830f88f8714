"""Numerics: execute the decoder layers for real (numpy, NPU dtype behaviour), fused and unfused, against float64.

Public API: `run_numerics(sim)` -> NumericsReport; `load_numerics(run_dir)` -> NumericsReport | None (the JSON
shape is `NumericsReport.model_dump(mode="json")`, stored under run.json's `numerics` key)."""

from atbprof.numerics.report import KernelNumerics, LayerNumerics, NumericsReport, load_numerics

__all__ = ["KernelNumerics", "LayerNumerics", "NumericsReport", "load_numerics"]
