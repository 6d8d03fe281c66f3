"""Tables of names on disk, read and written the same way by training (`data=table`) and by serving
(`nameorigin-predict --file`): CSV and TSV (any other suffix reads as delimited text) and Parquet, streamed a chunk
at a time (Parquet by row group), so a table is never held whole.

Stated once here: which suffix is which format, the delimiter rule, the missing-value markers, and what each
refusal says. pyarrow (the [parquet] extra) is imported only for Parquet files.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from nameorigin.base.errors import UserError

PARQUET_SUFFIXES = (".parquet", ".pq")
TAB_SUFFIXES = (".tsv", ".tab")
TEXT_SUFFIXES = (".csv", ".txt", *TAB_SUFFIXES)
# What spreadsheets, pandas and databases write for an empty cell: a missing value, not a name or a label.
MISSING_MARKERS = frozenset({"NaN", "nan", "NULL", "null", "N/A", "#N/A", "None", "<NA>"})
TEXT_CHUNK_ROWS = 4096  # delimited text is parsed in Python, a row at a time: small chunks keep memory flat
ARROW_CHUNK_ROWS = 1 << 21  # Parquet is read and written column-wise: big chunks keep the per-chunk cost low


def is_parquet(path: str | Path) -> bool:
    return Path(path).suffix.lower() in PARQUET_SUFFIXES


def delimiter_for(path: str | Path, given: str | None = None) -> str:
    """Tab for .tsv/.tab files, else comma, unless given ('tab' or '\\t' name a tab)."""
    if given:
        return "\t" if given in ("tab", "\\t") else given
    return "\t" if Path(path).suffix.lower() in TAB_SUFFIXES else ","


def is_missing(cell: Any) -> bool:
    """A null, or a cell that spells a missing value ("NaN", "NULL", ...): no name, whatever it spells."""
    return cell is None or isinstance(cell, str) and cell in MISSING_MARKERS


def pyarrow_modules(setting: str) -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError(f"{setting} is Parquet, which needs pyarrow: pip install 'nameorigin[parquet]' (or save "
                        "the table as CSV)") from None
    return pa, pq


def file_digest(path: Path, extra: bytes = b"") -> str:
    """sha256 of the file's bytes followed by `extra`, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    digest.update(extra)
    return digest.hexdigest()


def first_bad_line(path: Path) -> int:
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                return number
    return 0


class TextChunk:
    """Rows of a delimited file: lists of strings, short rows padded so every row has the header's width."""

    def __init__(self, header: list[str], rows: list[list[str]], lines: list[int]):
        width = len(header)
        self.header, self.lines = header, lines
        self.rows = [row + [""] * (width - len(row)) if len(row) < width else row for row in rows]

    def __len__(self) -> int:
        return len(self.rows)

    def where(self, k: int) -> str:
        return f"line {self.lines[k]}"

    def cells(self, column: str) -> list[str]:
        index = self.header.index(column)
        return [row[index] for row in self.rows]

    def text_rows(self) -> list[list[str]]:
        return self.rows

    def arrow(self) -> Any:
        import pyarrow as pa

        columns = list(zip(*self.rows, strict=True)) if self.rows else [()] * len(self.header)
        return pa.Table.from_arrays([pa.array(c, type=pa.string()) for c in columns], names=self.header)


class ArrowChunk:
    """A record batch of a Parquet file; cells come back as Python values (None for a null)."""

    def __init__(self, batch: Any, first_row: int):
        self.batch, self.first_row = batch, first_row

    def __len__(self) -> int:
        return self.batch.num_rows

    def where(self, k: int) -> str:
        return f"row {self.first_row + k}"

    def cells(self, column: str) -> list[Any]:
        return self.batch.column(column).to_pylist()

    def text_rows(self) -> list[list[str]]:
        columns = [["" if v is None else str(v) for v in c.to_pylist()] for c in self.batch.columns]
        return [list(row) for row in zip(*columns, strict=True)]

    def arrow(self) -> Any:
        import pyarrow as pa

        return pa.Table.from_batches([self.batch])


class TableReader:
    """One table file: its header on opening, then its rows a chunk at a time (`chunks`), as often as asked.
    `setting` names where the path came from (`--file`, `data.path`) in every refusal."""

    def __init__(self, path: str | Path, setting: str, delimiter: str | None = None):
        self.path = Path(path)
        self.setting = f"{setting}{path}" if setting.endswith("=") else f"{setting} {path}"  # data.path=, --file
        if not self.path.is_file():
            state = "is a folder" if self.path.is_dir() else "does not exist"
            raise UserError(f"{self.setting} {state}: pass a CSV, TSV or Parquet file with a header row")
        self.parquet = is_parquet(self.path)
        self.delimiter = delimiter_for(self.path, delimiter)
        if self.parquet:
            _, pq = pyarrow_modules(self.setting)
            self.schema = self.guarded(lambda: pq.read_schema(self.path))
            self.header = list(self.schema.names)
        else:
            self.header = [cell.strip() for cell in self.guarded(self.text_header)]
            if not self.header:
                raise UserError(f"{self.setting} has no header row: the first line must name the columns")

    def require(self, column: str, setting: str) -> None:
        if column not in self.header:
            raise UserError(f"{setting} is not a column of {self.path}: its columns are "
                            f"{', '.join(self.header) or '(none: the file is empty)'}")

    def require_text(self, column: str, setting: str) -> None:
        """A Parquet name column must hold strings (a dictionary of strings or all nulls will do)."""
        self.require(column, setting)
        if not self.parquet:
            return
        import pyarrow as pa

        kind = self.schema.field(column).type
        value = kind.value_type if pa.types.is_dictionary(kind) else kind
        if not (pa.types.is_string(value) or pa.types.is_large_string(value) or pa.types.is_null(value)):
            raise UserError(f"{setting} in {self.path} holds {kind}, not text: cast the column to strings "
                            "(e.g. df[col].astype('string')) or name the column that holds the names")

    def chunks(self, columns: Sequence[str] | None = None, rows: int | None = None) -> Iterator[TextChunk | ArrowChunk]:
        """The data rows, in order, a chunk at a time; Parquet reads only `columns` (all when None)."""
        if self.parquet:
            return self.arrow_chunks(columns, rows or ARROW_CHUNK_ROWS)
        return self.text_chunks(rows or TEXT_CHUNK_ROWS)

    def empty_chunk(self) -> TextChunk | ArrowChunk:
        """No rows, in this table's columns: what a writer gets for a table without data rows."""
        if not self.parquet:
            return TextChunk(self.header, [], [])
        import pyarrow as pa

        return ArrowChunk(pa.RecordBatch.from_pylist([], schema=self.schema), 1)

    def arrow_chunks(self, columns: Sequence[str] | None, rows: int) -> Iterator[ArrowChunk]:
        _, pq = pyarrow_modules(self.setting)
        wanted = None if columns is None else list(dict.fromkeys(columns))
        batches = self.guarded(lambda: pq.ParquetFile(self.path).iter_batches(batch_size=rows, columns=wanted))
        first = 1
        while (batch := self.guarded(lambda: next(batches, None))) is not None:
            yield ArrowChunk(batch, first)
            first += batch.num_rows

    def text_header(self) -> list[str]:
        with open(self.path, encoding="utf-8-sig", newline="") as stream:  # utf-8-sig drops a BOM
            return next(csv.reader(stream, delimiter=self.delimiter), [])

    def text_chunks(self, rows: int) -> Iterator[TextChunk]:
        csv.field_size_limit(2**31 - 1)  # a huge cell is an unusable name to explain, not a crash
        with self.guarded(lambda: open(self.path, encoding="utf-8-sig", newline="")) as stream:
            reader = csv.reader(stream, delimiter=self.delimiter)
            numbered = ((reader.line_num, row) for row in reader)  # the line a row ends on, for refusals
            self.guarded(lambda: next(numbered, None))  # the header
            while block := self.guarded(lambda: list(itertools.islice(numbered, rows))):
                yield TextChunk(self.header, [row for _, row in block], [line for line, _ in block])

    def guarded(self, read: Callable[[], Any]) -> Any:
        """`read()`, with what a damaged or foreign file raises turned into one line naming it."""
        try:
            return read()
        except UnicodeDecodeError:
            raise UserError(f"{self.setting}: line {first_bad_line(self.path)} is not UTF-8: re-save the table "
                            "as UTF-8") from None
        except csv.Error as error:
            raise UserError(f"{self.setting} is not a readable table ({error}): check its quoting") from None
        except (IsADirectoryError, PermissionError) as error:
            raise UserError(f"{self.setting} cannot be read ({error.strerror}): pass a readable file") from None
        except OSError as error:
            if not self.parquet:
                raise
            raise UserError(f"{self.setting} is not a readable Parquet file ({error}): re-save it") from None
        except Exception as error:
            if not self.parquet or type(error).__module__.split(".")[0] != "pyarrow":
                raise
            raise UserError(f"{self.setting} is not a readable Parquet file ({error}): re-save it") from None


def output_format(path: str | Path, source: str | Path, setting: str = "--out") -> str:
    """'parquet' or 'text' for an output path; refused when it is the input or its suffix names no table."""
    path, source = Path(path), Path(source)
    if path.exists() and path.resolve() == source.resolve() or path.absolute() == source.absolute():
        raise UserError(f"{setting} {path} is the input table: write the scored table to another file")
    suffix = path.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    if suffix in TEXT_SUFFIXES:
        return "text"
    raise UserError(f"{setting} {path}: unknown table suffix {suffix or '(none)'!r}: end the name in "
                    f"{', '.join(TEXT_SUFFIXES + PARQUET_SUFFIXES)}")


class TableWriter:
    """Rows written as they come: delimited text to a stream, or a Parquet file. `typed` says which form the
    appended columns must come in: Python strings per row (text) or pyarrow arrays (Parquet). Parquet is encoded
    and compressed on a thread of its own (pyarrow releases the GIL), while the caller scores the next chunk.
    Use it as a context manager: leaving it finishes the file, or stops the thread after an error."""

    def __init__(self, target: IO[str] | Path, header: list[str], added: list[str], delimiter: str = ",",
                 parquet: bool = False):
        self.header, self.added, self.typed, self.target = header, added, parquet, target
        self.parquet_writer: Any = None
        if parquet:
            self.pending: queue.Queue = queue.Queue(maxsize=1)
            self.failure: BaseException | None = None
            self.thread = threading.Thread(target=self.drain, name="parquet-writer", daemon=True)
            self.thread.start()
        else:
            self.text = csv.writer(target, delimiter=delimiter, lineterminator="\n")
            self.text.writerow([*header, *added])

    def write(self, chunk: TextChunk | ArrowChunk, added: Any) -> None:
        """`added`: per row, a list of cells (text); or one pyarrow array per appended column (Parquet)."""
        if not self.typed:
            self.text.writerows([[*row, *cells] for row, cells in zip(chunk.text_rows(), added, strict=True)])
            return
        if self.failure is not None:
            raise self.failure
        table = chunk.arrow()
        for name, array in zip(self.added, added, strict=True):
            table = table.append_column(name, array)
        self.pending.put(table)

    def drain(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        while (table := self.pending.get()) is not None:
            if self.failure is not None:
                continue
            try:
                if self.parquet_writer is None:
                    # Dictionary pages pay for text columns (labels, reasons, names), not for numbers and flags.
                    text = [field.name for field in table.schema if pa.types.is_string(field.type)
                            or pa.types.is_large_string(field.type) or pa.types.is_dictionary(field.type)]
                    self.parquet_writer = pq.ParquetWriter(self.target, table.schema, use_dictionary=text)
                self.parquet_writer.write_table(table)
            except BaseException as error:  # handed to the caller's thread at its next write or at close
                self.failure = error

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.typed:
            return
        self.pending.put(None)
        self.thread.join()
        if self.parquet_writer is not None:
            self.parquet_writer.close()
        if self.failure is not None and exc[0] is None:
            raise self.failure
