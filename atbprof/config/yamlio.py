"""Reading a user's YAML file (a device spec, a rules file) with one clear message per failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from atbprof.errors import ConfigError


def load_yaml_file(path: str | Path, key: str) -> Any:
    """Parse `path`, named in messages by the config `key` that points at it (e.g. `device.spec`)."""
    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{key}: {path}: no such file") from None
    except OSError as err:
        raise ConfigError(f"{key}: {path}: cannot read ({err.strerror})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{key}: {path}{where}: not valid YAML ({getattr(err, 'problem', None) or err})") from None
