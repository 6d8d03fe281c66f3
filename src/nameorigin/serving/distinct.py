"""Each distinct name scored once. A population table holds far fewer names than rows (a surname is shared by
many people), and an answer depends only on the name after normalization: so cells are keyed by their normalized
name, each key scored once, and the answers joined back onto every row by the caller.

`--prior estimate` weights each name by its row count, so EM sees the same mix as scoring every row would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from nameorigin.base.tables import MISSING_MARKERS, is_missing
from nameorigin.base.textnorm import normalize_name
from nameorigin.serving.answers import Answers
from nameorigin.serving.options import BATCH_SIZE, PredictOptions
from nameorigin.serving.predict import Predictor
from nameorigin.serving.progress import Progress

SCORE_CHUNK = 65_536  # distinct names predicted at a time: the answers' memory stays flat


def cell_key(cell: object, normalize: str, markers: bool = True) -> str | tuple[str]:
    """What decides a cell's answer: its normalized name ("" for a null), or, for a missing-value marker ("NaN",
    "NULL", ...) when `markers`, the marker itself, kept apart from a name that spells it."""
    if cell is None:
        return ""
    if markers and is_missing(cell):
        return (cell,)
    return normalize_name(str(cell), normalize)


ASCII_SPACE = " \t\n\x0b\x0c\r\x1c\x1d\x1e\x1f"  # what str.strip() takes off an ASCII string


def tagged_keys(cells: Any, normalize: str, markers: bool = True) -> Any:
    """cell_key of every cell of a pyarrow string array, as one string array: "n" + the normalized name, or "m" +
    the missing-value marker (untag() gives the keys). ASCII cells are trimmed by pyarrow; the rest go through
    normalize_name itself, so a key is the same whichever way it was made."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cells = cells.fill_null("")
    names = pc.ascii_trim(cells, ASCII_SPACE)
    other = np.flatnonzero(~pc.string_is_ascii(cells).to_numpy(zero_copy_only=False))
    if len(other):
        mask = np.zeros(len(cells), dtype=bool)
        mask[other] = True
        fixed = [normalize_name(cell, normalize) for cell in cells.take(pa.array(other)).to_pylist()]
        names = pc.replace_with_mask(names, pa.array(mask), pa.array(fixed, pa.string()))
    tagged = pc.binary_join_element_wise("n", names, "")
    if not markers:
        return tagged
    is_marker = pc.is_in(cells, value_set=pa.array(sorted(MISSING_MARKERS), pa.string()))
    return pc.if_else(is_marker, pc.binary_join_element_wise("m", cells, ""), tagged)


def untag(tagged: Sequence[str]) -> list[str | tuple[str]]:
    return [text[1:] if text[0] == "n" else (text[1:],) for text in tagged]


@dataclass
class DistinctNames:
    """The keys a column's distinct cells come to: `answer_of[i]` is the entry of `keys` that the i-th cell given
    to group() is answered by; `counts[j]` how many rows entry j stands for."""

    answer_of: np.ndarray
    keys: list[str | tuple[str]]
    counts: np.ndarray

    @classmethod
    def group(cls, values: Sequence, counts: Sequence[int], normalize: str, markers: bool = True) -> DistinctNames:
        """`values` (each cell once, None for a null) with their row counts."""
        entry_of: dict = {}
        answer_of = np.array([entry_of.setdefault(cell_key(value, normalize, markers), len(entry_of))
                              for value in values], dtype=np.int64)
        totals = np.bincount(answer_of, weights=np.asarray(counts, dtype=np.float64), minlength=len(entry_of))
        return cls(answer_of, list(entry_of), totals.astype(np.int64))

    def estimate_prior(self, predictor: Predictor, batch_size: int = BATCH_SIZE,
                       full_names: bool = False) -> torch.Tensor:
        """The label mix of all the rows: EM over the distinct names, each weighted by its row count."""
        names = [(key, int(count)) for key, count in zip(self.keys, self.counts, strict=True) if isinstance(key, str)]
        return predictor.estimate_prior([key for key, _ in names], batch_size, counts=[n for _, n in names],
                                        full_names=full_names)


def score(predictor: Predictor, keys: Sequence[str | tuple[str]], options: PredictOptions,
          progress: Progress | None = None) -> Answers:
    """The answers to `keys` (cell_key), in order, as columns: a name's prediction, or a marker's unusable-input
    answer. The prior must be fixed here (a tensor, "uniform" or a file): an estimate is the caller's, over all
    rows."""
    options = options.for_model(predictor)  # a prior file read once, not once a chunk
    names = [key if isinstance(key, str) else key[0] for key in keys]
    markers = np.array([not isinstance(key, str) for key in keys], dtype=bool)
    parts = []
    for start in range(0, len(keys), SCORE_CHUNK):
        block = ["" if marker else name for name, marker in
                 zip(names[start : start + SCORE_CHUNK], markers[start : start + SCORE_CHUNK], strict=True)]
        parts.append(predictor.answer(block, options))
        if progress is not None:
            progress.advance(len(block))
    answers = Answers.concat(parts) if parts else predictor.answer([], options)
    answers.names = names
    rows = np.flatnonzero(markers)
    answers.refuse(rows, [f"missing-value marker {names[row]!r}" for row in rows])
    return answers
