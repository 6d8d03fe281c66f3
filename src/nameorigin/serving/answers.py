"""The answers to many names, as columns: Predictor.answer's result. A table, a frame or a Ray batch turns the
columns into its own columns without a Python object per name (nameorigin.serving.schema.answer_columns); the text
and JSON outputs of a few names take one Prediction each (`predictions`).

Every per-name attribute of a Prediction that the prediction schema reads (reason_code, reason, abstained,
prediction_set, explanation) is here too, as an array over the names: the schema's fields read either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from nameorigin.model.explain import NameExplanation
from nameorigin.serving.abstain import UNUSABLE
from nameorigin.serving.schema import as_json


@dataclass(slots=True)
class Prediction:
    name: str
    predictions: list[tuple[str, float]] = field(default_factory=list)  # (language, probability), best first
    error: str | None = None
    prediction_set: list[str] | None = None  # with a coverage level: the conformal set, most probable first
    label_titles: dict[str, str] | None = None  # a country model's ISO code -> country name (JSON: label_name)
    label_name: str = "language"  # what a label is called (data.label_name): the JSON key of each label
    explanation: NameExplanation | None = None  # with explain=True: why the top label
    # Why it abstains (the scores stay): unusable_input, unknown_characters, out_of_distribution or large_set.
    reason_code: str | None = None
    reason: str | None = None

    @property
    def abstained(self) -> bool:
        return self.reason_code is not None

    def as_dict(self) -> dict:
        """The JSON answer: every field of the prediction schema that this answer holds (serving/schema.py)."""
        return as_json(self)


ARRAYS = ("errors", "top_index", "top_probability", "reason_code", "reason", "prediction_set", "explanation")


@dataclass
class Answers:
    """One row per name. `top_index` [names, k]: label indices best first, -1 where there is none (an unusable
    name, or a rank past the labels); `top_probability` the same shape, NaN there. The object arrays hold None
    where the field is absent."""

    names: Sequence[str]
    labels: Sequence[str]
    errors: np.ndarray  # why a name cannot be answered, or None
    top_index: np.ndarray
    top_probability: np.ndarray
    reason_code: np.ndarray
    reason: np.ndarray
    prediction_set: np.ndarray
    explanation: np.ndarray
    estimated_prior: torch.Tensor | None = None  # prior="estimate": the label mix found in these names

    @property
    def abstained(self) -> np.ndarray:
        return np.not_equal(self.reason_code, None)

    def __len__(self) -> int:
        return len(self.errors)

    @classmethod
    def concat(cls, parts: Sequence[Answers]) -> Answers:
        """One Answers of `parts` (non-empty, of one model and one set of options), in order."""
        first = parts[0]
        return cls([name for part in parts for name in part.names], first.labels,
                   *(np.concatenate([getattr(part, key) for part in parts]) for key in ARRAYS))

    def refuse(self, rows: np.ndarray, reasons: Sequence[str]) -> None:
        """Make `rows` unusable with these reasons (a missing-value marker's answer)."""
        self.errors[rows] = self.reason[rows] = reasons
        self.reason_code[rows] = UNUSABLE
        self.top_index[rows], self.top_probability[rows] = -1, np.nan
        self.prediction_set[rows] = self.explanation[rows] = None

    def predictions(self, label_titles: dict[str, str] | None = None, label_name: str = "language") -> list[Prediction]:
        """One Prediction per name, for the outputs that write a few names at a time (text, JSON, the server)."""
        labels, ranks = self.labels, self.top_index.shape[1]
        indices, values = self.top_index.ravel().tolist(), self.top_probability.ravel().tolist()
        results = []
        for row, (name, error) in enumerate(zip(self.names, self.errors.tolist(), strict=True)):
            if error is not None:
                results.append(Prediction(name, [], error, reason_code=self.reason_code[row], reason=error))
                continue
            start = row * ranks
            ranked = [(labels[j], p) for j, p in zip(indices[start : start + ranks], values[start : start + ranks],
                                                     strict=True) if j >= 0]
            results.append(Prediction(name, ranked, None, self.prediction_set[row], label_titles, label_name,
                                      self.explanation[row], self.reason_code[row], self.reason[row]))
        return results


def scattered(count: int, rows: np.ndarray, values: Sequence | np.ndarray | None) -> np.ndarray:
    """An object array of `count` Nones with `values` at `rows`."""
    out = np.full(count, None, dtype=object)
    if values is not None and len(rows):
        out[rows] = values if isinstance(values, np.ndarray) else np.array(list(values) + [None], dtype=object)[:-1]
    return out
