"""`atbprof.analyze(...)`: the analyze command as one function of a path (a profile, a run, a cluster) or a Profile."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from atbprof.analyze.cluster_report import ClusterReport
    from atbprof.analyze.report import AnalysisReport
    from atbprof.importers.base import Profile

PathLike = str | os.PathLike[str]


def analyze_any(
    path_or_profile: PathLike | Profile,
    *,
    top: int = 10,
    patterns: PathLike | None = None,
    cann_version: str | None = None,
) -> AnalysisReport | ClusterReport:
    """`atbprof analyze`: unfused norms found, latency attributed, the saving of fusing them estimated. A cluster
    directory (rank profiles) gives its `ClusterReport`; anything else its `AnalysisReport`. `cann_version`: name
    the fused kernels as that CANN release does (default: the one the profile records)."""
    from atbprof.analyze.api import analyze as analyze_profile
    from atbprof.importers.base import Profile

    pattern_file = str(patterns) if patterns is not None else None
    if isinstance(path_or_profile, Profile):
        return analyze_profile(path_or_profile, patterns_file=pattern_file, top=top, cann_version=cann_version)
    path = Path(path_or_profile)
    from atbprof.importers.cluster import is_cluster

    if is_cluster(path):
        from atbprof.analyze.cluster_job import analyze_cluster_path

        return analyze_cluster_path(path, top=top, patterns_file=pattern_file, cann_version=cann_version)
    from atbprof.analyze.columns import ANALYZE_COLUMNS
    from atbprof.importers import load_profile

    return analyze_profile(
        load_profile(path, columns=ANALYZE_COLUMNS), patterns_file=pattern_file, top=top, cann_version=cann_version
    )
