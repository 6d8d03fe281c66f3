"""Which rows of a labelled table are probably mislabelled: confident learning (Northcutt et al.; the `cleanlab`
package, the optional [audit] extra) over out-of-sample probabilities. Each row's probabilities come from the
n-gram baseline (hashed character 1-4-grams, logistic regression by SGD: cheap enough to fit k times) fitted on the
other folds; the folds are grouped by name, so a name listed under two labels never informs its own row.
cleanlab then flags the rows whose given label the other rows' model doubts more than that label's own rows are
doubted on average, ranked by self-confidence (the probability of the given label, lowest first)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nameorigin.base.extras import require_extra

FOLDS, ALPHA, EPOCHS = 5, 1e-6, 10


@dataclass
class Audit:
    """The rows given (name, label), the labels, each row's out-of-sample probabilities, and the suspects: row
    numbers, most doubtful first."""

    pairs: list[tuple[str, str]]
    labels: list[str]
    probabilities: np.ndarray
    suspects: np.ndarray
    seconds: dict[str, float] = field(default_factory=dict)

    def given(self) -> np.ndarray:
        index = {label: i for i, label in enumerate(self.labels)}
        return np.array([index[label] for _, label in self.pairs])

    def rows(self) -> list[dict[str, Any]]:
        """The suspects as table rows: row number (from 0), name, given and suggested label, and the score (the
        out-of-sample probability of the given label)."""
        given = self.given()
        return [{"row": int(row), "name": self.pairs[row][0], "given_label": self.pairs[row][1],
                 "suggested_label": self.labels[int(self.probabilities[row].argmax())],
                 "given_label_probability": round(float(self.probabilities[row, given[row]]), 6)}
                for row in self.suspects]

    def summary(self, top: int = 5) -> str:
        pairs = Counter((row["given_label"], row["suggested_label"]) for row in self.rows())
        confused = ", ".join(f"{given} -> {suggested} {n:,}" for (given, suggested), n in pairs.most_common(top))
        share = len(self.suspects) / max(len(self.pairs), 1)
        return (f"{len(self.suspects):,} of {len(self.pairs):,} rows ({share:.1%}) look mislabelled; most often "
                f"{confused or 'none'}")


def out_of_sample(pairs: list[tuple[str, str]], labels: list[str], folds: int = FOLDS,
                  seed: int = 0) -> np.ndarray:
    """[rows, labels]: each row's probabilities from the baseline fitted on the folds without it (grouped by
    name, stratified by label)."""
    require_extra("sklearn", "bench", "nameorigin audit")
    from sklearn.linear_model import SGDClassifier
    from sklearn.model_selection import StratifiedGroupKFold

    from nameorigin.training.baseline import hashed_ngrams

    names = [name for name, _ in pairs]
    index = {label: i for i, label in enumerate(labels)}
    given = np.array([index[label] for _, label in pairs])
    features = hashed_ngrams().transform(names)
    groups = np.unique(np.array(names, dtype=object), return_inverse=True)[1]
    probabilities = np.zeros((len(pairs), len(labels)))
    splitter = StratifiedGroupKFold(n_splits=folds, shuffle=True, random_state=seed)
    for train, held in splitter.split(features, given, groups):
        model = SGDClassifier(loss="log_loss", alpha=ALPHA, max_iter=EPOCHS, tol=None, random_state=seed)
        model.fit(features[train], given[train])
        probabilities[np.ix_(held, model.classes_)] = model.predict_proba(features[held])
    return probabilities


def audit(pairs: list[tuple[str, str]], folds: int = FOLDS, seed: int = 0) -> Audit:
    """Out-of-sample probabilities for every row, then cleanlab's label-issue finder over them."""
    filters = require_extra("cleanlab.filter", "audit", "nameorigin audit")
    labels = sorted({label for _, label in pairs})
    start = time.perf_counter()
    probabilities = out_of_sample(pairs, labels, folds, seed)
    fitted = time.perf_counter()
    found = Audit(pairs, labels, probabilities, np.zeros(0, dtype=np.int64))
    found.suspects = np.asarray(filters.find_label_issues(found.given(), probabilities,
                                                          return_indices_ranked_by="self_confidence"))
    found.seconds = {"probabilities": fitted - start, "find": time.perf_counter() - fitted}
    return found
