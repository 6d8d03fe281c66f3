"""The model's linear part, fitted as the regularized linear model it competes with, and mixed with the network on
validation, so the model is never worse there than its linear part alone.

The n-gram head (nameorigin.model.ngram) is a linear model over a name's hashed character n-grams. Trained with
the network (same optimizer, learning rate and epochs) it memorizes its names within an epoch or two on large
tables. Here it is also fitted alone (nameorigin.model.ngram_linear, the project's one n-gram linear model):
softmax regression on the n-gram counts with an L2 penalty, full-batch L-BFGS to convergence (convex, so one
answer), the penalty picked on validation from a ladder.
Then the network trains as it always has, its own n-gram head included, and the two are mixed:

    logits = (1 - w) * linear(name) + w * network(name)

with w in [0, 1] picked on validation (accuracy; the larger w on a tie). Both parts use the same hashing, so the
mixture is again one network of the same shape (its n-gram table (1 - w) W_linear + w W_network, its recurrent
head scaled by w): checkpoints, exports and serving are unchanged. w = 0 is the linear part alone and w = 1 the
network alone, so on validation the model is at least as good as either. A mixture of log-linear models is the
product of their distributions (a log-linear pool), so the probabilities stay those of one softmax.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

from nameorigin.evaluation.linear_fit import fit_linear_model, fits, linear_logits, refit_linear_model
from nameorigin.fit.split_logits import has_pairs, logits_in_order
from nameorigin.model.ensemble import named_members
from nameorigin.model.ngram_linear import FIT_LIMIT, LinearFit

log = logging.getLogger(__name__)

MIXES = tuple(i / 20 for i in range(21))  # the network's weight w, picked on validation


def pick_mix(network: torch.Tensor, linear: torch.Tensor, targets: torch.Tensor) -> tuple[float, dict[str, float]]:
    """The network's weight w whose mixture of the two parts' logits is most accurate on validation (the larger
    w on a tie), and the accuracies of the linear part, the network and the mixture."""
    accuracy = {w: float((((1 - w) * linear + w * network).argmax(1) == targets).double().mean()) for w in MIXES}
    best = max(MIXES, key=lambda w: (accuracy[w], w))
    return best, {"linear": accuracy[0.0], "network": accuracy[1.0], "combined": accuracy[best]}


@torch.no_grad()
def mix_into(net: Any, part: LinearFit, w: float) -> None:
    """Make `net` (a CharRNN whose readout is head + n-gram head) compute (1 - w) linear + w network."""
    net.head.weight.mul_(w)
    net.head.bias.mul_(w).add_((1 - w) * part.bias)
    net.ngram.weight.mul_(w).add_((1 - w) * part.weight)


@dataclass
class Mixture:
    """What the checkpoint records about its two parts (plain types: torch.load(weights_only=True))."""

    network_weight: float
    penalty: float
    val_acc: dict[str, float]  # linear, network, combined: on best.ckpt's validation split
    fitted_on: str = "the training split; the penalty and the network's weight picked on the validation split"

    def plain(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LinearMix:
    """The linear part as mixed into a model: what its checkpoint records, and the fitted linear model itself (the
    margin's baseline, kept in memory)."""

    mixture: dict[str, Any]
    fit: LinearFit


def applies(model: Any, datamodule: Any) -> str | None:
    """Why the linear part is not fitted for this run, or None when it is."""
    config = model.config
    if not config.linear_part:
        return "model.linear_part=false"
    if not config.ngram_buckets:
        return "no n-gram head (model.ngram_buckets=0)"
    if config.init_from or model.net.transfer is not None:
        return "a fine-tuned model's head reads the pretrained parts too"
    if not has_pairs(datamodule):
        return "the surnames pretraining trains against country shares of its own"
    if not fits(datamodule, config.ngram_buckets, config.ngram_max):
        return f"the table is past the full-batch fit's size ({FIT_LIMIT:.0e} n-gram x label products a pass)"
    return None


def mix_best(model: Any, datamodule: Any) -> LinearMix | None:
    """Fit the linear part and mix it into the model's network (best.ckpt's weights, in memory) at the weight
    validation picks: the mixture to record and the fit, or None (and a log line saying why) where it does not
    apply."""
    why_not = applies(model, datamodule)
    if why_not:
        log.info("linear part: trained with the network only (%s)", why_not)
        return None
    config, net = model.config, model.net
    part = fit_linear_model(datamodule, config.ngram_buckets, config.ngram_max, bool(config.soft_targets),
                            hashing=config.ngram_hash)
    val = datamodule.datasets["val"]
    offset = net.logit_offset
    network_weight, accuracy = pick_mix(logits_in_order(net, val, decided=False) + offset,
                                        linear_logits(part, val, len(datamodule.vocab), config.ngram_max) + offset,
                                        val.targets)
    for _, member in named_members(net):  # an ensemble's mean logits mix as each member's do
        mix_into(member, part, network_weight)
    mixture = Mixture(network_weight, part.penalty, accuracy).plain()
    mixture["linear_fit"] = part.summary()
    log.info("linear part fitted alone in %.1f s; %s", part.seconds, describe(mixture))
    return LinearMix(mixture, part)


def mix_refit(model: Any, datamodule: Any, mixture: dict[str, Any]) -> LinearMix:
    """The refit's linear part, fitted on its training split (train + validation) with the penalty picked before,
    mixed in at the network weight picked before: the refit's mixture to record, and its fit."""
    config = model.config
    part = refit_linear_model(datamodule, config.ngram_buckets, config.ngram_max, bool(config.soft_targets),
                             mixture["penalty"], config.ngram_hash)
    mix_into(model.net.cpu(), part, mixture["network_weight"])
    return LinearMix({**mixture, "linear_fit": {**mixture["linear_fit"], "refit_seconds": round(part.seconds, 1)}},
                     replace(part, val_acc=mixture["linear_fit"]["val_acc_by_penalty"]))


def describe(mixture: dict[str, Any]) -> str:
    """One line for train.log and the card: which part carries how much."""
    acc = mixture["val_acc"]
    return (f"validation accuracy: linear part alone {acc['linear']:.4f}, network alone {acc['network']:.4f}, "
            f"combined {acc['combined']:.4f} (the network's weight {mixture['network_weight']:.2f}, the linear "
            f"part's {1 - mixture['network_weight']:.2f}; L2 penalty {mixture['penalty']:g})")
