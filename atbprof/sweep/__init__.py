"""`atbprof sweep`: a design space simulated point by point (spec -> points -> table, gains, plots)."""

from atbprof._callable import make_callable
from atbprof.sweep.entry import sweep_spec

make_callable(__name__, sweep_spec)
