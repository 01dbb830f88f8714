"""`atbprof analyze`: find unfused LayerNorm/RMSNorm, attribute latency, estimate what fusion would save.

One analyzer per module - detect.py (findings table), attribute.py (breakdown), whatif.py (estimate) - and the
result model in report.py; patterns are data (patterns.yaml). `analyze(profile)` runs them in order.
"""

from atbprof.analyze.api import analyze
from atbprof.analyze.patterns import PatternSet, load_patterns
from atbprof.analyze.report import FINDINGS_SCHEMA, AnalysisReport

__all__ = ["FINDINGS_SCHEMA", "AnalysisReport", "PatternSet", "analyze", "load_patterns"]

from atbprof._callable import make_callable
from atbprof.analyze.entry import analyze_any

make_callable(__name__, analyze_any)
