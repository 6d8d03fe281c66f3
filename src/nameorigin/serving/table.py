"""Predictions for a column of a table file (any format of nameorigin.base.formats, in and out), streamed: every
input row comes back, in order, with its own columns untouched and prediction columns appended. A blank, missing
or unusable cell gets empty prediction columns and a reason; no row is ever dropped or shifted.

One pass: each chunk's cells not seen before are scored (each distinct name once, nameorigin.serving.distinct),
and the chunk is written with its rows' answers joined on. Memory holds the answers of the distinct names and a
chunk of rows, never the table. `--prior estimate` first counts the column (a pass that reads only it), since its
one mix must come from all the rows before any is written.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from nameorigin.base.atomic import write_atomically
from nameorigin.base.formats import FORMATS, output_format
from nameorigin.base.formats.common import Chunk
from nameorigin.base.formats.delimited import delimiter_for
from nameorigin.base.tables import TableReader, TableWriter
from nameorigin.serving.distinct import DistinctNames, cell_key, score, tagged_keys, untag
from nameorigin.serving.name_columns import joined_cells, table_name_columns
from nameorigin.serving.options import TABLE_OPTIONS, PredictOptions, options_of
from nameorigin.serving.predict import Predictor
from nameorigin.serving.progress import Progress
from nameorigin.serving.schema import answer_columns, column_kinds, table_cells, table_columns

if TYPE_CHECKING:
    import torch

CHUNK_ROWS = 16_384  # rows of a delimited file read, scored and written at a time


@dataclass(frozen=True)
class TableSummary:
    rows: int  # data rows written
    names: int  # distinct usable names the model scored
    unusable: int  # rows without a usable name (blank, a missing-value marker, too long, no known character)
    estimated_prior: torch.Tensor | None = None  # prior="estimate": the label mix found in every row

    def line(self) -> str:
        return (f"scored {self.names:,} distinct names for {self.rows:,} rows "
                f"({self.unusable:,} rows without a usable name)")


class AnswerBook:
    """The answers found so far: each cell seen maps to an entry, one per distinct normalized name (or marker);
    a cell never seen before is scored when it first comes. The entries' output columns are kept as text cells
    (delimited output) or as typed pyarrow arrays (Parquet). `merge=False` gives every row its own entry: every
    row scored on its own, the reference the grouping is checked against."""

    def __init__(self, predictor: Predictor, options: PredictOptions, typed: bool, merge: bool):
        self.predictor, self.typed, self.merge = predictor, typed, merge
        self.options = options.for_model(predictor)
        self.shape = predictor.output_options(options)
        self.entry_of: dict = {}  # cell -> entry
        self.entry_by_key: dict = {}  # cell_key -> entry
        self.cells: list[list[str]] = []  # per entry, delimited output
        self.parts: list[list[Any]] = []  # per column, arrays of entries' typed values (Parquet)
        if typed:
            import pyarrow as pa

            self.parts = [[pa.array([], type=arrow_type(kind))] for kind in column_kinds(self.shape)]
        self.unusable = np.zeros(0, dtype=bool)
        self.names = 0
        self.row_entry: np.ndarray | None = None  # each row's entry, when read ahead
        self.progress: Progress | None = None  # names scored, shown on a terminal

    def entries(self, cells: list, keys: list | None = None) -> np.ndarray:
        """Each cell's entry, scoring the cells not seen before. `keys`: the cells' keys, when the caller has them
        (then the cells are distinct)."""
        if not self.merge:
            return self.add([cell_key(cell, self.predictor.normalize) for cell in cells])
        unseen = [cell for cell in dict.fromkeys(cells) if cell not in self.entry_of] if keys is None else cells
        if unseen:
            keys = [cell_key(cell, self.predictor.normalize) for cell in unseen] if keys is None else keys
            fresh = [key for key in dict.fromkeys(keys) if key not in self.entry_by_key]
            for key, entry in zip(fresh, self.add(fresh).tolist(), strict=True):
                self.entry_by_key[key] = entry
            self.entry_of.update((cell, self.entry_by_key[key]) for cell, key in zip(unseen, keys, strict=True))
        return np.fromiter((self.entry_of[cell] for cell in cells), dtype=np.int64, count=len(cells))

    def add(self, keys: list) -> np.ndarray:
        """Score `keys` and keep their answers as new entries; returns their entry numbers."""
        first = len(self.unusable)
        answers = score(self.predictor, keys, self.options, self.progress)
        failed = np.not_equal(answers.errors, None)
        self.names += int((~failed).sum())
        self.unusable = np.concatenate([self.unusable, failed])
        if self.typed:
            for part, values in zip(self.parts, answer_columns(answers, self.shape), strict=True):
                part.append(values)
        else:
            self.cells.extend(table_cells(answer, self.shape) for answer in
                              answers.predictions(self.predictor.label_titles, self.predictor.label_name))
        return np.arange(first, first + len(keys), dtype=np.int64)

    def read_ahead(self, reader: TableReader, column: str) -> None:
        """Parquet: read the name column first and score all its distinct names in one go, keeping each row's
        entry (4 bytes a row). Scoring then never shares the cores with the file's encoding, and the chunks need
        no lookups. The column comes dictionary-encoded a chunk at a time; the chunks' dictionaries are then encoded
        together, and only that one list of distinct cells is keyed and scored."""
        import pyarrow as pa
        import pyarrow.compute as pc

        dictionaries, indices = [], []
        for cells in reader.format.encoded_column(reader, column):
            # A null cell is a null index: it joins the dictionary as one more (null) entry.
            dictionary = cells.dictionary.cast(pa.string())
            index = cells.indices.fill_null(len(dictionary)) if cells.null_count else cells.indices
            dictionaries.append(pa.concat_arrays([dictionary, pa.nulls(1, pa.string())]))
            indices.append(index.to_numpy(zero_copy_only=False))
        together = pc.dictionary_encode(pa.chunked_array(dictionaries, pa.string()).combine_chunks(),
                                        null_encoding="encode")
        cell_of = together.indices.to_numpy(zero_copy_only=False)  # chunk dictionary entry -> distinct cell
        # A fresh book: every key is new, so the distinct keys are scored as they come, no lookups kept.
        keyed = pc.dictionary_encode(tagged_keys(together.dictionary, self.predictor.normalize))
        entry_of_cell = self.add(untag(keyed.dictionary.to_pylist()))[keyed.indices.to_numpy(zero_copy_only=False)]
        starts = np.cumsum([0, *(len(d) for d in dictionaries)])
        entry_of_chunk_cell = [entry_of_cell[cell_of[start:end]].astype(np.int32)
                               for start, end in zip(starts[:-1], starts[1:], strict=True)]
        self.row_entry = np.concatenate([np.zeros(0, dtype=np.int32), *(entries[local] for entries, local in
                                                                        zip(entry_of_chunk_cell, indices,
                                                                            strict=True))])

    def rows(self, chunk: Chunk, columns: list[str], first: int) -> tuple[Any, int]:
        """The appended columns for a chunk's rows (data rows `first`... from 0): cells per row or arrays, and how
        many of the rows are unusable."""
        if self.row_entry is not None:
            codes = self.row_entry[first : first + len(chunk)]
        else:
            codes = self.entries(cells_of(chunk, columns))
        unusable = int(self.unusable[codes].sum())
        if not self.typed:
            return [self.cells[code] for code in codes.tolist()], unusable
        return self.arrays(codes), unusable

    def arrays(self, codes: np.ndarray, dictionaries: bool = True) -> list[Any]:
        """The appended columns of the rows whose entries are `codes`, as pyarrow arrays (typed books only); text
        columns dictionary-encoded unless `dictionaries` is False."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if any(len(part) > 1 for part in self.parts):
            # Text columns as dictionaries of their few distinct values (18 labels, 5 reason codes): a row then
            # costs an index, and Parquet writes the dictionary pages as they are.
            # Entries added after an earlier call (a stream of batches) join the encoded ones decoded.
            whole = [pa.concat_arrays([array.dictionary_decode() if pa.types.is_dictionary(array.type) else array
                                       for array in part]) for part in self.parts]
            self.parts = [[pc.dictionary_encode(array) if pa.types.is_string(array.type) else array]
                          for array in whole]
        taken = pa.array(codes)
        columns = [pa.DictionaryArray.from_arrays(part[0].indices.take(taken), part[0].dictionary)
                   if pa.types.is_dictionary(part[0].type) else part[0].take(taken) for part in self.parts]
        return columns if dictionaries else [column.dictionary_decode() if pa.types.is_dictionary(column.type)
                                             else column for column in columns]

    def answer_column(self, names: Any) -> np.ndarray:
        """Each cell of a pyarrow string array's entry: its distinct cells (null included) looked up once, the
        ones never seen scored."""
        import pyarrow.compute as pc

        encoded = pc.dictionary_encode(names, null_encoding="encode")
        cells = encoded.dictionary.to_pylist()
        unseen = np.array([cell not in self.entry_of for cell in cells], dtype=bool)
        keys = untag(tagged_keys(encoded.dictionary.filter(unseen), self.predictor.normalize).to_pylist())
        self.entries([cell for cell, new in zip(cells, unseen.tolist(), strict=True) if new], keys)
        return self.entries(cells)[encoded.indices.to_numpy(zero_copy_only=False)]


def arrow_type(kind: type) -> Any:
    import pyarrow as pa

    return {float: pa.float64(), bool: pa.bool_()}.get(kind, pa.string())


def cells_of(chunk: Chunk, columns: list[str]) -> list:
    """A chunk's names: its one name column's cells, or its part columns' cells joined (serving.name_columns)."""
    return chunk.cells(columns[0]) if len(columns) == 1 else joined_cells([chunk.cells(c) for c in columns])


def output_delimiter(reader: TableReader, out: IO[str] | str | Path) -> str:
    """A file's own suffix decides (tab for .tsv/.tab, comma for .csv); standard output and .txt keep the
    input's delimiter (comma for a format without one)."""
    if isinstance(out, str | Path) and Path(out).suffix.lower() != ".txt":
        return delimiter_for(out)
    return reader.delimiter


def predict_table(predictor: Predictor, source: str | Path, column: str | list[str], out: IO[str] | str | Path,
                  options: PredictOptions | None = None, delimiter: str | None = None, distinct: bool = True,
                  **settings: Any) -> TableSummary:
    """Score `source`'s `column` and write every row with prediction columns appended to `out`: a stream (text,
    with the input's delimiter) or a path (its suffix picks CSV, TSV or Parquet; it appears only when complete).
    `options` (or its fields as keywords): the best label per row by default. `distinct=False` scores every row
    on its own: the slow reference the grouping is checked against. Several columns: a name's parts, given first
    (a model trained on parts)."""
    reader = TableReader(source, "--file", delimiter)
    options = options_of(options, settings, TABLE_OPTIONS).for_model(predictor)  # fails before any output
    columns = table_name_columns(reader, column, predictor.part_names, options.full_names)
    out_format = output_format(out, source) if isinstance(out, str | Path) else FORMATS["delimited"]
    estimated = None
    if options.estimates_prior:  # one mix, from every row
        counted: Counter = Counter()
        for chunk in reader.chunks(columns):
            counted.update(cells_of(chunk, columns))
        groups = DistinctNames.group(list(counted), list(counted.values()), predictor.normalize)
        estimated = groups.estimate_prior(predictor, options.batch_size, options.full_names)
        options = replace(options, prior=estimated)
    book = AnswerBook(predictor, options, out_format.typed, distinct)
    shape = book.shape
    if reader.format.columnar and distinct and len(columns) == 1:
        with Progress("distinct names scored") as book.progress:
            book.read_ahead(reader, columns[0])
        book.progress = None
    rows = unusable = 0

    def write(target: IO[str] | Path) -> None:
        nonlocal rows, unusable
        with TableWriter(target, reader.header, table_columns(shape), output_delimiter(reader, out), out_format,
                         column_kinds(shape)) as writer, Progress("rows scored", reader.row_count()) as progress:
            for chunk in reader.chunks(rows=None if reader.format.columnar else CHUNK_ROWS):
                added, bad = book.rows(chunk, columns, rows)
                writer.write(chunk, added)
                rows, unusable = rows + len(chunk), unusable + bad
                progress.advance(len(chunk))
            if rows == 0:  # a typed format's schema is written with its first rows: here, none
                writer.write(reader.empty_chunk(), book.rows(reader.empty_chunk(), columns, 0)[0])

    if isinstance(out, str | Path):
        def into_file(tmp: Path) -> None:
            if out_format.typed:  # a typed format writes its own file
                write(tmp)
                return
            with open(tmp, "w", encoding="utf-8", newline="") as stream:
                write(stream)

        write_atomically(out, into_file)
    else:
        write(out)
    return TableSummary(rows, book.names, unusable, estimated)
