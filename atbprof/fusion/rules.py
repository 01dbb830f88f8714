"""Fusion rules and named strategies, loaded from atbprof/data/fusion_rules.yaml (+ an optional user file)."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from atbprof.errors import ConfigError
from atbprof.suggest import did_you_mean
from atbprof.yamlio import load_data


class Pattern(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    ops: tuple[str, ...] = Field(min_length=1)
    fused: str | dict[str, str]
    fused_by_soc: dict[str, str] = {}
    op_name: str | None = None
    export_if: dict[int, str] = {}
    role_from: int | None = None  # overrides the rule's (AllGatherMatmul takes its MatMul's role and stream)


class Group(BaseModel):
    """kind: grouped - one fused kernel taking every kernel of these roles in a layer."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    fused: str
    roles: tuple[str, ...] = Field(min_length=1)


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = ""
    doc: str = ""
    kind: Literal["chain", "siblings", "grouped"]
    patterns: tuple[Pattern, ...] = ()
    groups: tuple[Group, ...] = ()
    roles: tuple[str, ...] = ()
    role: str = ""
    library: bool = False
    static_shape: bool = False
    max_seq: bool = False
    role_from: int = -1
    exports: tuple[int, ...] = ()
    vec_scale: float = 1.0
    dtypes: tuple[str, ...] = ()  # model dtypes the fused kernel supports; empty = all
    absorb_inputs: tuple[str, ...] = ()
    actual_lengths: bool = False  # the fused kernel takes the actual sequence lengths: attends over Skv, not L
    causal: bool = False  # with actual_lengths: skips the masked upper triangle (FlashAttention's causal mask)
    phases: tuple[str, ...] = ()  # phases the rule is applied in (empty: all); elsewhere a near-miss says so
    connected: bool = True  # false: members need not read one another (ReshapeAndCache writes K and V at once)


class RuleSet(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    rules: dict[str, Rule]
    strategies: dict[str, tuple[str, ...]]

    def resolve(self, strategy: str, enable: tuple[str, ...] = (), disable: tuple[str, ...] = ()) -> list[Rule]:
        """The rules a run applies, in rule-file order."""
        if strategy not in self.strategies:
            raise ConfigError(
                f"fusion.strategy = {strategy!r}: unknown strategy{did_you_mean(strategy, self.strategies)} "
                f"(allowed: {', '.join(self.strategies)})"
            )
        unknown = [r for r in (*enable, *disable) if r not in self.rules]
        if unknown:
            raise ConfigError(
                f"fusion.enable/disable: unknown rule(s) {', '.join(unknown)}{did_you_mean(unknown[0], self.rules)} "
                f"(allowed: {', '.join(self.rules)})"
            )
        chosen = (set(self.strategies[strategy]) | set(enable)) - set(disable)
        return [rule for name, rule in self.rules.items() if name in chosen]


def _parse(doc: object, source: str) -> RuleSet:
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: expected a mapping with 'rules' and 'strategies'")
    try:
        rs = RuleSet.model_validate({"rules": doc.get("rules", {}), "strategies": doc.get("strategies", {})})
    except ValidationError as err:
        raise ConfigError(
            [f"{source}: {'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()]
        ) from None
    rules = {name: rule.model_copy(update={"name": name}) for name, rule in rs.rules.items()}
    return RuleSet(rules=rules, strategies=rs.strategies)


@lru_cache(maxsize=1)
def _builtin_rules() -> RuleSet:
    text = resources.files("atbprof.data").joinpath("fusion_rules.yaml").read_text(encoding="utf-8")
    return _parse(load_data(text), "fusion_rules.yaml")


def load_rules(extra_file: str | None = None) -> RuleSet:
    """Built-in rules, then a user file whose rules/strategies override or extend them."""
    base = _builtin_rules()
    if not extra_file:
        return base
    from atbprof.yamlio import load_yaml_file

    extra = _parse(load_yaml_file(extra_file, "fusion.rules_file"), extra_file)
    return RuleSet(rules={**base.rules, **extra.rules}, strategies={**base.strategies, **extra.strategies})
