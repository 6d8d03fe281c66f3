"""Predictions for a column of a CSV/TSV table, streamed: every input row comes back, in order, with its own
columns untouched and prediction columns appended. A blank or unusable cell gets empty prediction columns and a
reason; no row is ever dropped or shifted."""

from __future__ import annotations

import csv
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from nameorigin.base.errors import UserError
from nameorigin.serving.abstain import UNUSABLE
from nameorigin.serving.predict import BATCH_SIZE, Prediction, Predictor
from nameorigin.serving.schema import OutputOptions, table_cells, table_columns

CHUNK_ROWS = 4096  # rows read, predicted and written at a time: memory stays flat whatever the file size
# What spreadsheets, pandas and databases write for an empty cell: a missing value, not a name.
MISSING_MARKERS = {"NaN", "nan", "NULL", "null", "N/A", "#N/A", "None", "<NA>"}


def delimiter_for(path: str | Path, given: str | None = None) -> str:
    if given:
        return "\t" if given in ("tab", "\\t") else given
    return "\t" if Path(path).suffix.lower() in (".tsv", ".tab") else ","


def read_rows(stream: TextIO, delimiter: str) -> Iterator[list[str]]:
    csv.field_size_limit(2**31 - 1)  # a huge cell is an unusable name to explain, not a crash
    yield from csv.reader(stream, delimiter=delimiter)


def as_name(cell: str) -> str:
    return "" if cell in MISSING_MARKERS else cell  # a missing-value marker is no name, whatever it spells


def name_cells(source: str | Path, separator: str, index: int) -> Iterator[str]:
    """The column's cells, read again from the top (a first pass, for --prior estimate)."""
    with open(source, encoding="utf-8-sig", newline="") as stream:
        rows = read_rows(stream, separator)
        next(rows, None)
        yield from (as_name(row[index]) if index < len(row) else "" for row in rows)


def predict_table(predictor: Predictor, source: str | Path, column: str, out: TextIO, delimiter: str | None = None,
                  top_k: int = 1, coverage: float | None = None, batch_size: int = BATCH_SIZE,
                  explain: bool = False, **options: object) -> int:
    """Stream `source` to `out` with prediction columns appended; returns the number of data rows written.
    `options` go to Predictor.predict (abstain, max_set_size, prior)."""
    separator = delimiter_for(source, delimiter)
    if coverage is not None:
        predictor.set_threshold(coverage)  # an unknown level fails before any output
    try:
        with open(source, encoding="utf-8-sig", newline="") as stream:  # utf-8-sig drops a leading BOM
            rows = read_rows(stream, separator)
            header = next(rows, None)
            if not header:
                raise UserError(f"--file {source} has no header row: the first line must name the columns")
            if column not in header:
                raise UserError(f"--column {column!r} is not in the header of {source}: choose one of "
                                   f"{', '.join(map(repr, header))}")
            index, width = header.index(column), len(header)
            if options.get("prior") == "estimate":  # one mix for the whole table, found before any row is written
                options["prior"] = predictor.estimate_prior(name_cells(source, separator, index), batch_size)
            writer = csv.writer(out, delimiter=separator, lineterminator="\n")
            shape = OutputOptions(top_k, coverage, explain, predictor.label_name, predictor.normalize)
            writer.writerow([*header, *table_columns(shape)])
            written = 0
            while chunk := list(itertools.islice(rows, CHUNK_ROWS)):
                chunk = [row + [""] * (width - len(row)) for row in chunk]  # short rows keep the columns aligned
                cells = [row[index] for row in chunk]
                answers = predictor.predict([as_name(cell) for cell in cells], top_k, batch_size, coverage, explain,
                                            **options)
                for row, cell, answer in zip(chunk, cells, answers, strict=True):
                    if cell in MISSING_MARKERS:
                        reason = f"missing-value marker {cell!r}"
                        answer = Prediction(cell, [], reason, reason_code=UNUSABLE, reason=reason)
                    writer.writerow([*row, *table_cells(answer, shape)])
                written += len(chunk)
    except FileNotFoundError:
        raise UserError(f"--file {source} does not exist: pass an existing CSV or TSV file") from None
    except (IsADirectoryError, PermissionError) as error:  # not OSError: a closed stdout must reach the caller
        raise UserError(f"--file {source} cannot be read ({error.strerror}): pass a CSV or TSV file") from None
    except UnicodeDecodeError as error:
        raise UserError(f"--file {source} is not UTF-8 ({error.reason}): re-save it as UTF-8") from None
    except csv.Error as error:
        raise UserError(f"--file {source} is not a readable table ({error}): check its quoting") from None
    return written
