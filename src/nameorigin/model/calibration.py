"""Probabilities people can trust: one temperature fitted on the validation split, and split-conformal
prediction sets whose thresholds come from the same split.

Temperature scaling (Guo et al. 2017) divides the logits by one number T, chosen to minimize the validation
negative log-likelihood; it changes no prediction, only confidence. Prediction sets use the "least ambiguous"
score s = 1 - p(true language) (Sadinle et al. 2019): with q the ceil((n+1)c)/n quantile of the validation
scores, the set {k : p_k >= 1 - q} holds the true language with probability at least c on exchangeable data.
The top language is always in the set, so no name gets an empty answer. Class-conditional (Mondrian) sets
(Vovk 2012) take the same quantile within each true label's validation names, so that each label's coverage holds
on its own rather than only on average over labels; those sets do not force the top label in, so one can be
empty. These few lines are written here
rather than wrapping the model in MAPIE or crepes: both expect scikit-learn estimators, and all that is needed
is the quantile of one score.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from nameorigin.model.artifacts import REFERENCE_VALUES, Calibration, HeldOutReference

# The temperature is searched in this range. When every validation name is right by a wide margin the loss keeps
# falling as T -> 0 (on a tiny corpus it reached 0.002, every probability 1.0); the bound stops it first.
TEMPERATURE_RANGE = (0.1, 10.0)


def fit_temperature(logits: torch.Tensor, targets: torch.Tensor, steps: int = 80) -> float:
    """The T in TEMPERATURE_RANGE minimizing the cross-entropy of logits / T against the targets (labels, or
    a distribution per name).

    The loss is convex in 1/T, so it has one minimum along log T, which a golden-section search brackets."""
    logits, targets = logits.detach().double(), targets.detach()
    targets = targets.double() if targets.is_floating_point() else targets  # shares: a distribution per name
    loss = lambda log_t: float(torch.nn.functional.cross_entropy(logits / math.exp(log_t), targets))  # noqa: E731
    low, high = (math.log(bound) for bound in TEMPERATURE_RANGE)
    ratio = (math.sqrt(5) - 1) / 2
    inner_low, inner_high = high - ratio * (high - low), low + ratio * (high - low)
    loss_low, loss_high = loss(inner_low), loss(inner_high)
    for _ in range(steps):
        if loss_low <= loss_high:
            high, inner_high, loss_high = inner_high, inner_low, loss_low
            inner_low = high - ratio * (high - low)
            loss_low = loss(inner_low)
        else:
            low, inner_low, loss_low = inner_low, inner_high, loss_high
            inner_high = low + ratio * (high - low)
            loss_high = loss(inner_high)
    return math.exp((low + high) / 2)


def at_bound(temperature: float) -> bool:
    """Whether the fit stopped at an end of TEMPERATURE_RANGE: validation had no errors (0.1) or hardly a right
    answer (10) to calibrate on."""
    return any(math.isclose(temperature, bound, rel_tol=1e-3) for bound in TEMPERATURE_RANGE)


def level_key(coverage: float) -> str:
    """How a coverage level is named in checkpoints and metrics: 0.9 -> "0.9"."""
    return f"{coverage:g}"


def conformal_thresholds(probs: torch.Tensor, targets: torch.Tensor, coverages: Sequence[float]) -> dict[str, float]:
    """For each coverage c: the probability a language needs to enter the set (1 - the conformal quantile)."""
    scores = 1 - probs.gather(1, targets[:, None]).squeeze(1).double()
    n, thresholds = len(scores), {}
    for coverage in coverages:
        rank = min(math.ceil((n + 1) * coverage), n)  # with too few names the set must take everything
        quantile = float(scores.sort().values[rank - 1]) if n else 1.0
        thresholds[level_key(coverage)] = 1 - quantile
    return thresholds


def mondrian_thresholds(probs: torch.Tensor, targets: torch.Tensor, coverages: Sequence[float],
                        marginal: dict[str, float]) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
    """For each coverage c, a threshold per label from the validation names of that label alone. A label with
    fewer than c / (1 - c) validation names (9 at 90 %) has no finite quantile: it takes the marginal threshold,
    and is listed as a fallback."""
    scores = 1 - probs.gather(1, targets[:, None]).squeeze(1).double()
    thresholds: dict[str, list[float]] = {}
    fallback: dict[str, list[int]] = {}
    for coverage in coverages:
        key, per_label, fell_back = level_key(coverage), [], []
        for label in range(probs.shape[1]):
            own = scores[targets == label].sort().values
            rank = math.ceil((len(own) + 1) * coverage)
            if rank > len(own):
                per_label.append(marginal[key])
                fell_back.append(label)
            else:
                per_label.append(1 - float(own[rank - 1]))
        thresholds[key], fallback[key] = per_label, fell_back
    return thresholds, fallback


def prediction_sets(probs: torch.Tensor, threshold: float | Sequence[float]) -> torch.Tensor:
    """[N, labels] bool: the languages whose probability reaches the threshold.

    One threshold (marginal sets): the top language is always in, so no name gets an empty answer; that only
    adds coverage. One threshold per label (class-conditional sets): exactly the labels that reach their own
    threshold, as the method states it. Forcing the top label in would hold a label the model gets right more
    often than the level (Russian: 97 %) far above it, and a set may rightly be empty: no label is likely enough
    by its own names' standard."""
    per_label = not isinstance(threshold, float | int)
    members = probs >= torch.as_tensor(threshold, dtype=probs.dtype, device=probs.device)
    if not per_label:
        members[torch.arange(len(probs)), probs.argmax(-1)] = True
    return members


def reliability(probs: torch.Tensor, targets: torch.Tensor, bins: int = 15,
                shares: torch.Tensor | None = None) -> dict[str, list[float]]:
    """Per equal-width confidence bin: mean confidence, accuracy and count (what the diagram draws). With
    shares, a name's accuracy is its predicted label's share: the bins count people, not names."""
    confidence, predicted = probs.max(-1)
    correct = (predicted == targets).double() if shares is None else shares.double().gather(1, predicted[:, None])[:, 0]
    index = (confidence.double() * bins).long().clamp(max=bins - 1)
    count = torch.bincount(index, minlength=bins).double()
    mean = lambda values: (torch.bincount(index, values, minlength=bins) / count.clamp_min(1)).tolist()  # noqa: E731
    return {"confidence": mean(confidence.double()), "accuracy": mean(correct), "count": count.tolist()}


def expected_calibration_error(probs: torch.Tensor, targets: torch.Tensor, bins: int = 15) -> float:
    """Top-label ECE with equal-width bins (torchmetrics' MulticlassCalibrationError, norm l1)."""
    from torchmetrics.functional.classification import multiclass_calibration_error

    return float(multiclass_calibration_error(probs.float(), targets, probs.shape[1], n_bins=bins, norm="l1"))


def share_calibration_error(probs: torch.Tensor, shares: torch.Tensor, bins: int = 15) -> float:
    """ECE against shares: a model saying 0.7 for F is calibrated when 70 % of the people with such names are F.
    (torchmetrics' ECE needs one label per name, so this one reads the reliability bins.)"""
    curve = reliability(probs, shares.argmax(-1), bins, shares / shares.sum(-1, keepdim=True))
    gaps = [count * abs(c - a) for c, a, count in zip(curve["confidence"], curve["accuracy"], curve["count"],
                                                      strict=True)]
    return sum(gaps) / max(sum(curve["count"]), 1.0)


def calibrate(logits: torch.Tensor, targets: torch.Tensor, coverages: Sequence[float], bins: int = 15,
              shares: torch.Tensor | None = None, sets: str = "marginal") -> Calibration:
    """Everything fitted on validation logits: temperature, ECE before and after, conformal thresholds. With
    shares (a model trained against them) the temperature minimizes the cross-entropy against the shares, which
    is what the model's probabilities mean; the conformal sets still cover each name's majority label."""
    temperature = fit_temperature(logits, targets if shares is None else shares / shares.sum(-1, keepdim=True))
    raw, scaled = logits.float().softmax(-1), (logits.float() / temperature).softmax(-1)
    marginal = conformal_thresholds(scaled, targets, coverages)
    by_label, fallback = mondrian_thresholds(scaled, targets, coverages, marginal)
    return Calibration(
        temperature=temperature, temperature_at_bound=at_bound(temperature), bins=bins, val_size=len(targets),
        val_ece_raw=expected_calibration_error(raw, targets, bins),
        val_ece=expected_calibration_error(scaled, targets, bins),
        val_ece_shares=None if shares is None else share_calibration_error(scaled, shares, bins),
        conformal=marginal, conformal_by_label=by_label, conformal_fallback=fallback, sets=sets,
        conformal_score="1 - p(true language), top language always included",
        # the label mix the calibrated probabilities carry, which --prior divides out (serving/prior.py)
        label_prior=scaled.mean(0).tolist())


def held_out_reference(probs: torch.Tensor, targets: torch.Tensor, fitted_on: str, budget: int = REFERENCE_VALUES,
                       seed: int = 0) -> HeldOutReference:
    """The held-out names' calibrated probabilities [n, labels] and labels as a checkpoint keeps them: every name
    while n x labels fits `budget`, else a seeded sample of up to m names per label, m the largest that fits (the
    rare labels' rows of the confusion keep all their names)."""
    labels = probs.shape[1]
    room = max(budget // labels, 1)
    by_label = [torch.nonzero(targets == k).flatten() for k in range(labels)]
    cap = max((len(rows) for rows in by_label), default=0)
    while cap > 1 and sum(min(len(rows), cap) for rows in by_label) > room:
        cap = cap * 9 // 10
    generator = torch.Generator().manual_seed(seed)
    kept = torch.cat([rows[torch.randperm(len(rows), generator=generator)[:cap]] for rows in by_label]).sort().values
    return HeldOutReference(probs=[[round(p, 6) for p in row] for row in probs[kept].tolist()],
                            targets=targets[kept].tolist(), held_out=len(targets), fitted_on=fitted_on)
