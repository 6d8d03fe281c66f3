"""Which rows of a labelled table are probably mislabelled: confident learning (Northcutt et al.; the `cleanlab`
package, the optional [audit] extra) over out-of-sample probabilities. Each row's probabilities come from the
n-gram baseline (hashed character 1-4-grams, one softmax over the labels: cheap enough to fit k times) fitted on
the other folds; the folds are grouped by name, so a name listed under two labels never informs its own row.
cleanlab scores each row by self-confidence (the probability of its given label) and the suspects are the rows
scored under a fixed threshold, lowest first; or, with `cleanlab_cut`, cleanlab's own cut (the rows whose given
label the model doubts more than that label's rows are doubted on average, as many as the noise it estimates).
"""

from __future__ import annotations

import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nameorigin.base.extras import require_extra

FOLDS, EPOCHS, BATCH, LEARNING_RATE, BUCKETS = 5, 5, 512, 0.01, 2**18
MIN_UPDATES = 1000  # a small table gets more epochs: five epochs of a few batches leave the model near uniform
# Picked on the corpus with planted flips at one seed, then read at two others (docs/data-and-evaluation.md).
THRESHOLD = 0.01


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
    """[rows, labels] float32: each row's probabilities from the baseline fitted on the folds without it (grouped
    by name, stratified by label)."""
    require_extra("sklearn", "bench", "nameorigin audit")
    from sklearn.model_selection import StratifiedGroupKFold

    from nameorigin.training.baseline import hashed_ngrams

    names = [name for name, _ in pairs]
    index = {label: i for i, label in enumerate(labels)}
    given = np.array([index[label] for _, label in pairs])
    features = hashed_ngrams(BUCKETS).transform(names).astype(np.float32)
    groups = np.unique(np.array(names, dtype=object), return_inverse=True)[1]
    probabilities = np.zeros((len(pairs), len(labels)), dtype=np.float32)
    splitter = StratifiedGroupKFold(n_splits=folds, shuffle=True, random_state=seed)
    with warnings.catch_warnings():  # a label with fewer rows than folds is fine: it is held out where it can be
        warnings.filterwarnings("ignore", "The least populated class", UserWarning)
        splits = list(splitter.split(np.zeros(len(given)), given, groups))
    for fold, (train, held) in enumerate(splits):
        weights, bias = fit_softmax(features[train], given[train], len(labels), seed + fold)
        probabilities[held] = softmax_probabilities(weights, bias, features[held])
    return probabilities


def bags(features: Any) -> tuple[Any, Any, Any]:
    """A CSR matrix as EmbeddingBag's flat input: column ids, each row's first position, the values."""
    import torch

    return (torch.from_numpy(features.indices.astype(np.int64)),
            torch.from_numpy(features.indptr[:-1].astype(np.int64)), torch.from_numpy(features.data))


def fit_softmax(features: Any, given: np.ndarray, classes: int, seed: int) -> tuple[Any, Any]:
    """Multinomial logistic regression on the hashed n-grams (one softmax over every label, where scikit-learn's
    SGD fits one binary model per label: 175 of them on NaNa), by Adam on shuffled batches: the n-gram table and
    the bias."""
    import torch

    torch.manual_seed(seed)
    model = torch.nn.EmbeddingBag(features.shape[1], classes, mode="sum", sparse=True)
    torch.nn.init.zeros_(model.weight)
    bias = torch.nn.Parameter(torch.zeros(classes))
    # Sparse: a batch touches a few thousand of the 2^18 n-gram rows, and only those are updated.
    optimizers = [torch.optim.SparseAdam(model.parameters(), lr=LEARNING_RATE),
                  torch.optim.Adam([bias], lr=LEARNING_RATE)]
    targets = torch.from_numpy(given)
    order = np.random.default_rng(seed)
    batches = max(len(given) // BATCH, 1)
    for _ in range(max(EPOCHS, -(-MIN_UPDATES // batches))):
        for rows in np.array_split(order.permutation(len(given)), batches):
            logits = model(*bags(features[rows])) + bias
            loss = torch.nn.functional.cross_entropy(logits, targets[rows])
            for optimizer in optimizers:
                optimizer.zero_grad(set_to_none=True)
            loss.backward()
            for optimizer in optimizers:
                optimizer.step()
    return model, bias


def softmax_probabilities(model: Any, bias: Any, features: Any) -> np.ndarray:
    import torch

    with torch.no_grad():
        chunks = [torch.softmax(model(*bags(features[start:start + BATCH * 8])) + bias, dim=1)
                  for start in range(0, features.shape[0], BATCH * 8)]
    return torch.cat(chunks).numpy()


def audit(pairs: list[tuple[str, str]], folds: int = FOLDS, seed: int = 0, threshold: float = THRESHOLD,
          cleanlab_cut: bool = False) -> Audit:
    """Out-of-sample probabilities for every row, cleanlab's self-confidence scores, and the cut: the rows scored
    under `threshold`, or with `cleanlab_cut` cleanlab's label-issue finder; most doubtful first."""
    cleanlab = require_extra("cleanlab.filter", "audit", "nameorigin audit")
    from cleanlab.rank import get_label_quality_scores

    labels = sorted({label for _, label in pairs})
    start = time.perf_counter()
    probabilities = out_of_sample(pairs, labels, folds, seed)
    fitted = time.perf_counter()
    found = Audit(pairs, labels, probabilities, np.zeros(0, dtype=np.int64))
    given = found.given()
    if cleanlab_cut:
        found.suspects = np.asarray(cleanlab.find_label_issues(given, probabilities,
                                                               return_indices_ranked_by="self_confidence"))
    else:
        quality = get_label_quality_scores(given, probabilities, method="self_confidence")
        doubted = np.flatnonzero(quality < threshold)
        found.suspects = doubted[np.argsort(quality[doubted], kind="stable")]
    found.seconds = {"probabilities": fitted - start, "find": time.perf_counter() - fitted}
    return found
