"""'did you mean ...?' for a misspelt key, preset, strategy or rule."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """' (did you mean X?)', or '' when nothing is close."""
    options = list(choices)
    text = str(word)
    folded = {c.lower(): c for c in options}
    match = folded.get(text.lower())
    if match is None:
        close = difflib.get_close_matches(text, options, n=1, cutoff=0.8)
        close = close or difflib.get_close_matches(text.lower(), list(folded), n=1, cutoff=0.8)
        match = folded.get(close[0], close[0]) if close else None
    return f" (did you mean {match!r}?)" if match else ""
