"""Parquet (the [parquet] extra: pyarrow, imported only for these files): read by row group, a column at a time
when asked for one, and written on a thread of its own while the caller scores the next chunk."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from nameorigin.base.errors import UserError
from nameorigin.base.formats.common import TableFormat, pyarrow_modules

CHUNK_ROWS = 1 << 21  # read and written column-wise: big chunks keep the per-chunk cost low


class ArrowChunk:
    """A record batch of a Parquet file; cells come back as Python values (None for a null)."""

    def __init__(self, batch: Any, first_row: int):
        self.batch, self.first_row = batch, first_row
        self.header = list(batch.schema.names)

    def __len__(self) -> int:
        return self.batch.num_rows

    def where(self, k: int) -> str:
        return f"row {self.first_row + k}"

    def cells(self, column: str) -> list[Any]:
        return self.batch.column(column).to_pylist()

    def text_rows(self) -> list[list[str]]:
        columns = [["" if v is None else str(v) for v in c.to_pylist()] for c in self.batch.columns]
        return [list(row) for row in zip(*columns, strict=True)]

    def records(self) -> list[dict[str, Any]]:
        return self.batch.to_pylist()

    def arrow(self) -> Any:
        import pyarrow as pa

        return pa.Table.from_batches([self.batch])


class Parquet(TableFormat):
    name = "Parquet"
    suffixes = (".parquet", ".pq")
    typed = True
    columnar = True

    @classmethod
    def header(cls, reader: Any) -> list[str]:
        _, pq = pyarrow_modules(reader.setting)
        reader.schema = reader.guarded(lambda: pq.read_schema(reader.path))
        return list(reader.schema.names)

    @classmethod
    def chunks(cls, reader: Any, columns: Sequence[str] | None, rows: int | None) -> Iterator[ArrowChunk]:
        _, pq = pyarrow_modules(reader.setting)
        wanted = None if columns is None else list(dict.fromkeys(columns))
        batches = reader.guarded(lambda: pq.ParquetFile(reader.path).iter_batches(batch_size=rows or CHUNK_ROWS,
                                                                                  columns=wanted))
        first = 1
        while (batch := reader.guarded(lambda: next(batches, None))) is not None:
            yield ArrowChunk(batch, first)
            first += batch.num_rows

    @classmethod
    def encoded_column(cls, reader: Any, column: str) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        _, pq = pyarrow_modules(reader.setting)
        batches = reader.guarded(lambda: pq.ParquetFile(reader.path, read_dictionary=[column]).iter_batches(
            batch_size=CHUNK_ROWS, columns=[column]))
        while (batch := reader.guarded(lambda: next(batches, None))) is not None:
            cells = batch.column(0)
            if not pa.types.is_dictionary(cells.type):  # a column of nulls only
                cells = pc.dictionary_encode(cells.cast(pa.string()), null_encoding="encode")
            yield cells

    @classmethod
    def empty_chunk(cls, reader: Any) -> ArrowChunk:
        import pyarrow as pa

        return ArrowChunk(pa.RecordBatch.from_pylist([], schema=reader.schema), 1)

    @classmethod
    def row_count(cls, reader: Any) -> int | None:
        _, pq = pyarrow_modules(reader.setting)
        return reader.guarded(lambda: pq.ParquetFile(reader.path).metadata.num_rows)

    @classmethod
    def check_text(cls, reader: Any, column: str, setting: str) -> None:
        """A Parquet name column must hold strings (a dictionary of strings or all nulls will do)."""
        import pyarrow as pa

        kind = reader.schema.field(column).type
        value = kind.value_type if pa.types.is_dictionary(kind) else kind
        if not (pa.types.is_string(value) or pa.types.is_large_string(value) or pa.types.is_null(value)):
            raise UserError(f"{setting} in {reader.path} holds {kind}, not text: cast the column to strings "
                            "(e.g. df[col].astype('string')) or name the column that holds the names")

    @classmethod
    def damaged(cls, reader: Any, error: Exception) -> str | None:
        if isinstance(error, OSError) or type(error).__module__.split(".")[0] == "pyarrow":
            return f"{reader.setting} is not a readable Parquet file ({error}): re-save it"
        return None

    @classmethod
    def writer(cls, target: Path, header: list[str], added: list[str], kinds: list[type],
               delimiter: str) -> ParquetWriter:
        return ParquetWriter(target, added)


class ParquetWriter:
    """Encodes and compresses on a thread of its own (pyarrow releases the GIL); a failure there is raised in the
    caller's thread at its next write or at close."""

    def __init__(self, target: Path, added: list[str]):
        self.target, self.added = target, added
        self.parquet_writer: Any = None
        self.pending: queue.Queue = queue.Queue(maxsize=1)
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self.drain, name="parquet-writer", daemon=True)
        self.thread.start()

    def write(self, chunk: Any, added: list[Any]) -> None:
        """`added`: one pyarrow array per appended column."""
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

    def close(self, failed: bool) -> None:
        self.pending.put(None)
        self.thread.join()
        if self.parquet_writer is not None:
            self.parquet_writer.close()
        if self.failure is not None and not failed:
            raise self.failure
