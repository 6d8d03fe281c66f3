"""Probabilities for the population being scored: Bayes' rule with a target prior (`--prior FILE|uniform`), or a
prior estimated from the unlabelled names themselves (`--prior estimate`, the EM procedure of Saerens, Latinne &
Decaestecker 2002, "Adjusting the outputs of a classifier to new a priori probabilities").

p_target(y | x) is proportional to p(y | x) * target(y) / trained(y). `trained` is the prior the served
probabilities already carry: their mean on best.ckpt's held-out validation names, measured with the temperature
and carried to the refit (`label_prior` in the checkpoint's calibration). On names drawn in the training mix, EM
then stays at that mix; with the label shares it would drift wherever the probabilities are not calibrated label
by label. Without a fitted calibration it falls back to the training shares (train + validation for a refit)
raised to 1 - tau, since logit adjustment (tau) divides tau of them out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch

from nameorigin.base.errors import UserError


def reweight(probs: torch.Tensor, trained: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    scaled = probs * (target / trained)
    return scaled / scaled.sum(-1, keepdim=True).clamp_min(1e-30)


# Fewer names than this give EM too little to go on: on the default model's resampled test names, 10 or 30 names
# re-weighted to their own estimate were answered worse than not re-weighted at all (docs/serving.md).
MIN_NAMES_TO_ESTIMATE = 100


def check_estimable(count: int) -> None:
    if count < MIN_NAMES_TO_ESTIMATE:
        raise UserError(f"prior 'estimate' needs at least {MIN_NAMES_TO_ESTIMATE} usable names to estimate a label "
                        f"mix from, and got {count}: score more names, or pass prior 'uniform' or label -> share")


def estimate_prior(probs: torch.Tensor, trained: torch.Tensor, steps: int = 200, tolerance: float = 1e-6,
                   counts: torch.Tensor | None = None) -> torch.Tensor:
    """EM: the target prior is the mean of the re-weighted probabilities, re-weighted with it, to a fixed point.
    `counts`: how many rows each name stands for (a table's distinct names), the weights of that mean."""
    prior = trained.clone()
    weights = None if counts is None else (counts.double() / counts.double().sum()).float()[:, None]
    for _ in range(steps):
        adjusted = reweight(probs, trained, prior)
        new = adjusted.mean(0) if weights is None else (adjusted * weights).sum(0)
        if float((new - prior).abs().sum()) < tolerance:
            return new
        prior = new
    return prior


def read_prior(spec: str | dict, labels: Sequence[str]) -> torch.Tensor | str:
    """`uniform`, `estimate`, a JSON file of label -> share or such a mapping (normalized; every label named, none
    negative)."""
    if isinstance(spec, dict):
        return prior_from_shares(spec, labels)
    if spec in ("uniform", "estimate"):
        return torch.full((len(labels),), 1 / len(labels)) if spec == "uniform" else spec
    path = Path(spec)
    try:
        shares = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"prior {spec}: no such file; pass a JSON of label -> share, uniform or estimate") from None
    except (ValueError, OSError) as error:
        raise UserError(f"prior {spec} is not a readable JSON file ({type(error).__name__}): pass a JSON object "
                        "of label -> share") from None
    return prior_from_shares(shares, labels, f"prior {spec}")


def prior_from_shares(shares: object, labels: Sequence[str], source: str = "prior") -> torch.Tensor:
    """A mapping of label -> share as a normalized tensor in the model's label order (every label named, none
    negative); `source` names where it came from in the error."""
    if not isinstance(shares, dict):
        raise UserError(f"{source} must hold a JSON object of label -> share, e.g. {{\"{labels[0]}\": 0.5}}")
    unknown = sorted(map(str, set(shares) - set(labels)))
    missing = [label for label in labels if label not in shares]
    if unknown or missing:
        raise UserError(f"{source}: " + (f"{', '.join(unknown)} are not labels of this model" if unknown else
                        f"no share for {', '.join(missing)}") + f"; name every label ({', '.join(labels)})")
    values = [shares[label] for label in labels]
    if any(isinstance(v, bool) or not isinstance(v, int | float) or v < 0 for v in values) or sum(values) <= 0:
        raise UserError(f"{source}: shares must be numbers >= 0 with a positive sum")
    tensor = torch.tensor(values, dtype=torch.float)
    return tensor / tensor.sum()
