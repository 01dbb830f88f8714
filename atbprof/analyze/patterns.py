"""Detection patterns as data (atbprof/analyze/patterns.yaml + an optional user file), compiled to symbol regexes.

Op types map to classes, each class to one character; a pattern `<Cast>?<Pow><ReduceMean>...` becomes a regex over
those characters. Tolerated gap classes (MemSet) are allowed before every token but never at the start of a match.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from atbprof.errors import ConfigError

FindingKind = Literal[
    "decomposed_rmsnorm", "decomposed_layernorm", "add_norm", "norm_matmul", "unfused_op", "fused_norm", "fused_op"
]
KINDS: tuple[str, ...] = (
    "decomposed_rmsnorm",
    "decomposed_layernorm",
    "add_norm",
    "norm_matmul",
    "unfused_op",  # another fusion of the catalogue (RoPE, SwiGLU, attention, KV-cache write) not made
    "fused_norm",
    "fused_op",  # an inference fusion of the catalogue (RoPE, SwiGLU, attention...) already made
)
OPPORTUNITY_KINDS = frozenset(KINDS[:5])
Level = Literal["kernel", "framework"]

OTHER = ord("~")  # symbol of op types in no class
SEPARATOR = ord("\n")  # between (step, stream) groups: `.` in a user regex does not cross it
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"  # no regex metacharacters
_TOKEN = re.compile(r"<([^<>]+)>")


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Pattern(_M):
    name: str
    kind: FindingKind
    regex: str = Field(min_length=1)
    gap: tuple[str, ...] = ()
    between: tuple[str, ...] = ()
    across_streams: bool = False
    fusion: str = ""
    fused_as: str = ""
    rule: str = ""
    anchor: Literal[0, -1] = 0
    claims: bool = False
    # a claimed chain then reads as one op of this class at its first and its last member: the decomposed norm, as
    # the Add in front of it and the MatMul after it see it once the chain is one kernel (add-norm and norm-matmul
    # patterns over the class fuse across the chain)
    leaves: str | None = None
    check: Literal["none", "feeds", "feeds_only"] = "none"


class LevelPatterns(_M):
    classes: dict[str, tuple[str, ...]] = {}
    patterns: tuple[Pattern, ...] = ()


class TrainingKernels(_M):
    """Op-type globs that mark a training step's phases (analyze/training.py)."""

    backward: tuple[str, ...] = ()
    optimizer: tuple[str, ...] = ()
    norm_backward: tuple[str, ...] = ()


class PatternFile(_M):
    kernel: LevelPatterns = LevelPatterns()
    framework: LevelPatterns = LevelPatterns()
    categories: dict[str, tuple[str, ...]] = {}
    training: TrainingKernels = TrainingKernels()


@dataclass(frozen=True)
class CompiledPattern:
    spec: Pattern
    regex: re.Pattern[bytes]
    plain: re.Pattern[bytes]  # the same regex without gap tolerance (for op strings that have no gap ops)
    gap_symbols: tuple[int, ...]
    leaves_symbol: int | None = None
    between_symbols: tuple[int, ...] = ()  # tolerated between tokens, not members
    # symbols of which a match needs at least one, per required token: a profile without one is not scanned
    required: tuple[tuple[int, ...], ...] = ()
    single: tuple[int, ...] | None = None  # the regex is one token (<A|B>): its symbols, matched without the regex


@dataclass(frozen=True)
class CompiledLevel:
    """The classes and compiled patterns of one level (kernel or framework)."""

    classes: dict[str, tuple[str, ...]]
    symbols: dict[str, int]  # class name -> symbol byte
    patterns: tuple[CompiledPattern, ...]
    memo: dict[str, str | None] = field(default_factory=dict, compare=False, repr=False)  # op type -> class

    def class_of(self, op_type: str) -> str | None:
        if op_type not in self.memo:
            self.memo[op_type] = _first_match(self.classes, op_type)
        return self.memo[op_type]

    def lookup(self, names: list[str]) -> np.ndarray:
        """Symbol byte of each name (a dictionary of op types): one uint8 per entry."""
        out = np.full(len(names), OTHER, dtype=np.uint8)
        for i, name in enumerate(names):
            cls = self.class_of(name) if name is not None else None
            if cls is not None:
                out[i] = self.symbols[cls]
        return out


@dataclass(frozen=True)
class PatternSet:
    kernel: CompiledLevel
    framework: CompiledLevel
    categories: dict[str, tuple[str, ...]]
    source: str
    training: TrainingKernels = field(default_factory=TrainingKernels)
    memo: dict[str, str | None] = field(default_factory=dict, compare=False, repr=False)  # op type -> category

    def category_of(self, op_type: str) -> str | None:
        if op_type not in self.memo:
            self.memo[op_type] = _first_match(self.categories, op_type)
        return self.memo[op_type]


def _first_match(named_globs: dict[str, tuple[str, ...]], op_type: str) -> str | None:
    """The first name whose globs match the op type (names repeat across millions of ops: callers memoise)."""
    for name, literals, wild in _matchers(tuple(named_globs.items())):
        if op_type in literals or (wild is not None and wild.match(op_type)):
            return name
    return None


@lru_cache(maxsize=32)
def _matchers(
    named_globs: tuple[tuple[str, tuple[str, ...]], ...],
) -> list[tuple[str, frozenset[str], re.Pattern[str] | None]]:
    """Per name: its globs without wildcards as a set, and the rest as one regex (fnmatchcase's translation). Most
    of the vocabulary is literal names, and compiling ~300 globs one by one was a tenth of a small analysis."""
    out = []
    for name, globs in named_globs:
        wild = [g for g in globs if any(c in g for c in "*?[")]
        regex = re.compile("|".join(fnmatch.translate(g) for g in wild)) if wild else None
        out.append((name, frozenset(g for g in globs if g not in wild), regex))
    return out


def required_tokens(regex: str) -> list[tuple[str, ...]]:
    """The tokens every match contains: those outside parentheses and not made optional (?, *, {0,...}); none
    when the regex has a top-level alternative (then no token is certain)."""
    out: list[tuple[str, ...]] = []
    depth, i = 0, 0
    while i < len(regex):
        ch = regex[i]
        if ch == "<":
            end = regex.index(">", i)
            after = regex[end + 1 : end + 3]
            if depth == 0 and not (after[:1] in ("?", "*") or after.startswith("{0")):
                out.append(tuple(n.strip() for n in regex[i + 1 : end].split("|")))
            i = end + 1
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            return []
        elif ch == "\\":
            i += 1
        i += 1
    return out


def token_classes(regex: str) -> list[tuple[str, ...]]:
    """The class names of each token of a pattern's regex (<A> -> (A,), <A|B> -> (A, B))."""
    return [tuple(n.strip() for n in m.group(1).split("|")) for m in _TOKEN.finditer(regex)]


def _catalogue_names() -> set[str]:
    from atbprof.fusion.catalogue import fusion_catalogue

    return {row.name for row in fusion_catalogue().fusions}


def _compile_level(level: LevelPatterns, where: str) -> CompiledLevel:
    if len(level.classes) > len(_ALPHABET):
        raise ConfigError(f"{where}: {len(level.classes)} classes; at most {len(_ALPHABET)} are supported")
    symbols = {name: ord(_ALPHABET[i]) for i, name in enumerate(level.classes)}
    compiled = []
    for p in level.patterns:
        problems: list[str] = []

        def char(name: str, p: Pattern = p, problems: list[str] = problems) -> str:
            if name not in symbols:
                problems.append(f"{where}: pattern {p.name!r}: unknown class <{name}> (classes: {', '.join(symbols)})")
                return "~"
            return chr(symbols[name])

        gap = "".join(char(g) for g in p.gap)
        between = "".join(char(g) for g in p.between)
        used = {name for alternatives in token_classes(p.regex) for name in alternatives}
        clash = sorted(used & (set(p.gap) | set(p.between)))
        if clash:
            problems.append(
                f"{where}: pattern {p.name!r}: {', '.join(clash)} is both a gap / between class and a token"
            )

        def translate(gap: str, p: Pattern = p, char: Callable[[str], str] = char) -> str:
            def token(match: re.Match[str]) -> str:
                chars = "".join(char(n.strip()) for n in match.group(1).split("|"))
                body = chars if len(chars) == 1 else f"[{chars}]"
                return f"(?:[{gap}]*{body})" if gap else body

            text = _TOKEN.sub(token, p.regex)
            return f"(?![{gap}])(?:{text})" if gap else text  # a match never starts with a tolerated op

        texts = (translate(gap + between), translate(between))
        if problems:
            raise ConfigError(problems)
        try:
            regex, plain = (re.compile(t.encode("ascii")) for t in texts)
        except (re.error, UnicodeEncodeError) as err:
            raise ConfigError(f"{where}: pattern {p.name!r}: not a valid regex ({err})") from None
        if regex.match(b"") or plain.match(b""):
            raise ConfigError(f"{where}: pattern {p.name!r} matches an empty op sequence")
        if p.kind == "unfused_op" and p.fusion not in _catalogue_names():
            raise ConfigError(
                f"{where}: pattern {p.name!r}: fusion {p.fusion!r} is not a row of the fusion catalogue "
                f"(rows: {', '.join(sorted(_catalogue_names()))})"
            )
        if p.leaves is not None and p.leaves not in symbols:
            raise ConfigError(f"{where}: pattern {p.name!r}: leaves {p.leaves!r} is not a class")
        if p.leaves is not None and not p.claims:
            raise ConfigError(f"{where}: pattern {p.name!r}: leaves needs claims: true")
        leaves = symbols[p.leaves] if p.leaves is not None else None
        required = tuple(tuple(symbols[n] for n in names) for names in required_tokens(p.regex))
        one = _TOKEN.fullmatch(p.regex.strip())
        single = required[0] if one and not gap and not between and len(required) == 1 else None
        compiled.append(
            CompiledPattern(
                p, regex, plain, tuple(ord(c) for c in gap), leaves, tuple(ord(c) for c in between), required, single
            )
        )
    return CompiledLevel(dict(level.classes), symbols, tuple(compiled))


def _parse(doc: object, source: str) -> PatternFile:
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: expected a mapping with 'kernel', 'framework' and/or 'categories'")
    try:
        return PatternFile.model_validate(doc)
    except ValidationError as err:
        raise ConfigError(
            [f"{source}: {'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()]
        ) from None


def _merge_level(base: LevelPatterns, extra: LevelPatterns) -> LevelPatterns:
    classes = {**base.classes, **extra.classes}
    by_name = {p.name: p for p in base.patterns}
    order = [p.name for p in base.patterns]
    for p in extra.patterns:
        if p.name not in by_name:
            order.append(p.name)
        by_name[p.name] = p
    return LevelPatterns(classes=classes, patterns=tuple(by_name[n] for n in order))


@lru_cache(maxsize=1)
def _builtin() -> PatternFile:
    """patterns.yaml, parsed once per process (libyaml's loader where PyYAML has it: ~10x the pure-Python one),
    with the fusion catalogue's fused kernels and calls (data/fusion_catalogue.yaml: one source of names)."""
    text = resources.files("atbprof.analyze").joinpath("patterns.yaml").read_text(encoding="utf-8")
    doc = _parse(yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)), "patterns.yaml")
    return _with_catalogue(doc)


def _with_catalogue(doc: PatternFile) -> PatternFile:
    """Each catalogue fusion the norm patterns do not cover becomes a class of its fused Types (kernel level) and of
    its torch_npu calls (framework level), and a pattern that counts it as already fused. Its classes come before
    the built-in ones: fused forms first, as patterns.yaml orders its own (KvRmsNormRopeCache holds `RmsNorm`)."""
    from atbprof.fusion.catalogue import fusion_catalogue

    kernel: dict[str, tuple[str, ...]] = {}
    framework: dict[str, tuple[str, ...]] = {}
    k_patterns, f_patterns = list(doc.kernel.patterns), list(doc.framework.patterns)
    for row in fusion_catalogue().fusions:
        if row.detected == "norm-patterns":  # the norm patterns name its fused kernels themselves
            continue
        cls = f"Fused_{row.name}"
        kernel[cls] = row.fused_types
        framework[cls] = row.framework_names()
        k_patterns.append(Pattern(name=f"fused-{row.name}", kind="fused_op", regex=f"<{cls}>"))
        f_patterns.append(Pattern(name=f"npu-fused-{row.name}", kind="fused_op", regex=f"<{cls}>"))
    kernel.update(doc.kernel.classes)
    framework.update(doc.framework.classes)
    return doc.model_copy(
        update={
            "kernel": LevelPatterns(classes=kernel, patterns=tuple(k_patterns)),
            "framework": LevelPatterns(classes=framework, patterns=tuple(f_patterns)),
        }
    )


def load_patterns(extra_file: str | None = None) -> PatternSet:
    """The built-in patterns, extended/overridden by a user file with the same layout."""
    doc = _builtin()
    source = "built-in patterns"
    if extra_file:
        from atbprof.yamlio import load_yaml_file

        extra = _parse(load_yaml_file(extra_file, "--patterns"), extra_file)
        doc = PatternFile(
            kernel=_merge_level(doc.kernel, extra.kernel),
            framework=_merge_level(doc.framework, extra.framework),
            categories={**doc.categories, **extra.categories},
            training=TrainingKernels(
                backward=extra.training.backward or doc.training.backward,
                optimizer=extra.training.optimizer or doc.training.optimizer,
                norm_backward=extra.training.norm_backward or doc.training.norm_backward,
            ),
        )
        source = f"built-in patterns + {extra_file}"
    return PatternSet(
        kernel=_compile_level(doc.kernel, "kernel"),
        framework=_compile_level(doc.framework, "framework"),
        categories=dict(doc.categories),
        source=source,
        training=doc.training,
    )
