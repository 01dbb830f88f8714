"""`atbprof.predict(...)`: the predict command as one function of a path or a Profile."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from atbprof.importers.base import Profile
    from atbprof.predict.report import PredictReport

PathLike = str | os.PathLike[str]


def predict_any(path_or_profile: PathLike | Profile, *, device: str | None = None) -> PredictReport:
    """`atbprof predict`: every kernel of a real profile priced by the device model, against what it measured.
    `device`: a preset (910B3, ...) or a spec YAML; else inferred from the profile (as `analyze` infers it)."""
    from atbprof.importers.base import Profile
    from atbprof.predict.api import predict_profile

    if isinstance(path_or_profile, Profile):
        profile = path_or_profile
    else:
        from atbprof.importers import load_profile

        profile = load_profile(Path(path_or_profile), framework=False)
    return predict_profile(profile, device=device)
