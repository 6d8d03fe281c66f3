"""A table row's name from its name cells: one column, a name's parts from several columns
(`data.name_columns`), or a full name split by nameparser (`data.split_full_name`), as nameorigin.base.parts
joins them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from nameorigin.base.parts import join_parts, parse_full_name
from nameorigin.base.tables import is_missing
from nameorigin.base.textnorm import normalize_name
from nameorigin.config import TableDataConfig


def text(cell: Any) -> str:
    return "" if is_missing(cell) else str(cell)


def name_settings(config: TableDataConfig) -> list[tuple[str, str]]:
    """Each column a name is read from, with the setting that names it."""
    if config.name_columns:
        return [(f"data.name_columns={config.name_columns}: {column}", column) for column in config.name_columns]
    return [(f"data.name_column={config.name_column}", config.name_column)]


class NameReader:
    """A row's name from its name cells: one cell normalized, parts joined (data.name_columns), or a full name
    split by nameparser (data.split_full_name), with how many full names it could not split in two
    (`one_part`) or read as "Family, Given" (`comma`). Each distinct cell is parsed once."""

    def __init__(self, config: TableDataConfig):
        self.mode = config.normalize.value
        self.split = config.split_full_name
        self.parsed: dict[str, str] = {}
        self.counts = Counter({"one_part": 0, "comma": 0}) if self.split else Counter()

    def __call__(self, cells: Sequence[Any]) -> str:
        if len(cells) > 1:
            return join_parts([normalize_name(text(cell), self.mode) for cell in cells])
        name = normalize_name(text(cells[0]), self.mode)
        if not self.split or not name:
            return name
        if name not in self.parsed:
            parsed = parse_full_name(name)
            self.parsed[name] = join_parts([parsed.given, parsed.family])
            self.counts["one_part"] += parsed.unsplit
            self.counts["comma"] += parsed.comma
        return self.parsed[name]

    def report(self) -> dict[str, int]:
        """Distinct full names nameparser left in one part or read family first (data.split_full_name)."""
        return {f"split_{key}": value for key, value in self.counts.items()}
