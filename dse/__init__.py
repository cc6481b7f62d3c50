"""dse: a vectorized analytical performance model of distributed LLM training."""

from dse.frame import InputError, evaluate

__version__ = "0.1.0"

__all__ = ["InputError", "__version__", "evaluate"]
