"""Tables of names on disk, read and written the same way by training (`data=table`) and by serving
(`nameorigin predict --file`), streamed a chunk at a time, so a table is never held whole. The format is the
file's suffix's (nameorigin.base.formats: delimited text, Parquet, ...); stated once here: the missing-value
markers, and what each refusal of an unreadable file says.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from nameorigin.base.errors import UserError
from nameorigin.base.formats import FORMATS, format_of, known_suffixes, written_format
from nameorigin.base.formats.common import Chunk, NewRows, TableFormat
from nameorigin.base.formats.delimited import delimiter_for

# What spreadsheets, pandas and databases write for an empty cell: a missing value, not a name or a label.
MISSING_MARKERS = frozenset({"NaN", "nan", "NULL", "null", "N/A", "#N/A", "None", "<NA>"})


def is_missing(cell: Any) -> bool:
    """A null, or a cell that spells a missing value ("NaN", "NULL", ...): no name, whatever it spells."""
    return cell is None or isinstance(cell, str) and cell in MISSING_MARKERS


def first_bad_line(path: Path) -> int:
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                return number
    return 0


class TableReader:
    """One table file: its header on opening, then its rows a chunk at a time (`chunks`), as often as asked.
    `setting` names where the path came from (`--file`, `data.path`) in every refusal."""

    def __init__(self, path: str | Path, setting: str, delimiter: str | None = None):
        self.path = Path(path)
        self.setting = f"{setting}{path}" if setting.endswith("=") else f"{setting} {path}"  # data.path=, --file
        if not self.path.is_file():
            state = "is a folder" if self.path.is_dir() else "does not exist"
            raise UserError(f"{self.setting} {state}: pass a table file with a header row "
                            f"({', '.join(known_suffixes())})")
        self.format: type[TableFormat] = format_of(self.path)
        # A delimiter is delimited text's; a scored table of another format goes to standard output as CSV.
        self.delimiter = delimiter_for(self.path, delimiter) if self.format is FORMATS["delimited"] else ","
        self.schema: Any = None  # a typed format's column types, where it has them
        self.header = self.format.header(self)
        if not self.header:
            raise UserError(f"{self.setting} has no header row: the first line must name the columns")

    def require(self, column: str, setting: str) -> None:
        if column not in self.header:
            raise UserError(f"{setting} is not a column of {self.path}: its columns are "
                            f"{', '.join(self.header) or '(none: the file is empty)'}")

    def require_text(self, column: str, setting: str) -> None:
        """The column exists and can hold names (a typed format's column of numbers cannot)."""
        self.require(column, setting)
        self.format.check_text(self, column, setting)

    def chunks(self, columns: Sequence[str] | None = None, rows: int | None = None) -> Iterator[Chunk]:
        """The data rows, in order, a chunk at a time; a columnar format reads only `columns` (all when None)."""
        return self.format.chunks(self, columns, rows)

    def row_count(self) -> int | None:
        """The data rows, when the format states them without reading the file (Parquet's metadata)."""
        return self.format.row_count(self)

    def empty_chunk(self) -> Chunk:
        """No rows, in this table's columns: what a writer gets for a table without data rows."""
        return self.format.empty_chunk(self)

    def guarded(self, read: Callable[[], Any]) -> Any:
        """`read()`, with what a damaged or foreign file raises turned into one line naming it."""
        try:
            return read()
        except UnicodeDecodeError:
            raise UserError(f"{self.setting}: line {first_bad_line(self.path)} is not UTF-8: re-save the table "
                            "as UTF-8") from None
        except (IsADirectoryError, PermissionError) as error:
            raise UserError(f"{self.setting} cannot be read ({error.strerror}): pass a readable file") from None
        except (csv.Error, Exception) as error:
            said = self.format.damaged(self, error)
            if said is None:
                raise
            raise UserError(said) from None


class TableWriter:
    """Rows written as they come, in `fmt`: the appended columns come as pyarrow arrays when the format is typed,
    else as text cells per row (whose `kinds` a format with types of its own reads them as). Use it as a context
    manager: leaving it finishes the file, or stops the writer after an error."""

    def __init__(self, target: IO[str] | Path, header: list[str], added: list[str], delimiter: str = ",",
                 fmt: type[TableFormat] | None = None, kinds: list[type] | None = None):
        fmt = fmt or FORMATS["delimited"]
        self.typed = fmt.typed
        self.writer = fmt.writer(target, header, added, kinds or [str] * len(added), delimiter)

    def write(self, chunk: Chunk, added: Any) -> None:
        self.writer.write(chunk, added)

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.writer.close(failed=exc[0] is not None)


def write_table(path: Path, columns: list[str], kinds: list[type], rows: list[list[Any]], setting: str) -> None:
    """A table made from scratch (no input rows), in the format its suffix names: `rows` of values of `kinds`
    (int, float, bool or str; None for an empty cell). Written in place: wrap it in write_atomically."""
    fmt = written_format(path, setting)
    chunk = NewRows(len(rows))
    if fmt.typed:  # pyarrow arrays, one per column, and the format writes its own file
        import pyarrow as pa

        types = {int: pa.int64(), float: pa.float64(), bool: pa.bool_(), str: pa.string()}
        arrays = [pa.array([row[i] for row in rows], type=types[kind]) for i, kind in enumerate(kinds)]
        with TableWriter(path, [], columns, ",", fmt, kinds) as writer:
            writer.write(chunk, arrays)
        return
    cells = [["" if value is None else str(value) for value in row] for row in rows]
    with open(path, "w", encoding="utf-8", newline="") as stream, \
            TableWriter(stream, [], columns, delimiter_for(path), fmt, kinds) as writer:
        writer.write(chunk, cells)
