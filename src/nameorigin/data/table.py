"""A table of labelled names (CSV or TSV with a header row, or Parquet) as a corpus: `data=table
data.path=people.csv data.name_column=surname data.label_column=origin`. The rows become (name, label) pairs and go
through the same split as the folder of <Language>.txt files (nameorigin.data.names.split_by_name): duplicates
dropped, a name and its spelling variants in one split, stratified by label.

Two optional kinds of column change what a row says:
- `data.share_columns=[F,M]`: each label's share of the people with the name (counts or fractions; a blank
  cell is 0). The shares are the training targets; the name is split, stratified and scored under its majority
  label (ties to the first label in alphabetical order). A name on several rows pools them, weighted.
- `data.weight_column=count`: how many people a row stands for, or any weight: the row's weight in the training
  loss. Rows of one (name, label) pair add up (with shares: rows of one name).
A row whose weight is 0, or whose shares sum to 0, is skipped and counted; a cell that is not a number, or is
negative, is refused with its line.

A name may come in parts, given first and family last: `data.name_columns=[first_name,last_name]`, or one column of
full names split by nameparser, `data.split_full_name=true` (nameorigin.data.table_names, nameorigin.base.parts).

`data.rows=people` reads a row per person (a voter file, an author list): the (name, label) cells are counted as
the table streams, so memory grows with distinct names, not rows. Each distinct name then trains against its
labels' shares of its people, weighted by how many people carry it, exactly as the same counts written out as a
share-and-weight table would (a person under several labels counts a 1/n part to each).
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nameorigin.base.digest import file_sha256
from nameorigin.base.errors import UserError
from nameorigin.base.parts import glue_parts
from nameorigin.base.tables import TableReader
from nameorigin.base.textnorm import MAX_NAME_LENGTH
from nameorigin.config import TableDataConfig
from nameorigin.data.names import EncodedNames, NamesDataModule
from nameorigin.data.table_names import NameReader, name_settings, text

# The column settings a checkpoint keeps (to read the table again), and those its sha256 covers.
COLUMN_SETTINGS = ("name_column", "label_column", "label_separator", "delimiter", "share_columns", "weight_column",
                   "rows", "name_columns", "split_full_name", "join_parts")
# People are counted from each chunk's cells as Python lists: Parquet chunks smaller than the reader's default
# keep those lists a small part of the memory.
PEOPLE_CHUNK = 1 << 18
DIGESTED = ("name_column", "label_column", "label_separator", "share_columns", "weight_column", "rows", "name_columns",
            "split_full_name")
# Settings left out of the digest at their defaults, so a table's digest is what it was before each existed.
DIGEST_DEFAULTS = {"rows": "names", "split_full_name": False}


def column_settings(config: TableDataConfig, keys: tuple[str, ...] = COLUMN_SETTINGS) -> dict[str, Any]:
    return {key: getattr(config, key) for key in keys}


@dataclass
class Table:
    """What a table holds, read once. In share mode `pairs` has one pair per name, under its majority label."""

    pairs: list[tuple[str, str]]  # sorted, duplicates dropped
    labels: list[str]  # the model's outputs, in order
    digest: str  # sha256 of the file and the column settings that decide what was read
    counts: dict[str, int]  # rows read and rows skipped, by reason
    shares: np.ndarray | None = None  # [pairs, labels] float32, rows summing to 1 (data.share_columns)
    weights: np.ndarray | None = None  # [pairs] float64 (data.weight_column)


def number(cell: Any, setting: str, where: str, path: Path, blank: float | None) -> float:
    """A cell's non-negative finite number; a blank cell is `blank` or, when that is None, refused."""
    if cell is None or isinstance(cell, str) and not cell.strip():
        if blank is not None:
            return blank
        raise UserError(f"{setting} is blank on {where} of {path}: give every row a number (0 skips the row)")
    try:
        value = float(cell)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value < 0 or isinstance(cell, bool):
        raise UserError(f"{setting} on {where} of {path} is {cell!r}: give a number >= 0")
    return value


def rows_of(reader: TableReader, columns: list[str]) -> Iterator[tuple[str, list[Any]]]:
    """Each data row's `columns`, with where it is in the file ("line 7", "row 7") for refusals."""
    for chunk in reader.chunks(columns):
        for k, cells in enumerate(zip(*(chunk.cells(column) for column in columns), strict=True)):
            yield chunk.where(k), list(cells)


def table_digest(path: Path, config: TableDataConfig) -> str:
    """sha256 of the file and the settings that decide what was read (those at their DIGEST_DEFAULTS left out, so
    a table's digest is what it was before each setting existed)."""
    settings = {key: value for key, value in column_settings(config, DIGESTED).items()
                if value is not None and DIGEST_DEFAULTS.get(key, object()) != value}
    return file_sha256(path, b"\0" + json.dumps(settings, sort_keys=True).encode())


def shares_table(names: list[str], labels: list[str], amounts: np.ndarray, digest: str, counts: dict,
                 weighted: bool) -> Table:
    """Each name's pooled amount per label ([names, labels]) as shares, the name under its majority label (ties to
    the first label) and, when `weighted`, weighted by its total."""
    weights = amounts.sum(1)
    shares = (amounts / np.maximum(weights, 1e-300)[:, None]).astype(np.float32)
    majority = shares.argmax(1) if len(names) else np.zeros(0, dtype=int)
    ordered = [(name, labels[k]) for name, k in zip(names, majority.tolist(), strict=True)]
    return Table(ordered, labels, digest, counts, shares, weights if weighted else None)


def read_people(config: TableDataConfig, reader: TableReader) -> Table:
    """data.rows=people: count the (name cell, label cell) rows as they stream, then normalize each distinct cell
    pair once; a skipped pair counts all of its rows under its reason."""
    for setting, column in name_settings(config):
        reader.require(column, setting)
    reader.require(config.label_column, f"data.label_column={config.label_column}")
    cells: Counter = Counter()
    rows = PEOPLE_CHUNK if reader.format.columnar else None
    name_of, source = NameReader(config), config.name_source
    for chunk in reader.chunks([*source, config.label_column], rows):
        cells.update(zip(zip(*(chunk.cells(column) for column in source), strict=True),
                         chunk.cells(config.label_column), strict=True))
    counts = Counter({"rows": sum(cells.values()), "blank_name": 0, "long_name": 0, "blank_label": 0})
    people: dict[str, dict[str, float]] = {}
    while cells:  # emptied as it goes: the raw pairs and the pooled names are not both held whole
        (name_cell, label_cell), rows = cells.popitem()
        labels = [label.strip() for label in text(label_cell).split(config.label_separator) if label.strip()]
        name = name_of(name_cell)
        reason = "blank_label" if not labels else "blank_name" if not name else \
            "long_name" if len(name) > MAX_NAME_LENGTH else None
        if reason:
            counts[reason] += rows
            continue
        mine = people.setdefault(name, {})
        for label in labels:
            mine[label] = mine.get(label, 0.0) + rows / len(labels)
    if counts["rows"] and counts["blank_label"] == counts["rows"]:
        raise UserError(f"data.label_column={config.label_column} is blank on every row of {config.path}: name "
                        "the column that holds the labels")
    names = sorted(people)
    labels = sorted({label for shares in people.values() for label in shares})
    column = {label: k for k, label in enumerate(labels)}
    # Filled a name at a time, in float32: a float64 [names, labels] matrix would be the largest thing held.
    shares, weights = np.zeros((len(names), len(labels)), dtype=np.float32), np.zeros(len(names))
    for row, name in enumerate(names):
        mine = people.pop(name)
        total = weights[row] = sum(mine.values())
        for label, amount in mine.items():
            shares[row, column[label]] = amount / total
    majority = shares.argmax(1) if len(names) else np.zeros(0, dtype=int)
    pairs = [(name, labels[k]) for name, k in zip(names, majority.tolist(), strict=True)]
    counts["distinct_names"] = len(names)
    counts.update(name_of.report())
    return Table(pairs, labels, table_digest(Path(config.path), config), dict(counts), shares, weights)


def required_columns(config: TableDataConfig, reader: TableReader, shares_in: list[str] | None) -> list[str]:
    """The columns a row is read from, in order (name, labels or shares, weight), each checked to exist."""
    needed = name_settings(config)
    needed += [(f"data.share_columns={config.share_columns}: {c}", c) for c in shares_in] if shares_in else \
        [(f"data.label_column={config.label_column}", config.label_column)]
    needed += [(f"data.weight_column={config.weight_column}", config.weight_column)] if config.weight_column else []
    for setting, column in needed:
        reader.require(column, setting)
    return [column for _, column in needed]


def read_table(config: TableDataConfig) -> Table:
    """Every row read, checked and pooled; rows never shift (a skipped row is counted, never dropped silently)."""
    path = Path(config.path)
    reader = TableReader(path, "data.path=", config.delimiter)
    if config.rows == "people":
        return read_people(config, reader)
    shares_in = sorted(config.share_columns) if config.share_columns else None
    wanted = required_columns(config, reader, shares_in)
    pair_weight: dict[tuple[str, str], float] = defaultdict(float)  # with a weight column: its rows' sum
    name_shares: dict[str, list[float]] = {}  # with share columns: each label's weighted share, over its rows
    pairs: set[tuple[str, str]] = set()
    # The reasons a row can be skipped, each counted (those of columns this table has).
    reasons = ["blank_name", "long_name", "zero_shares" if shares_in else "blank_label",
               *(["zero_weight"] if config.weight_column else [])]
    counts = Counter({"rows": 0, **dict.fromkeys(reasons, 0)})
    name_of, width = NameReader(config), len(config.name_source)
    for where, cells in rows_of(reader, wanted):
        counts["rows"] += 1
        name, rest = name_of(cells[:width]), cells[width:]
        weight = number(cells[-1], f"data.weight_column={config.weight_column}", where, path, None) \
            if config.weight_column else 1.0
        if shares_in:
            values = [number(cell, f"data.share_columns={config.share_columns}: {column}", where, path, 0.0)
                      for cell, column in zip(rest[: len(shares_in)], shares_in, strict=True)]
            total = sum(values)
        else:
            labels = [label.strip() for label in text(rest[0]).split(config.label_separator) if label.strip()]
        if shares_in and total == 0:
            counts["zero_shares"] += 1
        elif not shares_in and not labels:
            counts["blank_label"] += 1
        elif not name:
            counts["blank_name"] += 1
        elif len(name) > MAX_NAME_LENGTH:
            counts["long_name"] += 1
        elif weight == 0:
            counts["zero_weight"] += 1
        elif shares_in:
            scaled = [value * weight / total for value in values]
            before = name_shares.get(name)
            name_shares[name] = scaled if before is None else [a + b for a, b in zip(before, scaled, strict=True)]
        else:
            pairs.update((name, label) for label in labels)
            if config.weight_column:
                for label in labels:
                    pair_weight[name, label] += weight
    if counts["rows"] and counts["blank_label"] == counts["rows"]:
        raise UserError(f"data.label_column={config.label_column} is blank on every row of {path}: name the "
                        "column that holds the labels")
    digest = table_digest(path, config)
    counts.update(name_of.report())
    if not shares_in:
        ordered = sorted(pairs)
        weights = np.array([pair_weight[pair] for pair in ordered]) if config.weight_column else None
        return Table(ordered, sorted({label for _, label in ordered}), digest, dict(counts), None, weights)
    names = sorted(name_shares)
    pooled = np.array([name_shares[name] for name in names]).reshape(len(names), len(shares_in))
    return shares_table(names, shares_in, pooled, digest, dict(counts), config.weight_column is not None)


class TableDataModule(NamesDataModule):
    """The names DataModule over a table: the same split, encoding, batches, manifest and resume check."""

    def __init__(self, pretrained_vocab: Sequence[str] | None = None, **settings: Any):
        super(NamesDataModule, self).__init__()
        config = TableDataConfig(**settings)
        self.adopt(config, Path(config.path), pretrained_vocab)
        # Share columns, or people counted into shares: the model then trains against the shares.
        self.soft_labels = config.share_columns is not None or config.rows == "people"
        self.row_counts: dict[str, int] = {}
        self.table: Table | None = None

    def prepare_data(self) -> None:
        """Nothing to fetch: the table is the user's."""

    def read_pairs(self) -> tuple[list[tuple[str, str]], str]:
        self.table = read_table(self.config)
        self.row_counts = self.table.counts
        self.row_of = {pair: row for row, pair in enumerate(self.table.pairs)} \
            if self.table.shares is not None or self.table.weights is not None else None
        return self.table.pairs, self.table.digest

    def label_set(self, pairs: list[tuple[str, str]]) -> list[str]:
        return list(self.table.labels) if self.table is not None else super().label_set(pairs)

    def encode(self, pairs: list[tuple[str, str]]) -> EncodedNames:
        table = self.table
        rows = None if self.row_of is None else np.array([self.row_of[pair] for pair in pairs], dtype=np.int64)
        shares = None if table.shares is None else torch.from_numpy(table.shares[rows])
        weights = None if table.weights is None else torch.from_numpy(table.weights[rows].astype(np.float32))
        return EncodedNames(self.as_read(pairs), {c: i for i, c in enumerate(self.vocab)}, self.labels, shares,
                            weights, self.boundary)

    @property
    def name_parts(self) -> dict | None:
        parts = self.config.parts
        return {"names": parts, "join": self.config.join_parts} if parts else None

    def as_read(self, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """data.join_parts=space: the parts glued into "Given Family", one string (the split stays the parts')."""
        if self.config.parts and self.config.join_parts == "space":
            return [(glue_parts(name), label) for name, label in pairs]
        return pairs

    def check_every_label_is_split(self) -> None:
        """A label must have a name in each of train, validation and test, or its scores mean nothing (with
        shares: be the majority of one)."""
        counts = Counter(label for pairs in self.splits.values() for _, label in pairs)
        present = [{label for _, label in pairs} for pairs in self.splits.values()]
        missing = sorted(label for label in self.labels if not all(label in labels for labels in present))
        if missing:
            shown = ", ".join(f"{label} ({counts[label]} names)" for label in missing[:5])
            under = " as their majority label" if self.soft_labels else ""
            raise UserError(f"{self.corpus_setting()}: too few names to split label {shown}{under}: each label "
                            "needs a name in train, validation and test; add names or drop those rows")

    def class_prior(self) -> list[float]:
        """With shares, the training names' mean share of each label."""
        if self.table is None or self.table.shares is None:
            return super().class_prior()
        mean = self.datasets["train"].languages.double().mean(0).clamp_min(1e-6)
        return (mean / mean.sum()).tolist()

    def manifest(self) -> dict:
        return {**super().manifest(), "path": str(self.root), "columns": column_settings(self.config, DIGESTED),
                "rows": self.row_counts}

    def state_dict(self) -> dict:
        return {**super().state_dict(), **column_settings(self.config)}

    def corpus_setting(self) -> str:
        return f"data.path={self.root}"
