"""Every run's margin over the n-gram baseline: after the test, the project's n-gram baseline is fitted on the run's
own split (nameorigin.training.baseline: the TF-IDF logistic regression, or past HASHED_PAST training pairs the
hashed SGD model; C or alpha chosen on validation, and refitted on train + validation when the model was), both
are scored on the same test names, and the difference in accuracy gets a 95 % paired bootstrap interval and an
exact McNemar test. `margin.enabled=false` turns the step off (its cost: docs/data-and-evaluation.md).
"""

from __future__ import annotations

import logging
import time
from math import comb
from typing import Any

import torch

log = logging.getLogger(__name__)

HASHED_PAST = 200_000  # training pairs past which the LR's grid is too slow and the hashed SGD model stands in


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


@torch.no_grad()
def logits_in_order(net: Any, dataset: Any, decided: bool = True, batch_size: int = 1024) -> torch.Tensor:
    """The network's logits (decided, or before the decision layer) for every row of a split, in its own order."""
    net.eval()
    device, parts = net.head.weight.device, []
    for start in range(0, len(dataset), batch_size):
        _, tokens, lengths = dataset.rows(list(range(start, min(start + batch_size, len(dataset)))))
        tokens, lengths = tokens.to(device), lengths.to(device)
        logits = net.readout(net.encode(tokens, lengths), tokens, lengths)
        parts.append((net.decide(logits) if decided else logits).float().cpu())
    return torch.cat(parts)


def has_pairs(datamodule: Any) -> bool:
    """A corpus of (name, label) pairs (a folder or a table); the surnames pretraining is scored otherwise."""
    test = getattr(datamodule, "splits", {}).get("test")
    return bool(test) and isinstance(test[0], tuple)


def run_margin(datamodule: Any, net: Any, labels: list[str]) -> dict[str, Any]:
    """The model (`net`, as tested) beside the n-gram baseline on the run's test split, name by name."""
    from nameorigin.data.batching import TRAINED_ON
    from nameorigin.training.baseline import fit_hashed_baseline, fit_ngram_baseline

    start = time.perf_counter()
    splits, refitted = datamodule.splits, getattr(datamodule, "trained_on", "train") == TRAINED_ON
    kind = "sgd" if len(splits["train"]) > HASHED_PAST else "lr"
    baseline = (fit_hashed_baseline if kind == "sgd" else fit_ngram_baseline)(splits, refit=refitted)
    truth = [label for _, label in splits["test"]]
    predicted = [labels[i] for i in logits_in_order(net, datamodule.datasets["test"]).argmax(1).tolist()]
    model_correct = torch.tensor([p == t for p, t in zip(predicted, truth, strict=True)])
    baseline_correct = torch.tensor([p == t for p, t in zip(baseline["test_predictions"], truth, strict=True)])
    model_f1, baseline_f1 = macro_f1(truth, predicted), macro_f1(truth, baseline["test_predictions"])
    return {"kind": kind, "setting": f"C={baseline['C']:g}" if kind == "lr" else f"alpha={baseline['alpha']:g}",
            "trained_on": baseline["trained_on"], "size": len(truth),
            "model_acc": float(model_correct.double().mean()), "baseline_acc": baseline["test_acc"],
            "margin": float(model_correct.double().mean()) - baseline["test_acc"],
            "model_macro_f1": model_f1, "baseline_macro_f1": baseline_f1, "macro_f1_margin": model_f1 - baseline_f1,
            **paired(model_correct, baseline_correct), "seconds": round(time.perf_counter() - start, 1)}


def margin_line(result: dict[str, Any]) -> str:
    """One line for the results block, train.log and nameorigin evaluate."""
    low, high = (100 * x for x in result["interval"])
    name = "n-gram LR" if result["kind"] == "lr" else "hashed n-gram SGD"
    return (f"{100 * result['margin']:+.2f} points of test accuracy over the {name} ({result['setting']}, "
            f"{result['baseline_acc']:.4f} on the same {result['size']:,} names; 95% paired interval "
            f"[{low:+.2f}, {high:+.2f}]); macro-F1 {100 * result['macro_f1_margin']:+.2f} "
            f"({result['model_macro_f1']:.4f} vs {result['baseline_macro_f1']:.4f})")


def measure_margin(model: Any, datamodule: Any, final: str, loggers: list) -> dict[str, Any]:
    """nameorigin.training.margin on the model as tested; stored in its checkpoint and logged."""
    from nameorigin.training.checkpointing import update_checkpoint  # Lightning: not for nameorigin evaluate's import

    result = run_margin(datamodule, model.net, list(model.hparams.labels))
    update_checkpoint(final, lambda checkpoint: checkpoint.__setitem__("margin", result))
    log.info("margin over the n-gram baseline (fitted in %.0f s; margin.enabled=false skips it): %s",
             result["seconds"], margin_line(result))
    for logger in loggers:
        logger.log_metrics(margin_metrics(result))
    return result


def margin_metrics(result: dict) -> dict[str, float]:
    return {"margin/acc": result["margin"], "margin/acc_low": result["interval"][0],
            "margin/acc_high": result["interval"][1], "margin/macro_f1": result["macro_f1_margin"],
            "baseline/acc": result["baseline_acc"], "baseline/macro_f1": result["baseline_macro_f1"]}
