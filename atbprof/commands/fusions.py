"""`atbprof fusions`: the inference fusion catalogue."""

from __future__ import annotations

from typing import Annotated

import typer

from atbprof.commands.common import AnalyzeFormat, emit, guard


def fusions(
    format_: Annotated[
        AnalyzeFormat, typer.Option("--format", help="rich, json or md: the same catalogue.")
    ] = AnalyzeFormat.rich,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks on errors.")] = False,
) -> None:
    """List the inference fusions atbprof knows: fused kernel Types, torch_npu API, what each replaces, the
    simulator's rule and how analyze finds it."""
    from atbprof.fusion.catalogue import fusion_catalogue
    from atbprof.render.fusions import catalogue_markdown, render_catalogue

    def body() -> None:
        catalogue = fusion_catalogue()
        emit(format_, catalogue.to_dict, lambda: catalogue_markdown(catalogue), render_catalogue, catalogue)

    guard(body, verbose)
