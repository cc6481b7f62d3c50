"""The shipped FITTED efficiency constants are the least-squares optimum on shared/reference."""

from __future__ import annotations

import numpy as np
import pytest

from dse.validation.fit import (
    COMMODITY_FILES,
    COMMODITY_PARAMETERS,
    INFERENCE_FILES,
    INFERENCE_PARAMETERS,
    SERVING_FILES,
    SERVING_PARAMETERS,
    TRAINING_FILES,
    TRAINING_PARAMETERS,
    default_assumptions_path,
    log_error_objective,
    nelder_mead,
    shipped_value,
)
from dse.validation.validate import load_assumptions

GROUPS = {"training": (TRAINING_FILES, TRAINING_PARAMETERS), "inference": (INFERENCE_FILES, INFERENCE_PARAMETERS),
          "serving": (SERVING_FILES, SERVING_PARAMETERS), "commodity": (COMMODITY_FILES, COMMODITY_PARAMETERS)}


@pytest.mark.parametrize("group", list(GROUPS))
def test_shipped_constants_are_the_fit_optimum(ref, group):
    """Moving any fitted constant by ±2 % does not lower the objective: the values in efficiency.csv are the
    ones `python -m dse.validation.fit` finds (rounded), not hand-tuned."""
    files, params = GROUPS[group]
    objective = log_error_objective([ref / f for f in files], load_assumptions(default_assumptions_path()), params)
    x0 = np.array([shipped_value(g, c) for g, c in params])
    f0 = objective(x0)
    for i, (gen, col) in enumerate(params):
        for factor in (0.98, 1.02):
            x = x0.copy()
            x[i] *= factor
            assert objective(x) >= f0 * (1 - 1e-3), f"{gen}.{col} x{factor} fits better than the shipped value"


def test_nelder_mead_finds_a_known_minimum():
    target = np.array([0.3, 0.7, 0.45])
    best = nelder_mead(lambda x: float(np.sum((np.log(x) - np.log(target)) ** 2)), np.array([0.5, 0.5, 0.5]),
                       tol=1e-14, max_iter=2000)
    np.testing.assert_allclose(best, target, rtol=1e-4)


def test_moe_host_constant_is_the_fit_optimum():
    """MOE_HOST_S_PER_LOCAL_EXPERT is the least-squares optimum on the Megatron-Bridge MoE runs kept in
    tests/cases (their sources in the file): moving it by ±2 % does not lower the objective."""
    from dse.validation.fit import MOE_FILES, MOE_PARAMETERS
    from tests.conftest import REPO

    files = [REPO / "tests" / "cases" / f for f in MOE_FILES]
    objective = log_error_objective(files, load_assumptions(default_assumptions_path()), MOE_PARAMETERS)
    x0 = np.array([shipped_value(g, c) for g, c in MOE_PARAMETERS])
    f0 = objective(x0)
    for factor in (0.98, 1.02):
        assert objective(x0 * factor) >= f0 * (1 - 1e-3)
