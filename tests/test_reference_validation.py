"""Validation against the measured cases in shared/reference, with the tolerances issue 2 names."""

from __future__ import annotations

import filecmp

import pytest

from dse.validation.fit import default_assumptions_path
from dse.validation.validate import load_assumptions, summarize, validate_file
from tests.conftest import SHARED, VENDORED

TARGETS = {
    "megatron_narayanan2021_table1.csv": 5.0,
    "megatron_korthikanti2022_table4.csv": 8.0,
    "nemo_h100_24.07.csv": 10.0,
}


@pytest.fixture(scope="module")
def assumptions():
    return load_assumptions(default_assumptions_path())


@pytest.mark.parametrize("name,limit", sorted(TARGETS.items()))
def test_mape_within_target(ref, assumptions, name, limit):
    results = validate_file(ref / name, assumptions)
    (summary,) = summarize(results)
    print(f"\n{name}: n={summary['n']} MAPE={summary['mape_pct']:.2f}% max|err|={summary['max_abs_error_pct']:.2f}% "
          f"skipped={summary['skipped']}")
    for r in results:
        print(f"  {r.case:48s} measured {r.measured:10.4g} predicted {r.predicted:10.4g} ({r.error_pct:+6.2f}%)")
    assert summary["skipped"] == 0, "every training case of this file is supported"
    assert summary["mape_pct"] <= limit


def test_korthikanti_variant_ordering(ref, assumptions):
    """Table 4 orders the five variants none+sp < none < selective+sp < selective < full."""
    results = {r.case.rsplit("layer-", 1)[1]: r.predicted
               for r in validate_file(ref / "megatron_korthikanti2022_table4.csv", assumptions)}
    order = ["none-sp", "none", "selective-sp", "selective", "full"]
    assert [results[k] for k in order] == sorted(results[k] for k in order)


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/reference not present beside this checkout")
def test_reference_copy_matches_shared():
    names = sorted(p.name for p in SHARED.iterdir() if p.suffix in (".csv", ".md"))
    match, mismatch, errors = filecmp.cmpfiles(SHARED, VENDORED, names, shallow=False)
    assert not mismatch and not errors, f"tests/reference differs from ../shared/reference: {mismatch + errors}"
