"""`atbprof predict` and `atbprof calibrate`: the device model against a real profile's kernels."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import orjson
import typer

from atbprof.commands.common import AnalyzeFormat, OutputFormat, console, emit, guard, progress, status


def predict(
    path: Annotated[
        Path, typer.Argument(help="A real profile with shapes: kernel_details.csv, op_summary, *_ascend_pt.")
    ],
    device: Annotated[
        str | None, typer.Option("--device", help="A device preset (910B3, ...) or a spec YAML; else inferred.")
    ] = None,
    format_: Annotated[
        AnalyzeFormat, typer.Option("--format", help="rich, json or md: the same report.")
    ] = AnalyzeFormat.rich,
    top: Annotated[int, typer.Option(min=1, help="Op types to show (json shows all).")] = 20,
    kernels: Annotated[
        Path | None,
        typer.Option(
            "--kernels",
            help="Also write every kernel (pass, family, measured, predicted, provenance, parameters): "
            "Parquet for a .parquet name, else CSV.",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite a --kernels file atbprof wrote.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks on errors.")] = False,
) -> None:
    """Price every kernel of a real profile with the device model: measured vs predicted, per pass, kernel family
    and op type, with where each rate came from."""
    from atbprof.importers.detect import load_profile
    from atbprof.outputs import check_output_file
    from atbprof.predict.api import predict_kernels
    from atbprof.render.predict import predict_json, predict_markdown, render_predict
    from atbprof.writers.kernels import write_kernels

    def body() -> None:
        if kernels is not None:  # a path that can not be written stops before the work
            check_output_file(kernels, "kernels", force=force, inputs=(path,), option="--kernels")
        with status(f"reading and pricing {path}", format_ is AnalyzeFormat.rich):
            report, table = predict_kernels(load_profile(path, framework=False), device=device)
            if kernels is not None:
                write_kernels(table, kernels, force=force, inputs=(path,))
        emit(
            format_,
            lambda: predict_json(report),
            lambda: predict_markdown(report, top),
            lambda r, console: render_predict(r, console, top),
            report,
        )

    guard(body, verbose)


def calibrate(
    path: Annotated[Path, typer.Argument(help="A real profile with shapes (as for predict).")],
    out: Annotated[Path, typer.Option("--out", help="The device spec YAML to write.")],
    device: Annotated[
        str | None, typer.Option("--device", help="The preset (or spec YAML) to start from; else inferred.")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite a spec atbprof wrote before.")] = False,
    cross_validate: Annotated[
        bool,
        typer.Option(
            "--cross-validate/--no-cross-validate",
            help="Also fit with kernels held out (5-fold, leave-one-op-type-out): the error to expect on kernels "
            "the fit has not seen (~20 fits; off: in-sample error only).",
        ),
    ] = True,
    format_: Annotated[OutputFormat, typer.Option("--format", help="rich or json.")] = OutputFormat.rich,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks on errors.")] = False,
) -> None:
    """Fit a device spec's efficiencies and static costs to a real profile's kernels; write it as a YAML."""
    from atbprof.importers.detect import load_profile
    from atbprof.predict.calibrate import calibrate_profile, write_spec
    from atbprof.render.calibrate import calibration_json, render_calibration

    def body() -> None:
        with progress(f"fitting {path}", format_ is OutputFormat.rich, "fits") as on_fit:
            profile = load_profile(path, framework=False)
            result = calibrate_profile(profile, device=device, cross_validate=cross_validate, on_fit=on_fit)
            written = write_spec(result, out, force=force, inputs=(path,))
        if format_ is OutputFormat.json:
            sys.stdout.write(
                orjson.dumps(calibration_json(result, written), option=orjson.OPT_INDENT_2).decode() + "\n"
            )
        else:
            render_calibration(result, written, console())

    guard(body, verbose)
