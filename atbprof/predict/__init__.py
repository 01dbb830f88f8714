"""`atbprof predict`: price every kernel of a real profile with the device model and compare with what it measured.

profile (any importer) -> device choice (device.py) -> price.py (one model node per distinct kernel) -> report.py.
"""

from atbprof.predict.api import check_priceable, predict_profile
from atbprof.predict.report import PREDICT_SCHEMA_VERSION, PredictReport

__all__ = ["PREDICT_SCHEMA_VERSION", "PredictReport", "check_priceable", "predict_profile"]

from atbprof._callable import make_callable
from atbprof.predict.entry import predict_any

make_callable(__name__, predict_any)
