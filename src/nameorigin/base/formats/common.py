"""What every table format is: a class with its suffixes and its reader and writer (TableFormat), and the chunk of
rows they hand over. A format is one module of this package and one entry of its FORMATS list."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import IO, Any, Protocol

from nameorigin.base.extras import require_extra


class Chunk(Protocol):
    """Some consecutive data rows of a table, in the form its format reads them."""

    header: list[str]

    def __len__(self) -> int: ...

    def where(self, k: int) -> str: ...  # "line 7", "row 7": for refusals

    def cells(self, column: str) -> list[Any]: ...  # a column's cells, None for a null

    def text_rows(self) -> list[list[str]]: ...  # every cell as text ("" for a null)

    def records(self) -> list[dict[str, Any]]: ...  # each row as header -> value

    def arrow(self) -> Any: ...  # a pyarrow Table


class Writer(Protocol):
    """Rows written as they come; `close(failed)` finishes the file, or only stops after an error."""

    def write(self, chunk: Chunk, added: Any) -> None: ...

    def close(self, failed: bool) -> None: ...


class TableFormat:
    """One table format. `typed`: its writer takes the appended columns as pyarrow arrays (else as text cells per
    row, with their kinds); `columnar`: one column reads without the others (so a scorer reads the names first)."""

    name: str = ""
    suffixes: tuple[str, ...] = ()
    typed = False
    columnar = False

    @classmethod
    def header(cls, reader: Any) -> list[str]:
        raise NotImplementedError

    @classmethod
    def chunks(cls, reader: Any, columns: Sequence[str] | None, rows: int | None) -> Iterator[Chunk]:
        raise NotImplementedError

    @classmethod
    def empty_chunk(cls, reader: Any) -> Chunk:
        raise NotImplementedError

    @classmethod
    def encoded_column(cls, reader: Any, column: str) -> Iterator[Any]:
        """A columnar format's one column, a chunk at a time, as pyarrow dictionary arrays: each chunk's distinct
        cells and each row's index into them, read that way when the file stores it so."""
        raise NotImplementedError

    @classmethod
    def row_count(cls, reader: Any) -> int | None:
        """The data rows, when the format states them without a pass over the file (else None)."""
        return None

    @classmethod
    def check_text(cls, reader: Any, column: str, setting: str) -> None:
        """Refuse a name column that cannot hold text (a typed format's numbers); text formats hold only text."""

    @classmethod
    def damaged(cls, reader: Any, error: Exception) -> str | None:
        """What a read error says of the file, when it is this format's way of saying it is damaged; else None."""
        return None

    @classmethod
    def writer(cls, target: IO[str] | Any, header: list[str], added: list[str], kinds: list[type],
               delimiter: str) -> Writer:
        raise NotImplementedError


class TextChunk:
    """Rows of text cells: lists of strings, short rows padded so every row has the header's width."""

    def __init__(self, header: list[str], rows: list[list[str]], lines: list[int]):
        width = len(header)
        self.header, self.lines = header, lines
        self.rows = [row + [""] * (width - len(row)) if len(row) < width else row for row in rows]

    def __len__(self) -> int:
        return len(self.rows)

    def where(self, k: int) -> str:
        return f"line {self.lines[k]}"

    def cells(self, column: str) -> list[Any]:
        index = self.header.index(column)
        return [row[index] for row in self.rows]

    def text_rows(self) -> list[list[str]]:
        return self.rows

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.header, row, strict=True)) for row in self.rows]

    def arrow(self) -> Any:
        import pyarrow as pa

        columns = list(zip(*self.rows, strict=True)) if self.rows else [()] * len(self.header)
        return pa.Table.from_arrays([pa.array(c, type=pa.string()) for c in columns], names=self.header)


class NewRows(TextChunk):
    """Rows of no input table: `rows` rows without columns, to which a writer appends every column of a table made
    from scratch (nameorigin.base.tables.write_table)."""

    def __init__(self, rows: int):
        super().__init__([], [[] for _ in range(rows)], list(range(2, rows + 2)))

    def arrow(self) -> Any:
        import pyarrow as pa

        return pa.table({"row": pa.nulls(len(self))}).drop_columns(["row"])


def typed_value(kind: type, cell: str) -> Any:
    """A text cell as its column's kind: a number (None when empty), a flag, or the text itself."""
    if kind is int:
        return int(cell) if cell else None
    if kind is float:
        return float(cell) if cell else None
    if kind is bool:
        return cell == "true"
    return cell


def pyarrow_modules(setting: str) -> tuple[Any, Any]:
    return require_extra("pyarrow", "parquet", f"{setting} (Parquet)"), \
        require_extra("pyarrow.parquet", "parquet", f"{setting} (Parquet)")
