"""The Python API: what each command does, as a function returning its typed result (for notebooks and scripts).

Every result has `.to_dict()`, equal to the command's `--format json` output (the documented contract), and, where
it is a table, `.to_arrow()`. They are exported from the package: `atbprof.load`, `atbprof.analyze`,
`atbprof.diff`, `atbprof.simulate`, `atbprof.sweep`, `atbprof.predict`, `atbprof.load_target`. Errors are
`atbprof.errors.AtbprofError` subclasses (InputError, ConfigError, ...), with the message the command prints."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from atbprof.config.models import RunConfig
    from atbprof.importers.base import Profile
    from atbprof.run import RunResult
    from atbprof.serving.run import ServingResult
    from atbprof.target import Target

from atbprof.analyze.entry import analyze_any as analyze
from atbprof.diff.entry import diff_any as diff
from atbprof.predict.entry import predict_any as predict
from atbprof.sweep.entry import sweep_spec as sweep

PathLike = str | os.PathLike[str]

__all__ = ["analyze", "diff", "load", "load_target", "predict", "simulate", "sweep"]


def load(path: PathLike, *, framework: bool = True) -> Profile:
    """Any profile atbprof reads (a run of ours, torch_npu text or db, msprof, Kineto / torch.profiler, a trace
    JSON) as a `Profile`: Arrow `ops` (device kernels, schema `atbprof.importers.base.OPS_SCHEMA`), `steps` and
    `step_frames` where known, `framework` ops (host), and `meta`. `framework=False` skips the host ops."""
    from atbprof.importers import load_profile

    return load_profile(Path(path), framework=framework)


def simulate(
    config: PathLike | RunConfig,
    *,
    overrides: Sequence[str] = (),
    out: PathLike | None = None,
    force: bool = False,
) -> RunResult | ServingResult:
    """`atbprof run`: the config simulated and its run directory written (`out`, default traces/<name>; an
    existing one is replaced only with `force`, and only if atbprof wrote it). `config`: a YAML file, a run
    directory (that run again) or a `RunConfig`; `overrides`: `KEY.PATH=VALUE` as `--set` takes them."""
    from atbprof.config import RunConfig, load_config
    from atbprof.run import run_simulation

    if isinstance(config, RunConfig):
        if overrides:
            raise TypeError("overrides apply to a config file; change the RunConfig itself (model_copy)")
        cfg = config
    else:
        cfg = load_config(Path(config), list(overrides))
    return run_simulation(cfg, Path(out) if out is not None else None, force)


def load_target(*paths: PathLike, top: int = 10) -> Target:
    """What `plot` and `report` draw: one input (a run, a cluster, a sweep, a profile) or two to compare, read
    into a typed target (`atbprof.target`)."""
    from atbprof.target import load_target as load

    return load([Path(p) for p in paths], top=top)
