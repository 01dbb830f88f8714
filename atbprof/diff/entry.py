"""`atbprof.diff(...)`: the diff command as one function of two paths (profiles, runs, clusters) or Profiles."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from atbprof.diff.cluster_report import ClusterDiff
    from atbprof.diff.report import DiffReport
    from atbprof.importers.base import Profile

PathLike = str | os.PathLike[str]


def diff_any(
    base: PathLike | Profile,
    new: PathLike | Profile,
    *,
    by: str | None = None,
    top: int = 20,
    threshold_pct: float = 1.0,
    force: bool = False,
) -> DiffReport | ClusterDiff:
    """`atbprof diff`: `new` compared with `base`, op by op with statistics (two clusters: rank by rank). Unlike
    inputs (inference against training, two different models) raise InputError unless `force`. `by` None: by op
    type, or by category when the inputs ran on different vendors' devices."""
    from atbprof.diff.api import diff as diff_profiles
    from atbprof.diff.api import diff_paths
    from atbprof.importers.base import Profile

    options: dict[str, object] = {"by": by, "top": top, "threshold_pct": threshold_pct}
    if isinstance(base, Profile) or isinstance(new, Profile):
        from atbprof.importers import load_profile

        a = base if isinstance(base, Profile) else load_profile(Path(base), framework=False)
        b = new if isinstance(new, Profile) else load_profile(Path(new), framework=False)
        return diff_profiles(a, b, force=force, **options).report  # type: ignore[arg-type]
    from atbprof.importers.cluster import is_cluster

    if is_cluster(Path(base)) or is_cluster(Path(new)):
        from atbprof.diff.clusters import diff_cluster_paths

        return diff_cluster_paths(Path(base), Path(new), threshold_pct)
    return diff_paths(Path(base), Path(new), force=force, **options).report  # type: ignore[arg-type]
