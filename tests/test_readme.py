"""The README's examples are real: the spec example resolves, the documented defaults match the code."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from dse.defaults import DEFAULTS_DOC
from dse.spec import resolve_spec

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def test_spec_example_resolves():
    section = README[README.index("### Spec format"):]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    spec = resolve_spec(yaml.safe_load(block), "README.md")
    assert spec.size > 0 and len(spec.grids) == 2 and len(spec.filters) == 2


def test_every_default_is_documented():
    table = README[README.index("## Inputs, defaults"):README.index("## The cost model")]
    for key in DEFAULTS_DOC:
        name = key.split(" ")[0].rstrip(",")
        assert f"`{name}`" in table, name
