"""atbprof: see what operator fusion buys LLaMA inference on Ascend NPUs."""

__version__ = "0.1.0"
