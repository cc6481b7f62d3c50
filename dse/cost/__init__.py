"""The cost model: pure numpy kernels, one module per physical concern."""

from dse.cost.training import MEMORY_BREAKDOWN, TIME_BREAKDOWN, TRAIN_INPUTS, TRAIN_METRICS, train_step

__all__ = ["MEMORY_BREAKDOWN", "TIME_BREAKDOWN", "TRAIN_INPUTS", "TRAIN_METRICS", "train_step"]
