"""Predictions for a column of a table file (CSV, TSV or Parquet, in and out), streamed: every input row comes
back, in order, with its own columns untouched and prediction columns appended. A blank, missing or unusable
cell gets empty prediction columns and a reason; no row is ever dropped or shifted.

Two passes over the file: the first counts the column's distinct cells, which are then scored once each
(nameorigin.serving.distinct); the second writes every row with its name's answer joined on. Memory holds the
distinct names and a chunk of rows, never the table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from nameorigin.base.atomic import write_atomically
from nameorigin.base.tables import (
    TEXT_CHUNK_ROWS,
    ArrowChunk,
    TableReader,
    TableWriter,
    TextChunk,
    delimiter_for,
    output_format,
)
from nameorigin.serving.distinct import DistinctNames, score
from nameorigin.serving.predict import BATCH_SIZE, Predictor
from nameorigin.serving.schema import OutputOptions, column_kinds, table_cells, table_columns, typed_cell

CHUNK_ROWS = TEXT_CHUNK_ROWS  # rows of a delimited file read and written at a time


@dataclass(frozen=True)
class TableSummary:
    rows: int  # data rows written
    names: int  # distinct names the model scored
    unusable: int  # rows without a usable name (blank, a missing-value marker, too long, no known character)

    def line(self) -> str:
        return (f"scored {self.names:,} distinct names for {self.rows:,} rows "
                f"({self.unusable:,} rows without a usable name)")


def count_cells(reader: TableReader, column: str, merge: bool) -> tuple[list, list[int]]:
    """The column's distinct cells and how many rows hold each (with merge=False, every cell, in order)."""
    if not merge:
        cells = [cell for chunk in reader.chunks([column]) for cell in chunk.cells(column)]
        return cells, [1] * len(cells)
    if not reader.parquet:
        counted: Counter = Counter()
        for chunk in reader.chunks([column]):
            counted.update(chunk.cells(column))
        return list(counted), list(counted.values())
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = []
    for chunk in reader.chunks([column]):
        found = pc.value_counts(name_array(chunk, column))
        parts.append(pa.table({"value": found.field("values"), "count": found.field("counts")}))
        if len(parts) > 8:  # fold the partial counts, so they never outgrow the distinct names
            parts = [pa.concat_tables(parts).group_by("value").aggregate([("count", "sum")])
                     .rename_columns(["value", "count"])]
    if not parts:
        return [], []
    total = pa.concat_tables(parts).group_by("value").aggregate([("count", "sum")]).rename_columns(["value", "count"])
    return total.column("value").to_pylist(), total.column("count").to_pylist()


def answer_codes(reader: TableReader, column: str, values: list, answer_of: np.ndarray,
                 distinct: bool) -> Callable[[TextChunk | ArrowChunk, int], Sequence[int]]:
    """For a chunk of rows (starting at data row `first`, from 0), the answer each row gets: its cell's."""
    if not distinct:  # one entry per row, in order
        return lambda chunk, first: answer_of[first : first + len(chunk)]
    if not reader.parquet:
        lookup = dict(zip(values, answer_of.tolist(), strict=True))
        return lambda chunk, first: [lookup[cell] for cell in chunk.cells(column)]
    import pyarrow as pa
    import pyarrow.compute as pc

    value_set = pa.array(values, type=pa.string())

    def codes(chunk: ArrowChunk, first: int) -> np.ndarray:
        found = pc.index_in(name_array(chunk, column), value_set=value_set, skip_nulls=False)
        return answer_of[found.to_numpy(zero_copy_only=False)]

    return codes


def name_array(chunk: ArrowChunk, column: str) -> Any:
    """The name column of a Parquet chunk as plain strings (a dictionary-encoded or large-string column too)."""
    import pyarrow as pa

    return chunk.batch.column(column).cast(pa.string())


def predict_table(predictor: Predictor, source: str | Path, column: str, out: IO[str] | str | Path,
                  delimiter: str | None = None, top_k: int = 1, coverage: float | None = None,
                  batch_size: int = BATCH_SIZE, explain: bool = False, distinct: bool = True,
                  **options: Any) -> TableSummary:
    """Score `source`'s `column` and write every row with prediction columns appended to `out`: a stream (text,
    with the input's delimiter) or a path (its suffix picks CSV, TSV or Parquet; it appears only when complete).
    `options` go to Predictor.predict (abstain, max_set_size, prior). `distinct=False` scores every row on its
    own: the slow reference the grouping is checked against."""
    reader = TableReader(source, "--file", delimiter)
    reader.require_text(column, f"--column {column}")
    parquet_out = isinstance(out, str | Path) and output_format(out, source) == "parquet"
    if parquet_out:
        import pyarrow as pa
    if coverage is not None:
        predictor.set_threshold(coverage)  # an unknown level fails before any output
    shape = OutputOptions(top_k, coverage, explain, predictor.label_name, predictor.normalize)
    values, counts = count_cells(reader, column, distinct)
    groups = DistinctNames.group(values, counts, predictor.normalize, markers=True, merge=distinct)
    answers = score(predictor, groups, top_k, batch_size, coverage, explain, **options)
    cells = [table_cells(answer, shape) for answer in answers]
    columns = table_columns(shape)
    unusable = int(sum(count for count, answer in zip(groups.counts.tolist(), answers, strict=True) if answer.error))
    if parquet_out:
        kinds = column_kinds(shape)
        by_column = list(zip(*cells, strict=True)) if cells else [()] * len(columns)
        added = [pa.array([typed_cell(kind, cell) for cell in values], type=arrow_type(kind))
                 for kind, values in zip(kinds, by_column, strict=True)]
    codes_of = answer_codes(reader, column, values, groups.answer_of, distinct)
    rows = 0

    def write(target: IO[str] | Path) -> None:
        nonlocal rows
        writer = TableWriter(target, reader.header, columns, output_delimiter(reader, out), parquet_out)
        for chunk in reader.chunks():
            codes = codes_of(chunk, rows)
            if parquet_out:
                taken = pa.array(np.asarray(codes, dtype=np.int64))
                writer.write(chunk, [array.take(taken) for array in added])
            else:
                writer.write(chunk, [cells[code] for code in codes])
            rows += len(chunk)
        if parquet_out and rows == 0:
            writer.write(reader.empty_chunk(), [array.slice(0, 0) for array in added])
        writer.close()

    if isinstance(out, str | Path):
        def text_file(tmp: Path) -> None:
            if parquet_out:
                write(tmp)
                return
            with open(tmp, "w", encoding="utf-8", newline="") as stream:
                write(stream)

        write_atomically(out, text_file)
    else:
        write(out)
    return TableSummary(rows, groups.scored(), unusable)


def output_delimiter(reader: TableReader, out: IO[str] | str | Path) -> str:
    """A file's own suffix decides (tab for .tsv/.tab, comma for .csv); standard output and .txt keep the
    input's delimiter (comma for Parquet)."""
    given = reader.delimiter if not reader.parquet else ","
    if isinstance(out, str | Path) and Path(out).suffix.lower() != ".txt":
        return delimiter_for(out)
    return given


def arrow_type(kind: type) -> Any:
    import pyarrow as pa

    return {float: pa.float64(), bool: pa.bool_()}.get(kind, pa.string())
