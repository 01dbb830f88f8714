"""Fusion passes: rules (data, YAML) rewrite the op graph; every fused kernel records what it replaced."""

from atbprof.fusion.passes import FusionContext, FusionResult, NearMiss, apply_fusion
from atbprof.fusion.rules import RuleSet, load_rules

__all__ = ["FusionContext", "FusionResult", "NearMiss", "RuleSet", "apply_fusion", "load_rules"]
