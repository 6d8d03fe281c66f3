"""A paired comparison of a checkpoint with the n-gram baseline on the same test names.

Two accuracies from one test split share its sampling noise, so their difference is judged on the names where
the two disagree: an exact McNemar test on those, and a paired bootstrap interval for the accuracy margin (the
test names resampled with replacement, both models scored on each resample). The baseline is fitted on the
checkpoint's own train split, with C chosen on its validation split, as nameorigin.evaluation.baselines does; for a
refit checkpoint (nameorigin.training.refit) it is then refitted on train + validation too, so both saw the same names.
"""

from __future__ import annotations

from pathlib import Path

import torch

from nameorigin.analysis.evaluate import checkpoint_splits, evaluate
from nameorigin.data.batching import is_refit
from nameorigin.evaluation.margin import compare, fitted_baseline, margin_line
from nameorigin.serving.predict import BATCH_SIZE, Predictor


def compare_with_baseline(predictor: Predictor, root: str | Path, batch_size: int = BATCH_SIZE,
                          ours: dict | None = None, kind: str = "lr") -> dict:
    """The checkpoint and the n-gram baseline on the checkpoint's test split, name by name (`ours`: the
    checkpoint's evaluate() result on root, when already computed): nameorigin.evaluation.margin's comparison, as the
    run's margin states it. kind: "lr", TF-IDF + logistic regression with C chosen on validation; "ngram", the
    project's own hashed n-gram softmax (the model's linear part fitted alone), for tables too large for the
    LR's grid."""
    splits = checkpoint_splits(predictor, root)
    ours = ours or evaluate(predictor, root, batch_size)
    baseline = fitted_baseline(kind, splits, is_refit(predictor.data_settings))
    result = compare(torch.tensor(ours["correct"]), ours["macro_f1"], baseline, kind)
    if "precision_at" in baseline:
        result.update(model_precision_at=ours["precision_at"], baseline_precision_at=baseline["precision_at"])
    return result


def format_comparison(result: dict) -> str:
    """What `nameorigin evaluate --baseline` prints: the run's margin line (nameorigin.evaluation.margin.margin_line),
    fitted now, and the disagreements behind it."""
    return (f"margin over the n-gram baseline on the checkpoint's test split, fitted now: {margin_line(result)}\n"
            f"  disagreements: only the model right on {result['only_model']}, only the baseline on "
            f"{result['only_baseline']}; exact McNemar p = {result['p']:.3g}")
