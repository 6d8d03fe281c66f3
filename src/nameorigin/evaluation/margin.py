"""Every run's margin over the n-gram baseline: after the test, the model is scored beside the project's n-gram
linear model on the same test names, and the difference in accuracy gets a 95 % paired bootstrap interval and an
exact McNemar test. The baseline is the one the run already fitted: the model's linear part, fitted alone on the
split the served model was trained on, its penalty picked on validation (nameorigin.training.linear_mix). Where
the served model mixed none in (a fine-tuned model), it is fitted here the same way; past the full fit's size,
the hashed baseline's batch fit stands in (nameorigin.evaluation.baselines). `margin.enabled=false` turns the step
off (its cost: docs/data-and-evaluation.md).
"""

from __future__ import annotations

import logging
import time
from math import comb
from typing import Any

import numpy as np
import torch

from nameorigin.data.batching import TRAINED_ON
from nameorigin.evaluation import linear_fit
from nameorigin.fit.split_logits import logits_in_order
from nameorigin.model import ngram_linear
from nameorigin.model.ngram_linear import LinearFit

log = logging.getLogger(__name__)

# Training pairs past which the like-for-like comparison's LR grid is too slow and the hashed n-gram model stands in.
HASHED_PAST = 200_000


# What the margin's line calls each baseline.
BASELINE_NAMES = {"lr": "n-gram LR", "ngram": "hashed n-gram softmax",
                  "linear_part": "model's n-gram linear part, fitted alone"}


def mcnemar_p(only_first: int, only_second: int) -> float:
    """Two-sided exact McNemar p-value: how likely a split of the disagreements at least this uneven is when
    either side is equally likely to be the one that is right."""
    n = only_first + only_second
    if n == 0:
        return 1.0
    tail = sum(comb(n, k) for k in range(min(only_first, only_second) + 1))
    return min(1.0, 2 * tail / 2**n)


def bootstrap_margin(first_correct: torch.Tensor, second_correct: torch.Tensor, samples: int = 10_000,
                     level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of accuracy(first) - accuracy(second) over paired resamples of the test names.
    Each name contributes -1, 0 or +1, so a resample is a multinomial draw over those three outcomes."""
    if first_correct.shape != second_correct.shape or first_correct.numel() == 0:
        raise ValueError("bootstrap_margin needs two equally long, non-empty correctness vectors")
    difference = first_correct.long() - second_correct.long()
    n = difference.numel()
    shares = torch.stack([(difference == d).double().mean() for d in (-1, 0, 1)])
    generator = torch.Generator().manual_seed(seed)
    # A multinomial draw of n over (-1, 0, +1) is a binomial for -1, then a binomial for +1 among the rest.
    minus = torch.binomial(torch.full((samples,), float(n), dtype=torch.double), shares[0].expand(samples),
                           generator=generator)
    plus_share = shares[2] / (1 - shares[0]) if shares[0] < 1 else shares[0].new_zeros(())
    plus = torch.binomial(n - minus, plus_share.clamp(0, 1).expand(samples), generator=generator)
    margins = (plus - minus) / n
    low, high = torch.quantile(margins, torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.double))
    return float(low), float(high)


def compare(model_correct: torch.Tensor, model_macro_f1: float, baseline: dict, kind: str) -> dict[str, Any]:
    """The model beside a fitted baseline (nameorigin.evaluation.baselines's result, with its test predictions scored
    into baseline["correct"]) on the same test names: both accuracies and macro-F1s, the margin, and the paired
    statistics. The run's margin and `nameorigin evaluate --baseline` both state this."""
    baseline_correct = baseline["correct"]
    model_acc = float(model_correct.double().mean())
    return {"kind": kind, "setting": baseline["setting"], "trained_on": baseline["trained_on"],
            "size": len(model_correct), "model_acc": model_acc, "baseline_acc": baseline["test_acc"],
            "margin": model_acc - baseline["test_acc"], "model_macro_f1": model_macro_f1,
            "baseline_macro_f1": baseline["test_macro_f1"],
            "macro_f1_margin": model_macro_f1 - baseline["test_macro_f1"], **paired(model_correct, baseline_correct)}


def fitted_baseline(kind: str, splits: dict[str, list[tuple[str, str]]], refit: bool) -> dict:
    """The baseline of `kind` fitted on the splits, its test predictions scored against the test labels."""
    from nameorigin.evaluation.baselines import fit_hashed_baseline, fit_tfidf_baseline

    baseline = (fit_hashed_baseline if kind == "ngram" else fit_tfidf_baseline)(splits, refit=refit)
    baseline["correct"] = torch.tensor([p == label for p, (_, label) in zip(baseline["test_predictions"],
                                                                               splits["test"], strict=True)])
    return baseline


def paired(first_correct: torch.Tensor, second_correct: torch.Tensor) -> dict[str, Any]:
    """Where two models' answers on the same names differ: the counts, McNemar's p and the margin's interval."""
    only_first = int((first_correct & ~second_correct).sum())
    only_second = int((second_correct & ~first_correct).sum())
    low, high = bootstrap_margin(first_correct, second_correct)
    return {"only_model": only_first, "only_baseline": only_second, "p": mcnemar_p(only_first, only_second),
            "interval": [low, high]}


def macro_f1(truth: list[str], predicted: list[str]) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(truth, predicted, average="macro"))


def run_margin(datamodule: Any, model: Any, mixed: LinearFit | None = None) -> dict[str, Any]:
    """The model (as tested) beside the n-gram linear model on the run's test split, name by name (`mixed`: the
    linear model the run mixed into it, when it did)."""
    start = time.perf_counter()
    net, labels = model.net, list(model.hparams.labels)
    splits, refitted = datamodule.splits, getattr(datamodule, "trained_on", "train") == TRAINED_ON
    part = linear_part_of(model, datamodule, mixed)
    kind = "ngram" if part is None else "linear_part"
    baseline = fitted_baseline(kind, splits, refitted) if part is None else \
        scored_part(part, datamodule, model.config.ngram_max, refitted)
    truth = [label for _, label in splits["test"]]
    logits = logits_in_order(net, datamodule.datasets["test"])
    predicted = [labels[i] for i in logits.argmax(1).tolist()]
    model_correct = torch.tensor([p == t for p, t in zip(predicted, truth, strict=True)])
    like = like_for_like(datamodule, logits, refitted, part, model.config.ngram_max) \
        if fits_shares_or_weights(datamodule) else None
    ranked = ranked_precision(logits, truth, labels, baseline) if "precision_at" in baseline else {}
    return {**compare(model_correct, macro_f1(truth, predicted), baseline, kind), **ranked, "like_for_like": like,
            "seconds": round(time.perf_counter() - start, 1)}


def linear_part_of(model: Any, datamodule: Any, mixed: LinearFit | None) -> LinearFit | None:
    """The linear part the run mixed into the served model (`mixed`), or, where it mixed none, the same model
    fitted now; None past the full fit's size or without an n-gram head."""
    if mixed is not None:
        return mixed
    config = model.config
    if not config.ngram_buckets or not linear_fit.fits(datamodule, config.ngram_buckets, config.ngram_max):
        return None
    return linear_fit.fit_alone(datamodule, config.ngram_buckets, config.ngram_max, bool(config.soft_targets))


def scored_part(part: LinearFit, datamodule: Any, max_n: int, refitted: bool) -> dict[str, Any]:
    """The linear part's answers on the test split, as fitted_baseline states a baseline."""
    test, labels = datamodule.datasets["test"], datamodule.labels
    scores = linear_fit.linear_logits(part, test, len(datamodule.vocab), max_n)
    predicted = [labels[i] for i in scores.argmax(1).tolist()]
    truth = [label for _, label in datamodule.splits["test"]]
    correct = scores.argmax(1) == test.targets
    return {"setting": f"penalty={part.penalty:g}", "val_acc": max(part.val_acc.values(), default=None),
            "trained_on": TRAINED_ON if refitted else "train", "test_acc": float(correct.double().mean()),
            "test_macro_f1": macro_f1(truth, predicted), "correct": correct,
            "precision_at": ngram_linear.precision_at(ngram_linear.label_ranks(scores, test.targets), len(labels)),
            "seconds": part.seconds, "test_predictions": predicted}


def ranked_precision(logits: torch.Tensor, truth: list[str], labels: list[str], baseline: dict) -> dict[str, dict]:
    """Precision@1..K of both sides on the test pairs (the baseline ranks its labels too): how often the pair's
    label is among the top K answers."""
    column = {label: i for i, label in enumerate(labels)}
    ranks = ngram_linear.label_ranks(logits, torch.tensor([column[label] for label in truth]))
    model = ngram_linear.precision_at(ranks, len(labels))
    # keys as strings: what the checkpoint's and the export's JSON both give back
    return {"model_precision_at": {str(k): model[k] for k in baseline["precision_at"]},
            "baseline_precision_at": {str(k): value for k, value in baseline["precision_at"].items()}}


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


def margin_line(result: dict[str, Any]) -> str:
    """The one way a comparison with the baseline is written (compare's result): in the results block, train.log,
    the card and `nameorigin evaluate`. On a share or weighted table, the like-for-like comparison first, then the
    per-name majority one; precision@K of both where the baseline ranks its labels."""
    if result.get("like_for_like"):
        return (f"{like_for_like_line(result['like_for_like'])}; per name, majority label: "
                f"{margin_line({k: v for k, v in result.items() if k != 'like_for_like'})}")
    low, high = (100 * x for x in result["interval"])
    name = BASELINE_NAMES[result["kind"]]
    refitted = "; refitted on train + validation, as the model was" if result.get("trained_on") == TRAINED_ON else ""
    line = (f"{100 * result['margin']:+.2f} points of test accuracy over the {name} ({result['setting']}{refitted}, "
            f"{result['baseline_acc']:.4f} on the same {result['size']:,} names; 95% paired interval "
            f"[{low:+.2f}, {high:+.2f}]); macro-F1 {100 * result['macro_f1_margin']:+.2f} "
            f"({result['model_macro_f1']:.4f} vs {result['baseline_macro_f1']:.4f})")
    if result.get("baseline_precision_at") and result.get("model_precision_at"):
        model, baseline = (sorted((int(k), v) for k, v in result[side].items())
                           for side in ("model_precision_at", "baseline_precision_at"))
        line += (f"; precision@1-{model[-1][0]} {' '.join(f'{v:.4f}' for _, v in model)} vs "
                 f"{' '.join(f'{v:.4f}' for _, v in baseline)}")
    return line


def measure_margin(model: Any, datamodule: Any, loggers: list, mixed: LinearFit | None) -> dict[str, Any]:
    """nameorigin.evaluation.margin on the model as tested, logged (the pipeline stores it in the checkpoint);
    `mixed`: the linear model mixed into it, or None."""
    result = run_margin(datamodule, model, mixed)
    log.info("margin over the n-gram baseline (%.0f s; margin.enabled=false skips it): %s",
             result["seconds"], margin_line(result))
    for logger in loggers:
        logger.log_metrics(margin_metrics(result))
    return result


def margin_metrics(result: dict) -> dict[str, float]:
    like = result.get("like_for_like")
    weighted = {"margin/person_acc": like["person_margin"], "margin/person_acc_low": like["interval"][0],
                "margin/person_acc_high": like["interval"][1], "baseline/person_acc": like["baseline_person_acc"],
                "baseline/cross_entropy": like["baseline_cross_entropy"],
                "test/person_acc": like["model_person_acc"], "test/cross_entropy_shares": like["model_cross_entropy"]} \
        if like else {}
    return {**weighted, "margin/acc": result["margin"], "margin/acc_low": result["interval"][0],
            "margin/acc_high": result["interval"][1], "margin/macro_f1": result["macro_f1_margin"],
            "baseline/acc": result["baseline_acc"], "baseline/macro_f1": result["baseline_macro_f1"]}
