"""Each distinct name scored once. A population table holds far fewer names than rows (a surname is shared by
many people), and an answer depends only on the name after normalization: so the cells are counted, grouped by
their normalized name, each group scored once, and the answers joined back onto every row by the caller.

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
from nameorigin.serving.predict import BATCH_SIZE, Prediction, Predictor

SCORE_CHUNK = 65_536  # distinct names predicted at a time: the answers' memory stays flat


@dataclass
class DistinctNames:
    """The distinct cells of a column and the names they come to. `answer_of[i]` is the entry of `names` that
    cell `values[i]` is answered by; `counts[j]` how many rows entry j stands for; `markers[j]` the
    missing-value marker an entry stands for (None for a name)."""

    values: list
    answer_of: np.ndarray
    names: list[str]
    counts: np.ndarray
    markers: list[str | None]

    @classmethod
    def group(cls, values: Sequence, counts: Sequence[int], normalize: str, markers: bool = True,
              merge: bool = True) -> DistinctNames:
        """`values` (each cell once, None for a null) with their row counts. A missing-value marker ("NaN",
        "NULL", ...) is its own entry when `markers`; otherwise a null is the blank name. `merge=False` keeps
        one entry per value: every row scored on its own, the reference the grouping is tested against."""
        entry_of: dict[tuple[bool, str], int] = {}
        answer_of = np.empty(len(values), dtype=np.int64)
        names, markers_of, totals = [], [], []
        for i, (value, count) in enumerate(zip(values, counts, strict=True)):
            marker = markers and value is not None and is_missing(value)
            key = (True, value) if marker else (False, "" if value is None else normalize_name(str(value), normalize))
            j = entry_of.get(key) if merge else None
            if j is None:
                j = len(names)
                if merge:
                    entry_of[key] = j
                names.append(key[1])
                markers_of.append(value if marker else None)
                totals.append(0)
            totals[j] += int(count)
            answer_of[i] = j
        return cls(list(values), answer_of, names, np.array(totals, dtype=np.int64), markers_of)

    def scored(self) -> int:
        """How many distinct names go to the model (markers and blanks are answered without it)."""
        return sum(1 for name, marker in zip(self.names, self.markers, strict=True) if marker is None and name)


def score(predictor: Predictor, distinct: DistinctNames, top_k: int = 1, batch_size: int = BATCH_SIZE,
          coverage: float | None = None, explain: bool = False, abstain: bool = True,
          max_set_size: int | None = None, prior: str | torch.Tensor | None = None) -> list[Prediction]:
    """One answer per entry of `distinct.names`, in order. With prior="estimate", one mix for all of them,
    each name weighted by its row count."""
    real = [j for j, marker in enumerate(distinct.markers) if marker is None]
    names = [distinct.names[j] for j in real]
    if isinstance(prior, str) and prior == "estimate":
        prior = predictor.estimate_prior(names, batch_size, counts=distinct.counts[real].tolist())
    answers: list[Prediction | None] = [None] * len(distinct.names)
    for start in range(0, len(real), SCORE_CHUNK):
        block = predictor.predict(names[start : start + SCORE_CHUNK], top_k, batch_size, coverage, explain, abstain,
                                  max_set_size, prior)
        for j, answer in zip(real[start : start + SCORE_CHUNK], block, strict=True):
            answers[j] = answer
    for j, marker in enumerate(distinct.markers):
        if marker is not None:
            reason = f"missing-value marker {marker!r}"
            answers[j] = Prediction(marker, [], reason, reason_code=UNUSABLE, reason=reason)
    return answers
