"""Which rows of a labelled table are probably mislabelled: confident learning (Northcutt et al.; the `cleanlab`
package, the optional [audit] extra) over out-of-sample probabilities. Each row's probabilities come from a model
fitted on the other folds (MODELS): by default the project's n-gram linear model (nameorigin.model.ngram_linear:
hashed character 1-4-grams, one softmax over the labels, fitted by batches: cheap enough to fit k times), or the
project's own network (nameorigin.analysis.crossfit); the folds are grouped by name, so a name listed under two
labels never informs its own row. Self-confidence is the probability of a row's given label; the cut (CUTS, one
entry per way to choose) says which rows are suspects:
- "mixture" (the default; nameorigin.analysis.relabelling): each given label is read as the model's answer or a
  relabelling, at random or to a label the model confuses with the row's own; the model's temperature and both rates
  are fitted by maximum likelihood, and the rows most likely relabelled are flagged, as many as maximise the expected
  F1. The count follows the table (its labels, the model's accuracy, the noise), where a fixed threshold fitted only
  the corpus it was picked on and cleanlab's estimates counted the model's own mistakes as errors
  (docs/data-and-evaluation.md);
- "threshold": the rows under a fixed probability (`--threshold`);
- "estimate": as many as cleanlab estimates are mislabelled (`cleanlab.count.num_label_issues`, from the
  confident joint: per-label thresholds, each label's mean self-confidence), the rows of lowest self-confidence;
- "noise_rate" and "confident": cleanlab's own filters (`find_label_issues` by noise rate, or by confident learning's
  off-diagonal), which choose the rows as well as their number.
"""

from __future__ import annotations

import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nameorigin.analysis.relabelling import relabelling
from nameorigin.base.extras import require_extra
from nameorigin.model import ngram_linear
from nameorigin.model.ngram import OLD_HASH

FOLDS, EPOCHS, BUCKETS = 5, 5, 2**18  # five epochs of nameorigin.model.ngram_linear's batch fit (more on a small table)
# The audit's recorded precision and recall (docs/results/audit_*.json) were measured with the polynomial n-gram
# hash; under the mixed one the planted test finds 10 of 12 moved names where it found 11, so the audit moves to it
# only with its tables measured again.
AUDIT_HASH = OLD_HASH
# Past this many training rows a fold fits three epochs: on a NaNa fold (890k rows) the held-out accuracy reads
# 0.5812 after three and 0.5829 after five, and the whole table's audit is mostly these fits.
LARGE, LARGE_EPOCHS = 500_000, 3
THRESHOLD = 0.01  # the "threshold" cut's, picked on the corpus with planted flips at one seed
MODEL = "ngram"  # seconds where the network takes minutes a fold, for little gain on planted flips (MODELS, docs)


def lowest(quality: np.ndarray, count: int) -> np.ndarray:
    """The `count` rows of lowest self-confidence, lowest first."""
    return np.argsort(quality, kind="stable")[:count]


def by_threshold(given: np.ndarray, probabilities: np.ndarray, threshold: float) -> np.ndarray:
    quality = probabilities[np.arange(len(given)), given]
    return lowest(quality, int((quality < threshold).sum()))


def by_estimate(given: np.ndarray, probabilities: np.ndarray, threshold: float) -> np.ndarray:
    from cleanlab.count import num_label_issues

    return lowest(probabilities[np.arange(len(given)), given], num_label_issues(given, probabilities))


def by_filter(kind: str) -> Callable[[np.ndarray, np.ndarray, float], np.ndarray]:
    def cut(given: np.ndarray, probabilities: np.ndarray, threshold: float) -> np.ndarray:
        from cleanlab.filter import find_label_issues

        return np.asarray(find_label_issues(given, probabilities, filter_by=kind,
                                            return_indices_ranked_by="self_confidence"), dtype=np.int64)
    return cut


def by_mixture(given: np.ndarray, probabilities: np.ndarray, threshold: float) -> np.ndarray:
    return relabelling(given, probabilities).suspects()


# How many rows are suspects, by name: each maps (given labels, probabilities, threshold) to rows, most doubtful first.
CUTS: dict[str, Callable[[np.ndarray, np.ndarray, float], np.ndarray]] = {
    "mixture": by_mixture, "estimate": by_estimate, "threshold": by_threshold,
    "noise_rate": by_filter("prune_by_noise_rate"), "confident": by_filter("confident_learning")}
CUT = "mixture"  # the one that follows the tables compared best (docs/data-and-evaluation.md)


@dataclass(frozen=True)
class OutOfSample:
    """Which model gives the out-of-sample probabilities (MODELS), and for the network, train.py's overrides and
    the config folder they apply to."""

    model: str = MODEL
    train_overrides: tuple[str, ...] = ()
    config_dir: Path = Path("conf")


@dataclass
class Audit:
    """The rows given (name, label), the labels, each row's out-of-sample probabilities, and the suspects: row
    numbers, most doubtful first."""

    pairs: list[tuple[str, str]]
    labels: list[str]
    probabilities: np.ndarray
    suspects: np.ndarray
    seconds: dict[str, float] = field(default_factory=dict)
    model: str = MODEL
    cut: str = CUT
    estimate: str = ""  # what the cut read from the table, said in the summary

    def given(self) -> np.ndarray:
        return label_indices(self.pairs, self.labels)

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
        estimate = f", {self.estimate}" if self.estimate else ""
        return (f"{len(self.suspects):,} of {len(self.pairs):,} rows ({share:.1%}) look mislabelled (model "
                f"{self.model}, cut {self.cut}{estimate}); most often {confused or 'none'}")


def folds_of(pairs: list[tuple[str, str]], given: np.ndarray, folds: int, seed: int) -> list[tuple[np.ndarray,
                                                                                                  np.ndarray]]:
    """(training rows, held-out rows) of each fold: grouped by name, stratified by label."""
    require_extra("sklearn", "bench", "nameorigin audit")
    from sklearn.model_selection import StratifiedGroupKFold

    groups = np.unique(np.array([name for name, _ in pairs], dtype=object), return_inverse=True)[1]
    splitter = StratifiedGroupKFold(n_splits=folds, shuffle=True, random_state=seed)
    with warnings.catch_warnings():  # a label with fewer rows than folds is fine: it is held out where it can be
        warnings.filterwarnings("ignore", "The least populated class", UserWarning)
        return list(splitter.split(np.zeros(len(given)), given, groups))


def ngram_probabilities(pairs: list[tuple[str, str]], labels: list[str],
                        splits: list[tuple[np.ndarray, np.ndarray]], seed: int, settings: OutOfSample) -> np.ndarray:
    """[rows, labels] float32: each held-out fold's rows answered by the n-gram linear model fitted on the others."""
    import torch

    names = [name for name, _ in pairs]
    given = torch.from_numpy(label_indices(pairs, labels))
    counted = ngram_linear.NameCounts(names, buckets=BUCKETS, hashing=AUDIT_HASH)(names)  # characters only
    probabilities = np.zeros((len(pairs), len(labels)), dtype=np.float32)
    for fold, (train, held) in enumerate(splits):
        epochs = LARGE_EPOCHS if len(train) > LARGE else EPOCHS
        fitted = ngram_linear.fit_batches(rows_of(counted, train), given[train], len(labels), epochs, seed + fold)
        probabilities[held] = fitted.logits(rows_of(counted, held)).softmax(1).numpy()
    return probabilities


def network_probabilities(pairs: list[tuple[str, str]], labels: list[str],
                          splits: list[tuple[np.ndarray, np.ndarray]], seed: int, settings: OutOfSample) -> np.ndarray:
    """The project's own model's answers on each held-out fold (nameorigin.analysis.crossfit)."""
    from nameorigin.analysis.crossfit import network_probabilities as trained

    return trained(pairs, labels, splits, seed, settings.train_overrides, settings.config_dir)


# Which model answers each row out of sample, by name: each maps (pairs, labels, folds, seed, settings) to
# probabilities [rows, labels].
MODELS: dict[str, Callable[..., np.ndarray]] = {"ngram": ngram_probabilities, "network": network_probabilities}


def label_indices(pairs: list[tuple[str, str]], labels: list[str]) -> np.ndarray:
    index = {label: i for i, label in enumerate(labels)}
    return np.array([index[label] for _, label in pairs])


def out_of_sample(pairs: list[tuple[str, str]], labels: list[str], folds: int = FOLDS, seed: int = 0,
                  settings: OutOfSample | None = None) -> np.ndarray:
    """[rows, labels] float32: each row's probabilities from `settings.model` (MODELS) fitted on the folds
    without it (grouped by name, stratified by label)."""
    settings = settings or OutOfSample()
    splits = folds_of(pairs, label_indices(pairs, labels), folds, seed)
    return MODELS[settings.model](pairs, labels, splits, seed, settings)


def rows_of(counted: Any, rows: np.ndarray) -> Any:
    """Some rows of a CSR count matrix, as a CSR matrix."""
    import torch

    ids, offsets, values = ngram_linear.bags(counted, rows)
    sizes = torch.diff(torch.cat([offsets, torch.tensor([len(ids)])]))
    crow = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(sizes, 0)])
    return torch.sparse_csr_tensor(crow, ids, values, (len(rows), counted.shape[1]), check_invariants=False)


def audit(pairs: list[tuple[str, str]], folds: int = FOLDS, seed: int = 0, cut: str = CUT,
          threshold: float = THRESHOLD, settings: OutOfSample | None = None) -> Audit:
    """Out-of-sample probabilities for every row (from `settings`' model), cleanlab's self-confidence scores, and
    the suspects `cut` (CUTS) chooses from them (`threshold` for the "threshold" cut); most doubtful first."""
    require_extra("cleanlab.filter", "audit", "nameorigin audit")
    labels = sorted({label for _, label in pairs})
    start = time.perf_counter()
    probabilities = out_of_sample(pairs, labels, folds, seed, settings)
    fitted = time.perf_counter()
    found = Audit(pairs, labels, probabilities, np.zeros(0, dtype=np.int64),
                  model=(settings or OutOfSample()).model, cut=cut)
    if cut == "mixture":  # the fit once, its estimate said beside its suspects
        mixture = relabelling(found.given(), probabilities)
        found.suspects = mixture.suspects()
        found.estimate = mixture.said()
    else:
        found.suspects = CUTS[cut](found.given(), probabilities, threshold)
    found.seconds = {"probabilities": fitted - start, "find": time.perf_counter() - fitted}
    return found
