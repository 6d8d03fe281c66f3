"""A paired comparison of a checkpoint with the n-gram baseline on the same test names.

Two accuracies from one test split share its sampling noise, so their difference is judged on the names where
the two disagree: an exact McNemar test on those, and a paired bootstrap interval for the accuracy margin (the
test names resampled with replacement, both models scored on each resample). The baseline is fitted on the
checkpoint's own train split, with C chosen on its validation split, exactly as nameorigin.training.baseline does; for a
refit checkpoint (nameorigin.training.refit) it is then refitted on train + validation too, so both saw the same names.
"""

from __future__ import annotations

from pathlib import Path

import torch

from nameorigin.analysis.evaluate import checkpoint_splits, evaluate
from nameorigin.data.batching import TRAINED_ON, is_refit
from nameorigin.serving.predict import BATCH_SIZE, Predictor
from nameorigin.training.baseline import fit_hashed_baseline, fit_ngram_baseline
from nameorigin.training.margin import BASELINE_NAMES, paired

BASELINES = {"lr": fit_ngram_baseline, "ngram": fit_hashed_baseline}  # --baseline's choices


def compare_with_baseline(predictor: Predictor, root: str | Path, batch_size: int = BATCH_SIZE,
                          ours: dict | None = None, kind: str = "lr") -> dict:
    """The checkpoint and the n-gram baseline on the checkpoint's test split, name by name (`ours`: the
    checkpoint's evaluate() result on root, when already computed). kind: "lr", TF-IDF + logistic regression
    with C chosen on validation; "ngram", the project's own hashed n-gram linear model (the model's linear part
    fitted alone), for tables too large for the LR's grid."""
    splits = checkpoint_splits(predictor, root)
    ours = ours or evaluate(predictor, root, batch_size)
    baseline = BASELINES[kind](splits, refit=is_refit(predictor.data_settings))
    model_correct = torch.tensor(ours["correct"])
    baseline_correct = torch.tensor([p == language for p, (_, language) in
                                     zip(baseline["test_predictions"], splits["test"], strict=True)])
    return {"size": len(splits["test"]), "model_acc": ours["accuracy"], "model_macro_f1": ours["macro_f1"],
            "baseline_acc": baseline["test_acc"], "baseline_macro_f1": baseline["test_macro_f1"], "kind": kind,
            "setting": baseline["setting"],
            "model_precision_at": ours.get("precision_at"), "baseline_precision_at": baseline.get("precision_at"),
            "margin": ours["accuracy"] - baseline["test_acc"], **paired(model_correct, baseline_correct),
            "trained_on": baseline["trained_on"]}


def format_comparison(result: dict) -> str:
    low, high = (100 * x for x in result["interval"])
    name = BASELINE_NAMES[result["kind"]]
    model = "model".ljust(len(name))
    lines = [
        f"paired comparison on the checkpoint's test split ({result['size']} names, the same for both):",
        f"  {model}  accuracy {result['model_acc']:.4f}   macro-F1 {result['model_macro_f1']:.4f}",
        f"  {name}  accuracy {result['baseline_acc']:.4f}   macro-F1 {result['baseline_macro_f1']:.4f}"
        f"   ({result['setting']}, chosen on validation"
        + ("; refitted on train + validation, as the model was)" if result.get("trained_on") == TRAINED_ON else ")")]
    if result["baseline_precision_at"]:
        lines += [f"  {who}  precision@K  " + "  ".join(f"{k}: {p:.4f}" for k, p in at.items()) for who, at in
                  ((model, result["model_precision_at"]), (name, result["baseline_precision_at"]))]
    return "\n".join([
        *lines,
        f"  {'margin'.ljust(len(name))}  {100 * result['margin']:+.2f} points of accuracy, 95% paired bootstrap "
        f"interval [{low:+.2f}, {high:+.2f}]",
        f"  disagreements: only the model right on {result['only_model']}, only the baseline on "
        f"{result['only_baseline']}; exact McNemar p = {result['p']:.3g}",
    ])
