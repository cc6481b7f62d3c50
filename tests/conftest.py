"""Shared fixtures: where the measured reference cases live."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VENDORED = REPO / "tests" / "reference"
SHARED = REPO.parent / "shared" / "reference"


def reference_dir() -> Path:
    """``../shared/reference`` when this checkout sits beside it, else the vendored copy in tests/reference
    (a verbatim copy; ``test_reference_copy_matches_shared`` fails if the two drift apart)."""
    return SHARED if (SHARED / "README.md").exists() else VENDORED


@pytest.fixture(scope="session")
def ref() -> Path:
    return reference_dir()
