"""The like-for-like half of the margin on a table with shares or weights: the model beside the n-gram baseline
fitted to the same shares and weights, on the figures the run optimizes (people-weighted accuracy with its paired
interval, and the shares' cross-entropy). nameorigin.evaluation.margin states it first."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from nameorigin.evaluation import linear_fit
from nameorigin.model.ngram_linear import LinearFit

# Training pairs past which the like-for-like comparison's LR grid is too slow and the hashed n-gram model stands in.
HASHED_PAST = 200_000


def fits_shares_or_weights(datamodule: Any) -> bool:
    """A table whose run fits label shares or row weights, not one label per name."""
    table = getattr(datamodule, "table", None)
    return table is not None and (table.shares is not None or table.weights is not None)


def fitted_targets(datamodule: Any, split: str) -> tuple[np.ndarray, np.ndarray]:
    """What the run fits on a split's names, read from the table (a refit's training set holds validation too):
    their label shares ([names, labels]; one-hot without share columns) and their weights (ones without a weight
    column)."""
    table, pairs = datamodule.table, datamodule.splits[split]
    rows = np.array([datamodule.row_of[pair] for pair in pairs], dtype=np.int64)
    column = {label: i for i, label in enumerate(datamodule.labels)}
    shares = table.shares[rows].astype(np.float64) if table.shares is not None else \
        np.eye(len(column))[[column[label] for _, label in pairs]]
    weights = table.weights[rows].astype(np.float64) if table.weights is not None else np.ones(len(rows))
    return shares, weights


def weighted_interval(gain: np.ndarray, weights: np.ndarray, samples: int = 2_000, seed: int = 0) -> list[float]:
    """95 % percentile interval of sum(w * gain) / sum(w) over resamples of the test names (gain: the model's
    person-weighted credit minus the baseline's, per name)."""
    rng, n = np.random.default_rng(seed), len(gain)
    margins = []
    for _ in range(samples):
        pick = rng.integers(0, n, n)
        margins.append((weights[pick] * gain[pick]).sum() / weights[pick].sum())
    return [float(x) for x in np.quantile(margins, [0.025, 0.975])]


def like_for_like(datamodule: Any, test_logits: torch.Tensor, refitted: bool, part: LinearFit | None,
                  max_n: int) -> dict[str, Any]:
    """A share or weighted table: the model (its decided logits on the test split) beside the n-gram baseline
    fitted to the same shares and weights, on the metrics the run optimizes: person-weighted accuracy (with its
    paired interval) and the shares' cross-entropy, both weighted by each test name's weight. The baseline is the
    linear part where there is one (fitted to the shares and weights the network fits), or else fitted here."""
    from nameorigin.evaluation.baselines import fit_share_baseline, person_weighted_accuracy

    splits = datamodule.splits
    targets, weights = {}, {}
    for split in splits:
        targets[split], weights[split] = fitted_targets(datamodule, split)
    if part is not None:
        scores = linear_fit.linear_logits(part, datamodule.datasets["test"], len(datamodule.vocab), max_n)
        baseline = {"setting": f"penalty={part.penalty:g}", "seconds": 0.0,
                    "test_probabilities": scores.softmax(-1).double().numpy()}
    else:
        names = {split: [name for name, _ in pairs] for split, pairs in splits.items()}
        baseline = fit_share_baseline(names, targets, weights, len(splits["train"]) > HASHED_PAST, refitted)
    shares, weight = targets["test"], weights["test"]
    model_p = test_logits.softmax(-1).double().numpy()
    base_p = baseline["test_probabilities"]
    credit = {side: shares[np.arange(len(shares)), p.argmax(1)] for side, p in (("model", model_p),
                                                                                  ("baseline", base_p))}

    def cross_entropy(p: np.ndarray) -> float:
        return float((weight * -(shares * np.log(np.clip(p, 1e-12, 1))).sum(1)).sum() / weight.sum())

    model_acc = person_weighted_accuracy(shares, weight, model_p.argmax(1))
    baseline_acc = person_weighted_accuracy(shares, weight, base_p.argmax(1))
    return {"setting": baseline["setting"], "model_person_acc": model_acc, "baseline_person_acc": baseline_acc,
            "person_margin": model_acc - baseline_acc,
            "interval": weighted_interval(credit["model"] - credit["baseline"], weight),
            "model_cross_entropy": cross_entropy(model_p), "baseline_cross_entropy": cross_entropy(base_p),
            "weighted": datamodule.table.weights is not None, "seconds": round(baseline["seconds"], 1)}


def like_for_like_line(result: dict[str, Any]) -> str:
    low, high = (100 * x for x in result["interval"])
    people = "people" if result["weighted"] else "names' shares"
    return (f"{100 * result['person_margin']:+.2f} points of {people}-weighted test accuracy over the n-gram "
            f"baseline fitted to the same shares and weights ({result['setting']}, {result['baseline_person_acc']:.4f}"
            f" vs {result['model_person_acc']:.4f}; 95% paired interval [{low:+.2f}, {high:+.2f}]); the shares' "
            f"cross-entropy {result['model_cross_entropy']:.4f} vs {result['baseline_cross_entropy']:.4f}")
