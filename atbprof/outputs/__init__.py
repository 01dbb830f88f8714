"""Writing outputs without ever losing what the user had.

- `check_output_dir` / `check_output_file`: before any work, refuse an output path that is `.`/`..`, contains the
  current directory, overlaps an input, or holds something atbprof did not write (even with --force).
- `staged_dir` / `staged_file`: write to a temp path beside the output, then rename-aside, rename-in, delete.
- Temp and set-aside paths carry their owner's pid; the next write to the same parent removes those whose owner is
  gone (and puts back a set-aside output whose replacement never arrived).
"""

from atbprof.outputs.ownership import MARKER, OutputKind, read_marker
from atbprof.outputs.paths import check_output_dir, check_output_file
from atbprof.outputs.staging import clean_stale, staged_dir, staged_file

__all__ = [
    "MARKER",
    "OutputKind",
    "check_output_dir",
    "check_output_file",
    "clean_stale",
    "read_marker",
    "staged_dir",
    "staged_file",
]
