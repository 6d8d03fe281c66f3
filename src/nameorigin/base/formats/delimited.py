"""Delimited text: CSV, TSV, and any suffix no other format claims. Parsed in Python a row at a time, so chunks are
small; the header is the first line (a BOM dropped), short rows are padded, and a huge cell is a cell."""

from __future__ import annotations

import csv
import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from nameorigin.base.formats.common import TableFormat, TextChunk

TAB_SUFFIXES = (".tsv", ".tab")
CHUNK_ROWS = 4096  # parsed a row at a time in Python: small chunks keep memory flat


def delimiter_for(path: str | Path, given: str | None = None) -> str:
    """Tab for .tsv/.tab files, else comma, unless given ('tab' or '\\t' name a tab)."""
    if given:
        return "\t" if given in ("tab", "\\t") else given
    return "\t" if Path(path).suffix.lower() in TAB_SUFFIXES else ","


class Delimited(TableFormat):
    name = "delimited text"
    suffixes = (".csv", ".txt", *TAB_SUFFIXES)

    @classmethod
    def header(cls, reader: Any) -> list[str]:
        def first_line() -> list[str]:
            with open(reader.path, encoding="utf-8-sig", newline="") as stream:  # utf-8-sig drops a BOM
                return next(csv.reader(stream, delimiter=reader.delimiter), [])

        return [cell.strip() for cell in reader.guarded(first_line)]

    @classmethod
    def chunks(cls, reader: Any, columns: Sequence[str] | None, rows: int | None) -> Iterator[TextChunk]:
        csv.field_size_limit(2**31 - 1)  # a huge cell is an unusable name to explain, not a crash
        with reader.guarded(lambda: open(reader.path, encoding="utf-8-sig", newline="")) as stream:
            parsed = csv.reader(stream, delimiter=reader.delimiter)
            numbered = ((parsed.line_num, row) for row in parsed)  # the line a row ends on, for refusals
            reader.guarded(lambda: next(numbered, None))  # the header
            while block := reader.guarded(lambda: list(itertools.islice(numbered, rows or CHUNK_ROWS))):
                yield TextChunk(reader.header, [row for _, row in block], [line for line, _ in block])

    @classmethod
    def empty_chunk(cls, reader: Any) -> TextChunk:
        return TextChunk(reader.header, [], [])

    @classmethod
    def damaged(cls, reader: Any, error: Exception) -> str | None:
        if isinstance(error, csv.Error):
            return f"{reader.setting} is not a readable table ({error}): check its quoting"
        return None

    @classmethod
    def writer(cls, target: IO[str], header: list[str], added: list[str], kinds: list[type],
               delimiter: str) -> DelimitedWriter:
        return DelimitedWriter(target, [*header, *added], delimiter)


class DelimitedWriter:
    def __init__(self, target: IO[str], columns: list[str], delimiter: str):
        self.text = csv.writer(target, delimiter=delimiter, lineterminator="\n")
        self.text.writerow(columns)

    def write(self, chunk: Any, added: list[list[str]]) -> None:
        self.text.writerows([[*row, *cells] for row, cells in zip(chunk.text_rows(), added, strict=True)])

    def close(self, failed: bool) -> None:
        pass
