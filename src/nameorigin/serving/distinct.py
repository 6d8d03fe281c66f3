"""Each distinct name scored once. A population table holds far fewer names than rows (a surname is shared by
many people), and an answer depends only on the name after normalization: so cells are keyed by their normalized
name, each key scored once, and the answers joined back onto every row by the caller.

`--prior estimate` weights each name by its row count, so EM sees the same mix as scoring every row would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from nameorigin.base.tables import is_missing
from nameorigin.base.textnorm import normalize_name
from nameorigin.serving.abstain import UNUSABLE
from nameorigin.serving.options import BATCH_SIZE, PredictOptions
from nameorigin.serving.predict import Prediction, Predictor
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

    def estimate_prior(self, predictor: Predictor, batch_size: int = BATCH_SIZE) -> torch.Tensor:
        """The label mix of all the rows: EM over the distinct names, each weighted by its row count."""
        names = [(key, int(count)) for key, count in zip(self.keys, self.counts, strict=True) if isinstance(key, str)]
        return predictor.estimate_prior([key for key, _ in names], batch_size, counts=[n for _, n in names])


def score(predictor: Predictor, keys: Sequence[str | tuple[str]], options: PredictOptions,
          progress: Progress | None = None) -> list[Prediction]:
    """One answer per key (cell_key), in order: a name's prediction, or a marker's unusable-input answer. The
    prior must be fixed here (a tensor, "uniform" or a file): an estimate is the caller's, over all rows."""
    options = options.for_model(predictor)  # a prior file read once, not once a chunk
    real = [j for j, key in enumerate(keys) if isinstance(key, str)]
    answers: list[Prediction | None] = [None] * len(keys)
    for start in range(0, len(real), SCORE_CHUNK):
        rows = real[start : start + SCORE_CHUNK]
        block = predictor.predict([keys[j] for j in rows], options)
        if progress is not None:
            progress.advance(len(rows))
        for j, answer in zip(rows, block, strict=True):
            answers[j] = answer
    for j, key in enumerate(keys):
        if not isinstance(key, str):
            reason = f"missing-value marker {key[0]!r}"
            answers[j] = Prediction(key[0], [], reason, reason_code=UNUSABLE, reason=reason)
    return answers
