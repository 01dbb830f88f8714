"""Reading a user's YAML (a run config, a device spec, a rules or patterns file, a --set value) within bounds.

Before anything is built, one pass over the parser's events (PyYAML's parser is a state machine, not recursive)
bounds the nesting depth, the aliases and the size of the document as expanded (an alias bomb of 9 levels x 10
aliases expands to 10^9 nodes from 100 lines). Then the document is built with duplicate keys refused (PyYAML
silently keeps the last one), and its key paths are mapped to lines for messages, without following aliases.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from atbprof.errors import ConfigError, InputError
from atbprof.inputs import read_text, regular_file

MAX_YAML_BYTES = 4_000_000
"""A run config is ~1 KB and the largest rules file ~30 KB."""
MAX_SPEC_YAML_BYTES = 64_000_000
"""A sweep spec may list its points (100,000 explicit points: ~6 MB)."""
MAX_DEPTH = 64
MAX_ALIASES = 1_000
MAX_EXPANDED_NODES = 200_000

Lines = dict[tuple[str, ...], int]


@dataclass(frozen=True)
class YamlDoc:
    data: Any
    lines: Lines
    """1-based line of each key path of the top-level mapping (for messages)."""


def load_data(text: str) -> Any:
    """One of atbprof's own data files (rules, catalogues, device specs): libyaml's safe loader where PyYAML has it
    (~10x the pure-Python one), the same result either way."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _where(source: str, mark: Any) -> str:
    return f"{source} line {mark.line + 1}" if mark is not None else source


def check_bounds(text: str, source: str) -> None:
    """Refuse documents nested too deep, with too many aliases, or that expand to too many nodes: more than
    MAX_EXPANDED_NODES or, for a long document, its length in characters (without aliases a node takes at least a
    character, so only aliases can pass that: memory stays bounded by the text's size)."""
    stack: list[list[Any]] = []  # [anchor, nodes so far] per open collection
    anchors: dict[str, int] = {}
    total = aliases = 0
    most = max(MAX_EXPANDED_NODES, len(text))
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            size = 0
            if isinstance(event, yaml.CollectionStartEvent):
                stack.append([event.anchor, 1])
                if len(stack) > MAX_DEPTH:
                    raise ConfigError(
                        f"{_where(source, event.start_mark)}: nested more than {MAX_DEPTH} levels deep; a config "
                        "needs a handful: flatten it"
                    )
                continue
            if isinstance(event, yaml.CollectionEndEvent):
                anchor, size = stack.pop()
                if anchor is not None:
                    anchors[anchor] = size
            elif isinstance(event, yaml.ScalarEvent):
                size = 1
                if event.anchor is not None:
                    anchors[event.anchor] = 1
            elif isinstance(event, yaml.AliasEvent):
                aliases += 1
                size = anchors.get(event.anchor or "", 1)
                if aliases > MAX_ALIASES:
                    raise ConfigError(
                        f"{_where(source, event.start_mark)}: more than {MAX_ALIASES} aliases (*name); write the "
                        "values out"
                    )
            else:
                continue
            if stack:
                stack[-1][1] += size
            total += size
            if total > most or (stack and stack[-1][1] > most):
                raise ConfigError(
                    f"{_where(source, event.start_mark)}: the document expands to more than {most:,} values "
                    "(through aliases: a 'billion laughs' document?); write the values out"
                )
    except yaml.YAMLError as err:
        raise _syntax_error(err, source) from None


class YamlSyntaxError(ConfigError):
    """Text that is not YAML at all (a `--set` value then is taken as the text it is)."""


def _syntax_error(err: yaml.YAMLError, source: str) -> YamlSyntaxError:
    mark = getattr(err, "problem_mark", None)
    where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return YamlSyntaxError(f"{source}{where}: not valid YAML ({getattr(err, 'problem', None) or err})")


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (merge keys `<<` may still be overridden)."""

    source = "YAML"

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: SafeConstructor says so below
                continue
            line = key_node.start_mark.line + 1
            if first is not None:
                raise ConfigError(
                    f"{self.source} line {line}: key {key!r} is given twice (first on line {first}); YAML keeps "
                    "only one of them: remove the other"
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def key_lines(root: yaml.Node | None) -> Lines:
    """Map each key path of a YAML mapping to its 1-based line (an aliased subtree is visited once)."""
    lines: Lines = {}
    visited: set[int] = set()

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        if not isinstance(node, yaml.MappingNode) or id(node) in visited:
            return
        visited.add(id(node))
        for key, value in node.value:
            sub = (*path, str(key.value))
            lines.setdefault(sub, key.start_mark.line + 1)
            walk(value, sub)

    if root is not None:
        walk(root, ())
    return lines


def parse_yaml(text: str, source: str, max_bytes: int = MAX_YAML_BYTES) -> YamlDoc:
    """The document in `text` (named `source` in messages) and its key lines; ConfigError on any problem."""
    if len(text) > max_bytes:
        raise ConfigError(f"{source}: {len(text):,} characters; this YAML input is at most {max_bytes:,}")
    check_bounds(text, source)
    loader = _StrictLoader(text)
    loader.source = source
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as err:
        raise _syntax_error(err, source) from None
    finally:
        loader.dispose()
    return YamlDoc(data, key_lines(root))


def read_yaml(path: str | Path, key: str | None = None, max_bytes: int = MAX_YAML_BYTES) -> YamlDoc:
    """Parse the YAML file at `path` (at most `max_bytes`: a fixed bound of the input's kind, not the
    --max-input-mb cap); messages name the config `key` that points at it, if any."""
    path = Path(path)
    source = f"{key}: {path}" if key else str(path)
    try:
        size = regular_file(path, 1 << 62)  # a regular file that exists; its bound is this kind's, below
        if size > max_bytes:
            raise ConfigError(f"{source}: {size:,} bytes; this YAML input is at most {max_bytes:,}")
        text = read_text(path, max_bytes)
    except InputError as err:
        raise ConfigError(f"{key}: {err}" if key else str(err)) from None
    return parse_yaml(text, source, max_bytes)


def load_yaml_file(path: str | Path, key: str) -> Any:
    """Parse `path`, named in messages by the config `key` that points at it (e.g. `device.spec`)."""
    return read_yaml(path, key).data
