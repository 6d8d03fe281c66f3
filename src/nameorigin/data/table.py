"""A table of labelled names (CSV or TSV with a header row) as a corpus: `data=table data.path=people.csv
data.name_column=surname data.label_column=origin`. The rows become (name, label) pairs and go through the same
split as the folder of <Language>.txt files (nameorigin.data.names.split_by_name): duplicates dropped, a name and
its spelling variants in one split, stratified by label."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

from nameorigin.base.errors import UserError
from nameorigin.base.textnorm import normalize_name
from nameorigin.config import TableDataConfig
from nameorigin.data.names import NamesDataModule

MAX_NAME_LENGTH = 64  # longer cells are not one name (the Predictor refuses them too)
# The column settings a checkpoint keeps (to read the table again), and those its sha256 covers.
COLUMN_SETTINGS = ("name_column", "label_column", "label_separator", "delimiter")
DIGESTED = COLUMN_SETTINGS[:3]


def column_settings(config: TableDataConfig, keys: tuple[str, ...] = COLUMN_SETTINGS) -> dict[str, Any]:
    return {key: getattr(config, key) for key in keys}


def table_delimiter(path: Path, delimiter: str | None) -> str:
    """Tab for .tsv/.tab files, else comma, unless given ('tab' names a tab)."""
    if delimiter:
        return "\t" if delimiter == "tab" else delimiter
    return "\t" if path.suffix.lower() in (".tsv", ".tab") else ","


def read_table(config: TableDataConfig) -> tuple[list[tuple[str, str]], str, dict[str, int]]:
    """(name, label) pairs, duplicates dropped and sorted; the sha256 of the file and the column settings; and
    the counts of rows read and skipped (a blank or over-long name, a blank label). Rows never shift."""
    path = Path(config.path)
    if not path.is_file():
        state = "is a folder" if path.is_dir() else "does not exist"
        raise UserError(f"data.path={path} {state}: pass a CSV or TSV file with a header row")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")  # a BOM is fine
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise UserError(f"data.path={path}: line {line} is not UTF-8: re-save the table as UTF-8") from None
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=table_delimiter(path, config.delimiter))
    header = [cell.strip() for cell in next(reader, [])]
    columns = {}
    for setting in ("name_column", "label_column"):
        wanted = getattr(config, setting)
        if wanted not in header:
            raise UserError(f"data.{setting}={wanted} is not a column of {path}: its columns are "
                            f"{', '.join(header) or '(none: the file is empty)'}")
        columns[setting] = header.index(wanted)
    pairs: set[tuple[str, str]] = set()
    counts = Counter(rows=0, blank_name=0, long_name=0, blank_label=0)
    for row in reader:
        counts["rows"] += 1
        name_cell, label_cell = (row[columns[key]] if columns[key] < len(row) else ""
                                 for key in ("name_column", "label_column"))
        name = normalize_name(name_cell, config.normalize.value)
        labels = [label.strip() for label in label_cell.split(config.label_separator) if label.strip()]
        if not labels:
            counts["blank_label"] += 1
        elif not name:
            counts["blank_name"] += 1
        elif len(name) > MAX_NAME_LENGTH:
            counts["long_name"] += 1
        else:
            pairs.update((name, label) for label in labels)
    if counts["rows"] and counts["blank_label"] == counts["rows"]:
        raise UserError(f"data.label_column={config.label_column} is blank on every row of {path}: name the "
                        "column that holds the labels")
    settings = json.dumps(column_settings(config, DIGESTED), sort_keys=True).encode()
    digest = hashlib.sha256(raw + b"\0" + settings).hexdigest()
    return sorted(pairs), digest, dict(counts)


class TableDataModule(NamesDataModule):
    """The names DataModule over a table: the same split, encoding, batches, manifest and resume check."""

    def __init__(self, **settings: Any):
        super(NamesDataModule, self).__init__()
        config = TableDataConfig(**settings)
        self.adopt(config, Path(config.path))
        self.row_counts: dict[str, int] = {}

    def prepare_data(self) -> None:
        """Nothing to fetch: the table is the user's."""

    def read_pairs(self) -> tuple[list[tuple[str, str]], str]:
        pairs, digest, self.row_counts = read_table(self.config)
        return pairs, digest

    def check_every_label_is_split(self) -> None:
        """A label must have a name in each of train, validation and test, or its scores mean nothing."""
        counts = Counter(label for pairs in self.splits.values() for _, label in pairs)
        present = [{label for _, label in pairs} for pairs in self.splits.values()]
        missing = sorted(label for label in self.labels if not all(label in labels for labels in present))
        if missing:
            shown = ", ".join(f"{label} ({counts[label]} names)" for label in missing[:5])
            raise UserError(f"{self.corpus_setting()}: too few names to split label {shown}: each label needs "
                            "a name in train, validation and test; add names or drop those rows")

    def manifest(self) -> dict:
        return {**super().manifest(), "path": str(self.root), "columns": column_settings(self.config, DIGESTED),
                "rows": self.row_counts}

    def state_dict(self) -> dict:
        return {**super().state_dict(), **column_settings(self.config)}

    def corpus_setting(self) -> str:
        return f"data.path={self.root}"
