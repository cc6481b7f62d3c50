"""Technology scaling tables: logic nodes, memory technologies, network technologies.

Three CSV files in the repository's top-level ``technology_nodes/`` folder hold one row per technology the study
sweeps, each row with its sources (``technology_nodes/README.md`` resolves the tags and lists every DERIVED value and
every ASSUMPTION):

* ``logic.csv``: one row per process node (``n12`` … ``a10``): logic density (MTr/mm²), per-node speed and power
  gains against the node named in ``compared_against``, and the cumulative ``relative_speed_iso_power`` and
  ``relative_perf_per_watt`` (the 12 nm row = 1) derived from them.
* ``memory.csv``: one row per DRAM generation (``hbm2`` … ``hbm4e``, ``gddr6`` … ``gddr7``, ``lpddr5x``): per-stack
  (per-device for GDDR) bandwidth and capacity, energy per bit, stacks per package.
* ``network.csv``: one row per interconnect (``nvlink3`` … ``nvlink6``, ``pcie4`` … ``pcie7``, ``ib-hdr`` …,
  ``eth-400g`` …): per-GPU (per-port, per-x16-link) bandwidth, domain size, latency.

The folder is resolved as ``<repo>/technology_nodes`` (two levels above this package); the environment variable
``DSE_TECHNOLOGY_DIR`` overrides it (tests, or an installed package).  Loading validates every file and raises
:class:`TechnologyError` naming the file, the 1-based line, the column, the bad value and what is allowed.
Tables are cached per directory; :func:`clear_cache` drops the cache.

Units are in the column names (``GBps`` = 10⁹ bytes/s, ``gbps`` = 10⁹ bits/s, ``um2`` = µm², ``us`` = µs).
"""

from __future__ import annotations

import csv
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

#: Environment variable that points the loader at another ``technology_nodes`` folder.
ENV_DIR = "DSE_TECHNOLOGY_DIR"

TableKind = Literal["logic", "memory", "network"]

#: Accepted spellings of the three table kinds in :func:`lookup`.
KIND_ALIASES: Mapping[str, TableKind] = {
    "logic": "logic", "node": "logic", "nodes": "logic",
    "memory": "memory", "mem": "memory",
    "network": "network", "net": "network",
}

_ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")
_YEAR_RANGE = (1990, 2100)
#: Relative tolerance of the DERIVED columns that are exact arithmetic (rounded to ~4 significant digits).
_DERIVED_RTOL = 0.005
#: Relative tolerance of logic density against ``density[compared_against] × density_gain_vs_prev``: wider
#: because some absolute densities are published directly (WikiChip N5 171.3 ≠ 91.2 × 1.84 by 2 %).
_DENSITY_RTOL = 0.03


class TechnologyError(ValueError):
    """A technology table is missing or malformed (the message names file, row, column, value, what is allowed)."""


@dataclass(frozen=True)
class _Schema:
    """Columns and constraints of one table."""

    filename: str
    id_column: str
    text_required: tuple[str, ...]
    positive_required: tuple[str, ...]
    positive_optional: tuple[str, ...]
    fraction_optional: tuple[str, ...] = ()
    text_optional: tuple[str, ...] = ()
    choices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def columns(self) -> tuple[str, ...]:
        return (
            (self.id_column, "year") + self.text_required + self.positive_required + self.positive_optional
            + self.fraction_optional + self.text_optional
        )

    @property
    def numeric(self) -> tuple[str, ...]:
        return ("year",) + self.positive_required + self.positive_optional + self.fraction_optional


_SCHEMAS: Mapping[TableKind, _Schema] = {
    "logic": _Schema(
        filename="logic.csv",
        id_column="node",
        text_required=("name", "source"),
        positive_required=("logic_density_mtr_per_mm2", "relative_speed_iso_power", "relative_perf_per_watt"),
        positive_optional=("density_gain_vs_prev", "sram_bitcell_um2", "supply_voltage_v",
                           "gpu_die_density_mtr_per_mm2"),
        fraction_optional=("speed_gain_iso_power_vs_prev", "power_reduction_iso_speed_vs_prev"),
        text_optional=("compared_against", "notes", "assumption"),
    ),
    "memory": _Schema(
        filename="memory.csv",
        id_column="id",
        text_required=("name", "kind", "standard", "source"),
        positive_required=("pin_speed_gbps", "interface_width_bits", "bandwidth_per_stack_GBps"),
        positive_optional=("capacity_per_stack_GB", "stack_height", "energy_pj_per_bit", "max_stacks_per_package",
                           "reference_bw_per_stack_GBps", "reference_capacity_per_stack_GB"),
        text_optional=("reference_gpu", "notes", "assumption"),
        choices={"kind": ("hbm", "gddr", "lpddr")},
    ),
    "network": _Schema(
        filename="network.csv",
        id_column="id",
        text_required=("name", "kind", "source"),
        positive_required=("bw_unidir_GBps", "bw_bidir_GBps", "line_rate_gbps", "latency_us"),
        positive_optional=("per_lane_rate_gbps", "domain_gpus", "max_domain_gpus", "ports_per_gpu"),
        text_optional=("notes", "assumption"),
        choices={"kind": ("scaleup", "scaleout", "pcie")},
    ),
}

#: Memory columns that accelerator memories (HBM, GDDR) must fill; LPDDR rows (CPU-side reference) may leave them empty.
_ACCELERATOR_MEMORY_REQUIRED = ("capacity_per_stack_GB", "energy_pj_per_bit", "max_stacks_per_package")


def technology_dir() -> Path:
    """The folder holding the three tables: ``$DSE_TECHNOLOGY_DIR`` if set, else ``<repo>/technology_nodes``."""
    override = os.environ.get(ENV_DIR, "").strip()
    if override:
        return Path(override).expanduser().resolve()
    return Path(__file__).resolve().parents[2] / "technology_nodes"


@dataclass
class _Row:
    line: int
    cells: dict[str, str]


class _Table:
    """Raw rows of one file with their line numbers, and an error constructor that names them."""

    def __init__(self, path: Path, schema: _Schema) -> None:
        self.path = path
        self.schema = schema
        self.rows: list[_Row] = []
        if not path.is_file():
            raise TechnologyError(
                f"{path}: technology table not found (looked in {path.parent}; set {ENV_DIR} to the folder holding "
                f"logic.csv, memory.csv and network.csv)"
            )
        with path.open("r", encoding="utf-8", newline="") as fh:
            reader = csv.reader(fh)
            try:
                header = next(reader)
            except StopIteration:
                raise TechnologyError(f"{path}: file is empty; expected a header with columns "
                                      f"{', '.join(schema.columns)}") from None
            header = [h.strip() for h in header]
            missing = [c for c in schema.columns if c not in header]
            if missing:
                raise TechnologyError(f"{path}: row 1 (header): missing column(s) {', '.join(map(repr, missing))}; "
                                      f"required columns: {', '.join(schema.columns)}")
            dupes = sorted({h for h in header if header.count(h) > 1})
            if dupes:
                raise TechnologyError(f"{path}: row 1 (header): duplicate column(s) {', '.join(map(repr, dupes))}")
            last = reader.line_num
            for record in reader:
                start, last = last + 1, reader.line_num
                if not record or all(not cell.strip() for cell in record):
                    continue
                if len(record) != len(header):
                    raise TechnologyError(f"{path}: row {start}: {len(record)} fields, the header has {len(header)} "
                                          f"(check quoting of commas in text cells)")
                self.rows.append(_Row(start, {h: cell.strip() for h, cell in zip(header, record, strict=True)}))
        if not self.rows:
            raise TechnologyError(f"{path}: no data rows")

    def error(self, row: _Row, column: str, allowed: str) -> TechnologyError:
        ident = row.cells.get(self.schema.id_column, "")
        where = f" ({self.schema.id_column} {ident!r})" if ident and column != self.schema.id_column else ""
        return TechnologyError(f"{self.path.name}: row {row.line}{where}, column {column!r}: value "
                               f"{row.cells.get(column, '')!r} is not allowed; {allowed} (file {self.path})")


def _number(table: _Table, row: _Row, column: str, *, required: bool,
            check: Callable[[float], bool], allowed: str) -> float:
    cell = row.cells[column]
    if cell == "":
        if required:
            raise table.error(row, column, f"a value is required: {allowed}")
        return math.nan
    try:
        value = float(cell)
    except ValueError:
        raise table.error(row, column, f"expected a number: {allowed}") from None
    if not math.isfinite(value) or not check(value):
        raise table.error(row, column, allowed)
    return value


def _is_year(value: float) -> bool:
    return _YEAR_RANGE[0] <= value <= _YEAR_RANGE[1] and value == int(value)


def _is_positive(value: float) -> bool:
    return value > 0


def _is_fraction(value: float) -> bool:
    return 0 < value < 1


def _validate_common(table: _Table) -> pd.DataFrame:
    """Checks shared by all tables; returns the typed frame (numbers float64, year int64, text str)."""
    schema = table.schema
    seen: dict[str, int] = {}
    records: list[dict[str, object]] = []
    for row in table.rows:
        ident = row.cells[schema.id_column]
        if not _ID_PATTERN.match(ident):
            raise table.error(row, schema.id_column, "ids are non-empty, lower-case, and use only a-z, 0-9, '.' "
                                                     "and '-'")
        if ident in seen:
            raise table.error(row, schema.id_column, f"ids must be unique; {ident!r} is already used on row "
                                                     f"{seen[ident]}")
        seen[ident] = row.line
        for col in schema.text_required:
            if row.cells[col] == "":
                what = "every row needs a source (tags resolved in technology_nodes/README.md)" if col == "source" \
                    else "a non-empty text is required"
                raise table.error(row, col, what)
        for col, options in schema.choices.items():
            if row.cells[col] not in options:
                raise table.error(row, col, f"one of {', '.join(options)}")
        record: dict[str, object] = {c: row.cells[c] for c in row.cells}
        record["year"] = int(_number(table, row, "year", required=True, check=_is_year,
                                     allowed=f"a whole year between {_YEAR_RANGE[0]} and {_YEAR_RANGE[1]}"))
        for col in schema.positive_required:
            record[col] = _number(table, row, col, required=True, check=_is_positive, allowed="a positive number")
        for col in schema.positive_optional:
            record[col] = _number(table, row, col, required=False, check=_is_positive,
                                  allowed="empty or a positive number")
        for col in schema.fraction_optional:
            record[col] = _number(table, row, col, required=False, check=_is_fraction,
                                  allowed="empty or a fraction strictly between 0 and 1 (e.g. 0.15 for 15 %)")
        records.append(record)
    frame = pd.DataFrame.from_records(records)
    for col in schema.numeric:
        frame[col] = frame[col].astype(np.int64 if col == "year" else np.float64)
    frame.insert(0, "line", np.array([r.line for r in table.rows], dtype=np.int64))
    return frame.set_index(schema.id_column, drop=False)


def _cell(frame: pd.DataFrame, ident: str, column: str) -> float:
    """One numeric cell (the frame's numeric columns are float64, so the cast is exact)."""
    values = frame[column].to_numpy(dtype=np.float64)
    return float(values[list(frame.index).index(ident)])


def _close(value: float, expected: float, rtol: float) -> bool:
    return abs(value - expected) <= rtol * abs(expected)


def _validate_logic(table: _Table, frame: pd.DataFrame) -> None:
    """``compared_against`` names an earlier node; gains are present for compared rows; cumulative columns agree."""
    earlier: dict[str, _Row] = {}
    for row in table.rows:
        node = row.cells["node"]
        ref = row.cells["compared_against"]
        if ref == "":
            for col in ("relative_speed_iso_power", "relative_perf_per_watt"):
                if not _close(_cell(frame, node, col), 1.0, 1e-9):
                    raise table.error(row, col, "1 on a baseline row (empty compared_against)")
        else:
            if ref not in earlier:
                known = ", ".join(earlier) or "none"
                raise table.error(row, "compared_against", f"the id of an earlier row (earlier rows: {known})")
            for col in ("density_gain_vs_prev", "speed_gain_iso_power_vs_prev", "power_reduction_iso_speed_vs_prev"):
                if row.cells[col] == "":
                    raise table.error(row, col, f"a value is required when compared_against is set ({ref!r})")
            speed = _cell(frame, ref, "relative_speed_iso_power") * (
                1.0 + _cell(frame, node, "speed_gain_iso_power_vs_prev"))
            ppw = _cell(frame, ref, "relative_perf_per_watt") / (
                1.0 - _cell(frame, node, "power_reduction_iso_speed_vs_prev"))
            density = _cell(frame, ref, "logic_density_mtr_per_mm2") * _cell(frame, node, "density_gain_vs_prev")
            checks = (
                ("relative_speed_iso_power", speed, _DERIVED_RTOL,
                 f"relative_speed_iso_power of {ref!r} × (1 + speed_gain_iso_power_vs_prev)"),
                ("relative_perf_per_watt", ppw, _DERIVED_RTOL,
                 f"relative_perf_per_watt of {ref!r} / (1 − power_reduction_iso_speed_vs_prev)"),
                ("logic_density_mtr_per_mm2", density, _DENSITY_RTOL,
                 f"logic_density_mtr_per_mm2 of {ref!r} × density_gain_vs_prev"),
            )
            for col, expected, rtol, formula in checks:
                if not _close(_cell(frame, node, col), expected, rtol):
                    raise table.error(row, col, f"DERIVED value must equal {expected:.4g} = {formula} "
                                                f"(within {rtol:.1%})")
        earlier[node] = row


def _validate_memory(table: _Table, frame: pd.DataFrame) -> None:
    for row in table.rows:
        if row.cells["kind"] == "lpddr":
            continue
        for col in _ACCELERATOR_MEMORY_REQUIRED:
            if row.cells[col] == "":
                raise table.error(row, col, f"a positive number is required for kind {row.cells['kind']!r} "
                                            f"(only lpddr rows may leave it empty)")


def _validate_network(table: _Table, frame: pd.DataFrame) -> None:
    for row in table.rows:
        ident = row.cells["id"]
        unidir = _cell(frame, ident, "bw_unidir_GBps")
        for col, factor, formula in (("bw_bidir_GBps", 2.0, "2 × bw_unidir_GBps"),
                                     ("line_rate_gbps", 8.0, "8 × bw_unidir_GBps (bits per direction)")):
            if not _close(_cell(frame, ident, col), factor * unidir, _DERIVED_RTOL):
                raise table.error(row, col, f"must equal {factor * unidir:.4g} = {formula}")
        kind = row.cells["kind"]
        if kind == "scaleup":
            for col in ("domain_gpus", "max_domain_gpus"):
                if row.cells[col] == "":
                    raise table.error(row, col, "a positive number of GPUs is required for kind 'scaleup'")
            largest = _cell(frame, ident, "max_domain_gpus")
            if _cell(frame, ident, "domain_gpus") > largest:
                raise table.error(row, "domain_gpus", f"at most max_domain_gpus ({largest:g})")
        if kind == "scaleout" and row.cells["ports_per_gpu"] == "":
            raise table.error(row, "ports_per_gpu", "a positive number is required for kind 'scaleout'")


_EXTRA_CHECKS: Mapping[TableKind, Callable[[_Table, pd.DataFrame], None]] = {
    "logic": _validate_logic,
    "memory": _validate_memory,
    "network": _validate_network,
}


@lru_cache(maxsize=16)
def _load(kind: TableKind, directory: str) -> pd.DataFrame:
    schema = _SCHEMAS[kind]
    table = _Table(Path(directory) / schema.filename, schema)
    frame = _validate_common(table)
    _EXTRA_CHECKS[kind](table, frame)
    return frame


def _table(kind: TableKind) -> pd.DataFrame:
    return _load(kind, str(technology_dir())).copy()


def logic_nodes() -> pd.DataFrame:
    """Logic process nodes (``logic.csv``), indexed by node id (``n12``, ``n7``, …, ``a10``), in sweep order.

    ``relative_perf_per_watt`` = Π 1 / (1 − power_reduction_iso_speed_vs_prev) along the ``compared_against`` chain
    (energy per operation at iso speed, 12 nm = 1); ``relative_speed_iso_power`` = Π (1 + speed_gain_iso_power_vs_prev).
    The column ``line`` is the row's line in the file.
    """
    return _table("logic")


def memory_techs() -> pd.DataFrame:
    """Memory technologies (``memory.csv``), indexed by id (``hbm2`` … ``hbm4e``, ``gddr6`` … ``gddr7``, ``lpddr5x``).

    Bandwidth and capacity are per HBM stack, per GDDR device (x32), per LPDDR5X x16 channel.
    """
    return _table("memory")


def network_techs() -> pd.DataFrame:
    """Network technologies (``network.csv``), indexed by id (``nvlink3``, ``pcie5``, ``ib-ndr``, ``eth-800g``, …).

    ``bw_unidir_GBps`` is per GPU for ``scaleup`` rows, per port for ``scaleout`` rows (× ``ports_per_gpu``), per x16
    link for ``pcie`` rows.
    """
    return _table("network")


_LOADERS: Mapping[TableKind, Callable[[], pd.DataFrame]] = {
    "logic": logic_nodes,
    "memory": memory_techs,
    "network": network_techs,
}


def node_names() -> tuple[str, ...]:
    """Logic node ids in file (sweep) order."""
    return tuple(_load("logic", str(technology_dir())).index)


def memory_names() -> tuple[str, ...]:
    """Memory technology ids in file order."""
    return tuple(_load("memory", str(technology_dir())).index)


def network_names() -> tuple[str, ...]:
    """Network technology ids in file order."""
    return tuple(_load("network", str(technology_dir())).index)


def lookup(kind: str, name: str) -> pd.Series:
    """One row of a table: ``lookup("logic", "n3")``, ``lookup("memory", "hbm3e")``, ``lookup("network", "nvlink5")``.

    ``kind`` is ``logic`` (or ``node``), ``memory`` or ``network``; names are matched case-insensitively.
    Unknown kinds or names raise :class:`ValueError` listing what is known.
    """
    key = str(kind).strip().lower()
    if key not in KIND_ALIASES:
        raise ValueError(f"unknown technology kind {kind!r}; known kinds: logic (or node), memory, network")
    resolved = KIND_ALIASES[key]
    frame = _load(resolved, str(technology_dir()))
    ident = str(name).strip().lower()
    if ident not in frame.index:
        raise ValueError(f"unknown {resolved} technology {name!r}; known {resolved} names: {', '.join(frame.index)}")
    row = frame.loc[ident]
    assert isinstance(row, pd.Series)  # ids are unique (validated on load)
    return row.copy()


def clear_cache() -> None:
    """Forget the loaded tables (after editing a file, or pointing ``DSE_TECHNOLOGY_DIR`` elsewhere)."""
    _load.cache_clear()


__all__ = [
    "ENV_DIR",
    "TechnologyError",
    "clear_cache",
    "logic_nodes",
    "lookup",
    "memory_names",
    "memory_techs",
    "network_names",
    "network_techs",
    "node_names",
    "technology_dir",
]
