"""A name read from one column or from several (its parts, given first and family last): every entry point that
reads tables, frames or Ray batches turns a row's part cells into the one string a model of parts reads
(nameorigin.base.parts), after checking the columns against the model's parts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nameorigin.base.errors import UserError
from nameorigin.base.parts import join_parts
from nameorigin.base.tables import is_missing


def name_columns(column: str | Sequence[str]) -> list[str]:
    columns = [column] if isinstance(column, str) else [str(c) for c in column]
    if not columns or len(set(columns)) != len(columns):
        raise UserError(f"--column {' --column '.join(columns) or '(none)'}: name the column of names, or one "
                        "distinct column per part of a name (given first, family last)")
    return columns


def check_columns(part_names: list[str] | None, columns: Sequence[str], full_names: bool = False) -> None:
    """Refuses parts for a model of one string, and a count of columns other than the model's parts. One column for
    a model of parts only when the caller says it holds full names (`full_names`: split by nameparser for a model
    of [given, family], nameorigin.base.parts.parts_of): a column of surnames read as full names answers wrongly."""
    shown = " ".join(f"--column {column}" for column in columns)
    if part_names is not None and len(columns) == 1 and not full_names:
        raise UserError(f"{shown}: this model reads a name as {len(part_names)} parts ({', '.join(part_names)}): "
                        "pass one column per part, in that order, or --full-names (full_names=True) if the column "
                        "holds full names")
    if part_names is None and len(columns) > 1:
        raise UserError(f"{shown}: this model reads a name as one string: pass the one column of names, or use a "
                        "model trained on parts (data.name_columns)")
    if part_names is not None and len(columns) > 1 and len(columns) != len(part_names):
        raise UserError(f"{shown}: this model reads a name as {len(part_names)} parts ({', '.join(part_names)}): "
                        "pass one column per part, in that order")


def joined_cells(columns: Sequence[Sequence[Any]]) -> list[Any]:
    """Per row, the parts' cells joined into one name; None where every part is missing or blank."""
    rows = []
    for cells in zip(*columns, strict=True):
        joined = join_parts(["" if cell is None or is_missing(cell) else str(cell) for cell in cells])
        rows.append(joined or None)
    return rows


def table_name_columns(reader: Any, column: str | Sequence[str], part_names: list[str] | None,
                       full_names: bool = False) -> list[str]:
    """A table's name columns for a model: checked against its parts, each one a text column of the table."""
    columns = name_columns(column)
    check_columns(part_names, columns, full_names)
    for name in columns:
        reader.require_text(name, f"--column {name}")
    return columns


def frame_name_columns(frame: Any, column: str | Sequence[str]) -> list[str]:
    """A DataFrame's name columns, each one of its columns."""
    columns = name_columns(column)
    for name in columns:
        if name not in frame.columns:
            raise UserError(f"column {name!r} is not in the frame: choose one of "
                            f"{', '.join(map(repr, frame.columns))}")
    return columns


def joined_frame_cells(frame: Any, columns: Sequence[str]) -> list[Any]:
    """joined_cells of a DataFrame's part columns (NaN, None and pd.NA as missing)."""
    return joined_cells([frame[name].where(frame[name].notna(), None).tolist() for name in columns])
