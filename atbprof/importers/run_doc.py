"""A run directory's run.json, read once and checked for every reader (analyze, diff, plot, report, export,
cluster): a JSON object `atbprof run` wrote, whose summary has the types and ranges of `RunSummary`, so no reader
meets a string where a number belongs or a device count no run could have."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from atbprof.errors import InputError

RUN_JSON_MAX_BYTES = 256 << 20  # a run.json is a few KB (a numerics report adds some): anything near this is not one


def read_run_doc(path: Path) -> dict[str, Any]:
    """The run.json at `path` (a file), checked; InputError naming the file and the key when it is not one."""
    import orjson
    from pydantic import ValidationError

    from atbprof.inputs import read_bytes
    from atbprof.sim.summary import RunSummary

    try:
        doc = orjson.loads(read_bytes(path, RUN_JSON_MAX_BYTES))
    except orjson.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON ({err}); re-create the run with `atbprof run`") from None
    if not isinstance(doc, dict):
        raise InputError(f"{path}: not a run summary (a JSON object); re-create the run with `atbprof run`")
    from atbprof.device.spec import DeviceSpec

    for key, model, strict in (("summary", RunSummary, True), ("device", DeviceSpec, None)):
        part = doc.get(key)
        if part is None:
            continue
        if not isinstance(part, dict):
            raise InputError(f"{path}: {key} is not an object; re-create the run with `atbprof run`")
        try:
            model.model_validate(part, strict=strict)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise InputError(
                f"{path}: {key}.{where} = {_shown(first.get('input'))}: {first['msg']}; the file was changed or "
                "damaged: re-create the run with `atbprof run`"
            ) from None
    return doc


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
