"""Every run's margin over the n-gram baseline: after the test, the model is scored beside the project's n-gram
linear model on the same test names, and the difference in accuracy gets a 95 % paired bootstrap interval and an
exact McNemar test. The baseline is the one the run already fitted: the model's linear part, fitted alone on the
split the served model was trained on, its penalty picked on validation (nameorigin.training.linear_mix). Where
the served model mixed none in (a fine-tuned model), it is fitted here the same way; past the full fit's size,
the hashed baseline's batch fit stands in (nameorigin.evaluation.baselines). Beside it the tuned TF-IDF LR is fitted
where its grid is affordable (LR_PAST), and the stronger of the two on validation is the one stated, so a margin is
never read over the weaker baseline. `margin.enabled=false` turns the step off (its cost:
docs/data-and-evaluation.md).
"""

from __future__ import annotations

import logging
import time
from math import comb
from typing import Any

import torch

from nameorigin.data.batching import TRAINED_ON
from nameorigin.evaluation import linear_fit
from nameorigin.evaluation.like_for_like import fits_shares_or_weights, like_for_like, like_for_like_line
from nameorigin.fit.split_logits import logits_in_order
from nameorigin.model import ngram_linear
from nameorigin.model.ngram_linear import LinearFit

log = logging.getLogger(__name__)

# Training pairs x labels past which the TF-IDF LR's grid is not fitted beside the run's own baseline.
LR_PAST = 200_000 * 20


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
            "macro_f1_margin": model_macro_f1 - baseline["test_macro_f1"], **paired(model_correct, baseline_correct),
            **({"weaker": baseline["weaker"], "baseline_val_acc": baseline["val_acc"]} if "weaker" in baseline else {})}


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
    kind, baseline = stronger_on_validation(kind, baseline, splits, refitted)
    truth = [label for _, label in splits["test"]]
    logits = logits_in_order(net, datamodule.datasets["test"])
    predicted = [labels[i] for i in logits.argmax(1).tolist()]
    model_correct = torch.tensor([p == t for p, t in zip(predicted, truth, strict=True)])
    like = like_for_like(datamodule, logits, refitted, part, model.config.ngram_max) \
        if fits_shares_or_weights(datamodule) else None
    ranked = ranked_precision(logits, truth, labels, baseline) if "precision_at" in baseline else {}
    return {**compare(model_correct, macro_f1(truth, predicted), baseline, kind), **ranked, "like_for_like": like,
            **recurrent_alone(net, datamodule.datasets["test"], baseline["correct"]),
            "seconds": round(time.perf_counter() - start, 1)}


def recurrent_alone(net: Any, test: Any, baseline_correct: torch.Tensor) -> dict[str, Any]:
    """The recurrent part of the model alone (no n-gram head, no linear part mixed into it) on the test names,
    beside the same baseline: how much of the model's lead the network carries itself. Nothing for a model
    without an n-gram head (it is all network) or an ensemble."""
    if getattr(net, "ngram", None) is None:
        return {}
    correct = logits_in_order(net, test, recurrent_only=True).argmax(1) == test.targets
    acc = float(correct.double().mean())
    return {"recurrent_alone": {"acc": acc, "margin": acc - float(baseline_correct.double().mean()),
                              "interval": list(bootstrap_margin(correct, baseline_correct))}}


def stronger_on_validation(kind: str, baseline: dict, splits: dict[str, list[tuple[str, str]]],
                           refitted: bool) -> tuple[str, dict]:
    """The stronger of `baseline` and the tuned TF-IDF LR, judged on validation accuracy (test is read once, for
    the margin), on tables small enough for the LR's grid; the other's figures are kept beside it (`weaker`), so
    the margin is never stated over the weaker of two baselines a practitioner would try."""
    if len(splits["train"]) * len({label for _, label in splits["train"]}) > LR_PAST:
        return kind, baseline
    lr = fitted_baseline("lr", splits, refitted)
    (kind, stated), (other_kind, other) = sorted(((kind, baseline), ("lr", lr)), reverse=True,
                                                 key=lambda pair: pair[1]["val_acc"] or 0.0)
    stated["weaker"] = {"kind": other_kind, "setting": other["setting"], "val_acc": other["val_acc"],
                        "test_acc": other["test_acc"]}
    return kind, stated


def linear_part_of(model: Any, datamodule: Any, mixed: LinearFit | None) -> LinearFit | None:
    """The linear part the run mixed into the served model (`mixed`), or, where it mixed none, the same model
    fitted now; None past the full fit's size or without an n-gram head."""
    if mixed is not None:
        return mixed
    config = model.config
    if not config.ngram_buckets or not linear_fit.fits(datamodule, config.ngram_buckets, config.ngram_max):
        return None
    return linear_fit.fit_alone(datamodule, config.ngram_buckets, config.ngram_max, bool(config.soft_targets),
                                config.ngram_hash)


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
    if result.get("recurrent_alone"):
        alone = result["recurrent_alone"]
        line += (f"; the recurrent part alone (no n-gram head, no linear part) {alone['acc']:.4f}, "
                 f"{100 * alone['margin']:+.2f} [{100 * alone['interval'][0]:+.2f}, {100 * alone['interval'][1]:+.2f}]"
                 " over the same baseline")
    if result.get("weaker"):
        weaker = result["weaker"]
        line += (f"; this baseline was picked on validation over the {BASELINE_NAMES[weaker['kind']]} "
                 f"({weaker['setting']}; validation {result['baseline_val_acc']:.4f} vs {weaker['val_acc']:.4f}, "
                 f"its test {weaker['test_acc']:.4f})")
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
    alone = {"test/acc_recurrent_alone": result["recurrent_alone"]["acc"],
             "margin/acc_recurrent_alone": result["recurrent_alone"]["margin"]} if result.get("recurrent_alone") else {}
    return {**weighted, **alone, "margin/acc": result["margin"], "margin/acc_low": result["interval"][0],
            "margin/acc_high": result["interval"][1], "margin/macro_f1": result["macro_f1_margin"],
            "baseline/acc": result["baseline_acc"], "baseline/macro_f1": result["baseline_macro_f1"]}
