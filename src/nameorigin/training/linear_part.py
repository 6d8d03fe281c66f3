"""The model's linear part, fitted as the regularized linear model it competes with, and mixed with the network on
validation, so the model is never worse there than its linear part alone.

The n-gram head (nameorigin.model.ngram) is a linear model over a name's hashed character n-grams. Trained with
the network (same optimizer, learning rate and epochs) it memorizes its names within an epoch or two on large
tables. Here it is also fitted alone, before the network: softmax regression on the n-gram counts with an L2
penalty, full-batch L-BFGS to convergence (convex, so one answer), the penalty picked on validation from a grid.
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
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from nameorigin.model.ensemble import named_members
from nameorigin.model.ngram import ngram_ids
from nameorigin.training.margin import has_pairs, logits_in_order

log = logging.getLogger(__name__)

# L2 on the weights, strongest first (each fit warm-starts the next): those of this ladder whose product with the
# training names lies in PENALTY_TIMES_NAMES (the loss is a mean over names, so the right penalty falls as a table
# grows; on the 18-language corpus' 14k names: 1e-4, 3e-5, 1e-5).
LADDER = (1e-3, 3e-4, 1e-4, 3e-5, 1e-5, 3e-6, 1e-6, 3e-7, 1e-7, 3e-8)
PENALTY_TIMES_NAMES = (0.1, 3.0)
MIXES = tuple(i / 20 for i in range(21))  # the network's weight w, picked on validation
# Past this many (n-gram, label) products per pass the full-batch fit would take minutes: the head then trains
# with the network alone, and the run says so.
FIT_LIMIT = 3e9


@dataclass
class LinearPart:
    """What the fit found: the weights [buckets, labels] and bias, the penalty, and validation accuracies."""

    weight: torch.Tensor
    bias: torch.Tensor
    penalty: float
    val_acc: dict[str, float] = field(default_factory=dict)  # penalty -> accuracy of the linear part alone
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {"penalty": self.penalty, "val_acc_by_penalty": self.val_acc, "seconds": round(self.seconds, 1)}


def design(dataset: Any, vocab_size: int, max_n: int, buckets: int) -> torch.Tensor:
    """The n-gram count matrix [names, buckets] of a split, sparse (CSR), hashed exactly as the n-gram head."""
    ids, real = ngram_ids(dataset.tokens.long(), dataset.lengths, vocab_size, max_n, buckets)
    rows = torch.arange(len(ids))[:, None].expand_as(ids)
    index = torch.stack([rows[real], ids[real]])
    counts = torch.sparse_coo_tensor(index, torch.ones(index.shape[1]), (len(ids), buckets),
                                     check_invariants=False).coalesce()  # built from in-range ids
    with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta": nothing a user can act on
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support", category=UserWarning)
        return counts.to_sparse_csr()


def targets_of(dataset: Any, soft: bool) -> torch.Tensor:
    """The labels, or each name's label distribution when the model trains against shares."""
    if not soft:
        return dataset.targets
    shares = dataset.languages.float()
    return shares / shares.sum(1, keepdim=True).clamp_min(1e-12)


class CountsTimesWeight(torch.autograd.Function):
    """counts @ weight for a sparse CSR `counts`, its backward through the transpose built once: autograd's own
    backward of a sparse product transposes the matrix at every step, which dominates the fit on a large table."""

    @staticmethod
    def forward(ctx: Any, weight: torch.Tensor, counts: torch.Tensor, transposed: torch.Tensor) -> torch.Tensor:
        ctx.transposed = transposed
        return counts @ weight

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return ctx.transposed @ grad, None, None


def transpose(counts: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support", category=UserWarning)
        return counts.to_sparse_coo().t().coalesce().to_sparse_csr()


def fit_penalized(features: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None, labels: int,
                  penalty: float, start: tuple[torch.Tensor, torch.Tensor] | None = None,
                  iterations: int = 100) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax regression with penalty/2 ||W||^2, full-batch L-BFGS (strong Wolfe line search)."""
    weight = (torch.zeros(features.shape[1], labels) if start is None else start[0].clone()).requires_grad_()
    bias = (torch.zeros(labels) if start is None else start[1].clone()).requires_grad_()
    optimizer = torch.optim.LBFGS([weight, bias], lr=1, max_iter=iterations, history_size=20,
                                  line_search_fn="strong_wolfe", tolerance_grad=1e-7, tolerance_change=1e-10)
    transposed = transpose(features)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        per_name = F.cross_entropy(CountsTimesWeight.apply(weight, features, transposed) + bias, targets,
                                   reduction="none")
        loss = per_name.mean() if weights is None else (per_name * weights).sum() / weights.sum()
        loss = loss + penalty / 2 * (weight * weight).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return weight.detach(), bias.detach()


def fits(datamodule: Any, buckets: int, max_n: int) -> bool:
    """Whether the full-batch fit is cheap enough for this table (FIT_LIMIT)."""
    train = datamodule.datasets["train"]
    products = float(train.lengths.sum() + 2 * len(train)) * max_n * len(datamodule.labels)
    return buckets > 0 and products <= FIT_LIMIT


def penalties_for(names: int) -> tuple[float, ...]:
    low, high = PENALTY_TIMES_NAMES
    fitting = tuple(p for p in LADDER if low <= p * names <= high)
    return fitting or ((LADDER[0],) if LADDER[0] * names < low else (LADDER[-1],))  # a tiny or a huge table


def fit_linear_part(datamodule: Any, buckets: int, max_n: int, soft: bool,
                    penalties: tuple[float, ...] | None = None) -> LinearPart:
    """The linear part on the training split, its penalty picked on validation (accuracy against each name's
    label, or majority label for shares)."""
    start_time = time.perf_counter()
    vocab, labels = len(datamodule.vocab), len(datamodule.labels)
    train, val = datamodule.datasets["train"], datamodule.datasets["val"]
    x_train, x_val = design(train, vocab, max_n, buckets), design(val, vocab, max_n, buckets)
    y_train = targets_of(train, soft)
    best, start, accuracy = None, None, {}
    for penalty in penalties or penalties_for(len(train)):
        start = fit_penalized(x_train, y_train, train.weights, labels, penalty, start)
        accuracy[penalty] = float(((x_val @ start[0] + start[1]).argmax(1) == val.targets).double().mean())
        if best is None or accuracy[penalty] > accuracy[best[0]]:
            best = penalty, start
    penalty, (weight, bias) = best
    return LinearPart(weight, bias, penalty, accuracy, time.perf_counter() - start_time)


def refit_linear_part(datamodule: Any, buckets: int, max_n: int, soft: bool, penalty: float) -> LinearPart:
    """The linear part again on the refit's training split (train + validation), with the penalty picked before."""
    start_time = time.perf_counter()
    train = datamodule.datasets["train"]
    weight, bias = fit_penalized(design(train, len(datamodule.vocab), max_n, buckets), targets_of(train, soft),
                                 train.weights, len(datamodule.labels), penalty)
    return LinearPart(weight, bias, penalty, seconds=time.perf_counter() - start_time)


@torch.no_grad()
def linear_logits(part: LinearPart, dataset: Any, vocab_size: int, max_n: int) -> torch.Tensor:
    return design(dataset, vocab_size, max_n, part.weight.shape[0]) @ part.weight + part.bias


def pick_mix(network: torch.Tensor, linear: torch.Tensor, targets: torch.Tensor) -> tuple[float, dict[str, float]]:
    """The network's weight w whose mixture of the two parts' logits is most accurate on validation (the larger
    w on a tie), and the accuracies of the linear part, the network and the mixture."""
    accuracy = {w: float((((1 - w) * linear + w * network).argmax(1) == targets).double().mean()) for w in MIXES}
    best = max(MIXES, key=lambda w: (accuracy[w], w))
    return best, {"linear": accuracy[0.0], "network": accuracy[1.0], "combined": accuracy[best]}


@torch.no_grad()
def mix_into(net: Any, part: LinearPart, w: float) -> None:
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


def mix_best(model: Any, datamodule: Any) -> dict[str, Any] | None:
    """Fit the linear part and mix it into the model's network (best.ckpt's weights, in memory) at the weight
    validation picks: the mixture to record, or None (and a log line saying why) where it does not apply."""
    why_not = applies(model, datamodule)
    if why_not:
        log.info("linear part: trained with the network only (%s)", why_not)
        return None
    config, net = model.config, model.net
    part = fit_linear_part(datamodule, config.ngram_buckets, config.ngram_max, bool(config.soft_targets))
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
    return mixture


def mix_refit(model: Any, datamodule: Any, mixture: dict[str, Any]) -> dict[str, Any]:
    """The refit's linear part, fitted on its training split (train + validation) with the penalty picked before,
    mixed in at the network weight picked before: the refit's mixture to record."""
    config = model.config
    part = refit_linear_part(datamodule, config.ngram_buckets, config.ngram_max, bool(config.soft_targets),
                             mixture["penalty"])
    mix_into(model.net.cpu(), part, mixture["network_weight"])
    return {**mixture, "linear_fit": {**mixture["linear_fit"], "refit_seconds": round(part.seconds, 1)}}


def describe(mixture: dict[str, Any]) -> str:
    """One line for train.log and the card: which part carries how much."""
    acc = mixture["val_acc"]
    return (f"validation accuracy: linear part alone {acc['linear']:.4f}, network alone {acc['network']:.4f}, "
            f"combined {acc['combined']:.4f} (the network's weight {mixture['network_weight']:.2f}, the linear "
            f"part's {1 - mixture['network_weight']:.2f}; L2 penalty {mixture['penalty']:g})")
