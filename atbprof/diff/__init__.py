"""`atbprof diff`: two runs or profiles compared op by op (api.py), with statistics (stats.py); two clusters rank by
rank (clusters.py). Results: report.py, cluster_report.py."""

from atbprof._callable import make_callable
from atbprof.diff.entry import diff_any

make_callable(__name__, diff_any)
