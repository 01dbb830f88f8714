"""One point of a sweep, run where the pool puts it (this process, a worker process, a Ray task): its config, the
run summary (summary-only, or a whole run with `--keep-runs`), or why it has none.

The outcome is plain data (picklable, JSON-able): the summary as run.json has it, the memory estimate (also for
a point that does not fit), and the error. A point never raises: an input problem is its row's `error`; an
atbprof bug is recorded as one too (`internal`), and the sweep ends with exit 70 after writing what it has."""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atbprof.errors import AtbprofError, DoesNotFitError


@dataclass(frozen=True)
class PointTask:
    index: int
    base: str
    overrides: tuple[str, ...]
    run_dir: str | None = None  # --keep-runs: the whole run goes here
    record_to: str | None = None  # the progress file this point's outcome is kept in as soon as it finishes


def run_points(tasks: tuple[PointTask, ...]) -> list[dict[str, Any]]:
    """A chunk of points, in order, in one worker (a chunk shares its model graph, fusion and device: the worker
    builds them once for all its points); each point's outcome is kept in its progress file as it finishes, so an
    interrupted sweep loses at most the points that were running."""
    from atbprof.sweep.progress import record_outcome

    outcomes = []
    for task in tasks:
        outcome = run_point(task)
        if task.record_to is not None:
            record_outcome(Path(task.record_to), outcome)
        outcomes.append(outcome)
    return outcomes


def run_point(task: PointTask) -> dict[str, Any]:
    from atbprof.config.loader import load_config
    from atbprof.run import run_simulation, summarize
    from atbprof.sim.memory import what_fits

    out: dict[str, Any] = {"point": task.index, "summary": None, "memory": None, "error": None, "internal": False}
    try:
        cfg = load_config(Path(task.base), list(task.overrides))
        if task.run_dir is not None:
            cfg = cfg.model_copy(update={"name": f"{cfg.name}-point-{task.index}"})
            summary = run_simulation(cfg, Path(task.run_dir), force=True).summary
        elif cfg.workload.kind == "serving":
            from atbprof.serving.run import simulate_serving

            summary = simulate_serving(cfg)[2]
        else:
            summary = summarize(cfg)
        dumped = summary.model_dump(mode="json")
        out["summary"] = dumped if cfg.workload.kind == "batch" else {"serving": dumped}
        out["memory"] = out["summary"].get("memory")
    except DoesNotFitError as err:
        m = err.estimate.model_dump(mode="json")  # type: ignore[attr-defined]
        out["memory"] = m
        fits = what_fits(m["max_batch_that_fits"], m["max_context_that_fits"], cfg.workload.batch_size)
        out["error"] = f"does not fit: needs {m['total_gb']:.1f} GB, the device has {m['capacity_gb']:g} GB; {fits}" + (
            f"; fits with parallel.tp {m['smallest_tp_that_fits']}" if m.get("smallest_tp_that_fits") else ""
        )
    except AtbprofError as err:
        out["error"] = str(err).removeprefix("invalid config: ")
    except Exception as err:  # an atbprof bug: recorded, the sweep goes on, and exits 70 at the end
        out["error"] = f"internal error: {type(err).__name__}: {err}"
        out["internal"] = True
        out["traceback"] = traceback.format_exc(limit=20)
    return out
