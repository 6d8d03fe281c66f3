"""Every label accounted for: one row per label of a test split, each figure with its 95 % interval, because one
accuracy figure hides the labels a model fails, and a label with 10 test names has a wide interval.

Per label: its test names, precision and recall (Wilson score intervals: binomial proportions that stay inside
[0, 1] with few names), F1 (percentile bootstrap over the test names), its one-vs-rest calibration error (does
p(label) = 0.7 mean the label 70 % of the time?), how often its names' prediction sets hold it (marginal and
class-conditional sets, each with its Wilson interval) and how often its names abstain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from nameorigin.model.artifacts import Calibration
from nameorigin.model.calibration import prediction_sets

Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile
BOOTSTRAP_SAMPLES = 1000
REPORT_LEVEL = 0.9  # the prediction-set level whose coverage the report gives per label


def served_and_compared(calibration: Calibration, level: str) -> dict[str, float | list[float]]:
    """The thresholds of both kinds of set a calibration holds at `level` (marginal; mondrian where fitted)."""
    if level not in calibration.conformal:
        return {}
    return {kind: calibration.threshold(level, kind) for kind in calibration.set_kinds(level)}


def wilson(successes: int, trials: int, z: float = Z95) -> list[float]:
    """The Wilson score interval of a binomial proportion; [0, 1] when there are no trials."""
    if trials == 0:
        return [0.0, 1.0]
    p, z2 = successes / trials, z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    # At 0 or all successes the interval touches 0 or 1 exactly (rounding would leave the estimate outside it).
    return [0.0 if successes == 0 else max(0.0, centre - half), 1.0 if successes == trials else min(1.0, centre + half)]


def f1_from_confusion(confusion: torch.Tensor) -> torch.Tensor:
    """[..., k, k] confusion (rows true) -> [..., k] F1; 0 where a label is neither true nor predicted."""
    tp = confusion.diagonal(dim1=-2, dim2=-1).double()
    denominator = confusion.sum(-1).double() + confusion.sum(-2).double()
    return torch.where(denominator > 0, 2 * tp / denominator.clamp_min(1), torch.zeros_like(tp))


def bootstrap_f1(truth: torch.Tensor, preds: torch.Tensor, k: int, samples: int = BOOTSTRAP_SAMPLES,
                 seed: int = 0) -> torch.Tensor:
    """[k, 2]: each label's 2.5 and 97.5 percentiles of F1 over test splits resampled with replacement."""
    n = len(truth)
    if n == 0:
        return torch.zeros(k, 2)
    # F1 depends only on the (truth, prediction) pairs, not their order: sorted, the same test split gives the same
    # interval however its names were batched.
    cells = (truth * k + preds).sort().values
    truth, preds = cells // k, cells % k
    generator = torch.Generator().manual_seed(seed)
    draws = torch.randint(n, (samples, n), generator=generator)
    cells = truth[draws] * k + preds[draws] + torch.arange(samples)[:, None] * k * k
    confusion = torch.bincount(cells.flatten(), minlength=samples * k * k).view(samples, k, k)
    return f1_from_confusion(confusion).quantile(torch.tensor([0.025, 0.975], dtype=torch.float64), dim=0).t()


def one_vs_rest_ece(probs: torch.Tensor, hits: torch.Tensor, bins: int) -> float:
    """Expected calibration error of one label's probability against whether the name is that label."""
    index = (probs.double() * bins).long().clamp(max=bins - 1)
    confidence = torch.bincount(index, probs.double(), minlength=bins)
    accuracy = torch.bincount(index, hits.double(), minlength=bins)
    return float((confidence - accuracy).abs().sum() / max(len(probs), 1))


def label_report(probs: torch.Tensor, truth: torch.Tensor, labels: Sequence[str],
                 thresholds: dict[str, float | Sequence[float]], abstained: torch.Tensor | None = None,
                 bins: int = 15) -> list[dict[str, Any]]:
    """One row per label. `thresholds`: the prediction sets to check, by kind ("marginal": one threshold,
    "mondrian": one per label) at one coverage level; `abstained`: [N] bool, when the model has a rule."""
    k = len(labels)
    preds = probs.argmax(-1)
    confusion = torch.bincount(truth * k + preds, minlength=k * k).view(k, k)
    f1, f1_interval = f1_from_confusion(confusion), bootstrap_f1(truth, preds, k)
    covered = {kind: prediction_sets(probs, threshold).gather(1, truth[:, None]).squeeze(1)
               for kind, threshold in thresholds.items()}
    rows = []
    for j, label in enumerate(labels):
        mine = truth == j
        names, predicted, right = int(mine.sum()), int(confusion[:, j].sum()), int(confusion[j, j])
        row: dict[str, Any] = {
            "label": label, "test_names": names, "predicted": predicted,
            "precision": right / predicted if predicted else None, "precision_95": wilson(right, predicted),
            "recall": right / names if names else None, "recall_95": wilson(right, names),
            "f1": float(f1[j]), "f1_95": [float(x) for x in f1_interval[j]],
            "ece_one_vs_rest": one_vs_rest_ece(probs[:, j], mine, bins)}
        for kind, hits in covered.items():
            held = int(hits[mine].sum())
            row[f"set_coverage_{kind}"] = held / names if names else None
            row[f"set_coverage_{kind}_95"] = wilson(held, names)
        if abstained is not None:
            row["abstained"] = float(abstained[mine].double().mean()) if names else None
        rows.append(row)
    return rows


def weakest_by_recall(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The label with the lowest recall among those with test names (ties: the one with more names)."""
    scored = [row for row in rows if row["recall"] is not None]
    return min(scored, key=lambda row: (row["recall"], -row["test_names"])) if scored else None


def interval(value: float | None, bounds: list[float]) -> str:
    return "n/a" if value is None else f"{value:.3f} [{bounds[0]:.3f}, {bounds[1]:.3f}]"


def report_table(rows: list[dict[str, Any]], label_word: str = "label") -> list[str]:
    """The rows as a Markdown table (the model card, and `nameorigin evaluate`'s text)."""
    kinds = [kind for kind in ("marginal", "mondrian") if rows and f"set_coverage_{kind}" in rows[0]]
    named = {"marginal": "marginal", "mondrian": "class-conditional"}
    abstains = bool(rows) and "abstained" in rows[0]
    head = [label_word, "test names", "precision", "recall", "F1", "ECE (one vs rest)",
            *(f"{REPORT_LEVEL * 100:g} % set holds it ({named[kind]})" for kind in kinds),
            *(["abstained"] if abstains else [])]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["label"], str(row["test_names"]), interval(row["precision"], row["precision_95"]),
                 interval(row["recall"], row["recall_95"]), interval(row["f1"], row["f1_95"]),
                 f"{row['ece_one_vs_rest']:.3f}",
                 *(interval(row[f"set_coverage_{kind}"], row[f"set_coverage_{kind}_95"]) for kind in kinds),
                 *(["n/a" if row["abstained"] is None else f"{row['abstained']:.1%}"] if abstains else [])]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def weakest_line(rows: list[dict[str, Any]], label_word: str = "label") -> str | None:
    """One sentence naming the label with the lowest recall, with its interval and test names."""
    weakest = weakest_by_recall(rows)
    if weakest is None:
        return None
    recall = interval(weakest["recall"], weakest["recall_95"])
    return (f"Weakest {label_word} by recall: {weakest['label']}, recall {recall} (95 % interval) over "
            f"{weakest['test_names']} test names.")
