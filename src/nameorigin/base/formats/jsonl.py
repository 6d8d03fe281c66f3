"""JSON Lines (.jsonl, .ndjson): one JSON object per line, read and written a chunk of lines at a time with the
standard library. The header is the first object's keys; a later object may leave a key out (a null) but not
bring a new one. Values are kept as they are: a scored table's lines are the input's objects with the prediction
fields added, numbers as numbers and flags as booleans."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from typing import IO, Any

from nameorigin.base.errors import UserError
from nameorigin.base.formats.common import TableFormat, TextChunk, typed_value

CHUNK_ROWS = 4096


class JsonChunk(TextChunk):
    """Objects of consecutive lines, each as a list of values in the header's order (None where left out): a
    TextChunk whose cells keep their JSON types."""

    def cells(self, column: str) -> list[Any]:
        """A column as text (None for a null): what a name or a label cell is, whatever JSON type holds it."""
        index = self.header.index(column)
        return [None if row[index] is None else as_text(row[index]) for row in self.rows]

    def text_rows(self) -> list[list[str]]:
        return [["" if value is None else as_text(value) for value in row] for row in self.rows]

    def arrow(self) -> Any:
        import pyarrow as pa

        return pa.Table.from_pylist(self.records()) if self.rows else \
            pa.table({name: pa.array([], pa.string()) for name in self.header})


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class JsonLines(TableFormat):
    name = "JSON Lines"
    suffixes = (".jsonl", ".ndjson")

    @classmethod
    def header(cls, reader: Any) -> list[str]:
        first = reader.guarded(lambda: next(iter(cls.objects(reader)), None))
        return [] if first is None else list(first[1])

    @classmethod
    def objects(cls, reader: Any) -> Iterator[tuple[int, dict[str, Any]]]:
        """(line number, object) for each non-blank line, streamed; a line that is not an object is refused."""
        with reader.guarded(lambda: open(reader.path, encoding="utf-8-sig")) as stream:
            for number, line in enumerate(stream, start=1):
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)
                except ValueError as error:
                    raise UserError(f"{reader.setting}: line {number} is not JSON ({error.msg}): write one object "
                                    "per line") from None
                if not isinstance(value, dict):
                    raise UserError(f"{reader.setting}: line {number} is a {type(value).__name__}, not an object: "
                                    "write one object per line, e.g. {\"name\": \"Nakamura\"}")
                yield number, value

    @classmethod
    def chunks(cls, reader: Any, columns: Sequence[str] | None, rows: int | None) -> Iterator[JsonChunk]:
        header, known = reader.header, set(reader.header)
        objects = iter(reader.guarded(lambda: cls.objects(reader)))
        while block := reader.guarded(lambda: list(itertools.islice(objects, rows or CHUNK_ROWS))):
            for number, value in block:
                if not value.keys() <= known:
                    extra = ", ".join(sorted(value.keys() - known))
                    raise UserError(f"{reader.setting}: line {number} has {extra}, which the first line has not: "
                                    "give the first object every key (null where it has no value)")
            yield JsonChunk(header, [[value.get(key) for key in header] for _, value in block],
                            [number for number, _ in block])

    @classmethod
    def empty_chunk(cls, reader: Any) -> JsonChunk:
        return JsonChunk(reader.header, [], [])

    @classmethod
    def writer(cls, target: IO[str], header: list[str], added: list[str], kinds: list[type],
               delimiter: str) -> JsonLinesWriter:
        return JsonLinesWriter(target, added, kinds)


class JsonLinesWriter:
    """Each row as one object: the input's own values, then the appended columns typed by their kinds (a number,
    a flag, text; an empty cell a null)."""

    def __init__(self, target: IO[str], added: list[str], kinds: list[type]):
        self.target, self.added, self.kinds = target, added, kinds

    def write(self, chunk: Any, added: list[list[str]]) -> None:
        lines = []
        for record, cells in zip(chunk.records(), added, strict=True):
            for name, kind, cell in zip(self.added, self.kinds, cells, strict=True):
                record[name] = typed_value(kind, cell) if cell != "" or kind is not str else None
            lines.append(json.dumps(record, ensure_ascii=False) + "\n")
        self.target.writelines(lines)

    def close(self, failed: bool) -> None:
        pass
