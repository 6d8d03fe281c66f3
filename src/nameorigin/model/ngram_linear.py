"""The project's one n-gram linear model: a name's hashed character n-grams (nameorigin.model.ngram's hashing, the
n-gram head's own, with the name's start and end) counted into a sparse matrix, and a softmax over the labels
fitted on those counts. Three parts of the project use it: the model's linear part (fitted alone, then mixed with
the network), the margin's baseline on tables past the TF-IDF LR's reach, and the audit's out-of-sample
probabilities.

Two fits of the same model. `fit_full`: an L2 penalty, full-batch L-BFGS to convergence (convex, so one answer),
the penalty picked on validation from a ladder that follows the table's size (`fit_on_validation`). `fit_batches`:
for tables past FIT_LIMIT, where a full pass takes minutes, sparse Adam on shuffled batches (only the n-gram rows a
batch touches are updated), stopped after the epoch validation likes best, or after a fixed count without one.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from nameorigin.base.parts import BOUNDARY
from nameorigin.base.textnorm import build_vocab, encode_names
from nameorigin.model.ngram import NEW_HASH, ngram_ids

# L2 on the weights, strongest first (each fit warm-starts the next): those of this ladder whose product with the
# training names lies in PENALTY_TIMES_NAMES (the loss is a mean over names, so the right penalty falls as a table
# grows). Validation's best product differs by two orders between tables (the corpus' lies near the range's low end,
# a first-name or NaNa sample's near its high end), so the range spans both, and the ladder stops once it has
# passed the best: docs/data-and-evaluation.md#every-runs-margin-and-the-models-linear-part
LADDER = (1e-3, 3e-4, 1e-4, 3e-5, 1e-5, 3e-6, 1e-6, 3e-7, 1e-7, 3e-8)
PENALTY_TIMES_NAMES = (0.1, 30.0)
PAST_THE_BEST = 2  # fits below the best one, in a row, after which weaker penalties are not tried
# Past this many (n-gram, label) products per pass the full-batch fit would take minutes: fit_batches stands in.
FIT_LIMIT = 3e9
COUNT_CHUNK = 65_536  # names counted at a time (NameCounts)
BATCH, LEARNING_RATE, MIN_UPDATES = 512, 0.01, 1000  # fit_batches: a small table gets more than a few epochs


@dataclass
class LinearFit:
    """A fitted n-gram softmax: weights [buckets, labels], bias, and how it was picked (the penalty, or 0 for the
    batch fit; validation accuracy by penalty or by epoch)."""

    weight: torch.Tensor
    bias: torch.Tensor
    penalty: float
    val_acc: dict = field(default_factory=dict)
    seconds: float = 0.0
    unit_rows: bool = False  # fitted on each name's counts scaled to unit length (the batch fit)
    hashing: str = NEW_HASH  # the n-gram hash its rows are read through (nameorigin.model.ngram.BUCKET_OF)

    @torch.no_grad()
    def logits(self, counted: torch.Tensor) -> torch.Tensor:
        return (unit_length(counted) if self.unit_rows else counted) @ self.weight + self.bias

    def summary(self) -> dict[str, Any]:
        return {"penalty": self.penalty, "val_acc_by_penalty": self.val_acc, "seconds": round(self.seconds, 1)}


def label_ranks(scores: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """How many labels score above each row's true label (0: it is the top answer); a truth of -1 (a label the
    fit never had) ranks last."""
    true_score = scores.gather(1, truth.clamp_min(0)[:, None])
    return torch.where(truth >= 0, (scores > true_score).sum(1), scores.shape[1])


def precision_at(ranks: torch.Tensor, labels: int) -> dict[int, float]:
    """Precision@1..5 (at most the number of labels): how often the true label is among the top K answers."""
    return {k: float((ranks < k).double().mean()) for k in range(1, min(5, labels) + 1)}


def csr(matrix: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta": nothing a user can act on
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support", category=UserWarning)
        return matrix.to_sparse_csr()


def counts(tokens: torch.Tensor, lengths: torch.Tensor, vocab_size: int, max_n: int, buckets: int,
           boundary: int = -1, hashing: str = NEW_HASH) -> torch.Tensor:
    """The n-gram count matrix [names, buckets] of encoded names, sparse (CSR), hashed exactly as the n-gram head
    (for names of parts, `boundary` is the boundary's index: no n-gram across it)."""
    tokens = tokens.long()
    ids, real = ngram_ids(tokens, lengths, vocab_size, max_n, buckets, tokens == boundary if boundary >= 0 else None,
                          hashing)
    rows = torch.arange(len(ids))[:, None].expand_as(ids)
    index = torch.stack([rows[real], ids[real]])
    return csr(torch.sparse_coo_tensor(index, torch.ones(index.shape[1]), (len(ids), buckets),
                                       check_invariants=False).coalesce())  # built from in-range ids


class NameCounts:
    """Count matrices of names given as text: their characters indexed by the vocabulary of the names it was made
    from (the training names; a character they lack counts as unknown). Names of parts count no n-gram across
    the boundary, as the model's head does."""

    def __init__(self, names: Sequence[str], max_n: int = 4, buckets: int = 2**18, hashing: str = NEW_HASH):
        self.vocab, self.max_n, self.buckets, self.hashing = build_vocab(names), max_n, buckets, hashing
        self.index = {c: i for i, c in enumerate(self.vocab)}
        self.boundary = self.index.get(BOUNDARY, -1)

    def __call__(self, names: Sequence[str]) -> torch.Tensor:
        names = list(names)
        # By chunks: the hashed ids of a whole table at once ([names, 4 x longest] int64, then sorted) take
        # several times the memory of the matrix they make.
        return stacked([self.counted(names[start : start + COUNT_CHUNK])
                        for start in range(0, max(len(names), 1), COUNT_CHUNK)])

    def counted(self, names: list[str]) -> torch.Tensor:
        tokens, lengths = encode_names(names, self.index)
        return counts(tokens, lengths, len(self.vocab), self.max_n, self.buckets, self.boundary, self.hashing)


def stacked(matrices: list[torch.Tensor]) -> torch.Tensor:
    """CSR matrices of equal width, one below the other (torch.cat does not take CSR tensors)."""
    if len(matrices) == 1:
        return matrices[0]
    crows = [matrices[0].crow_indices()]
    for matrix in matrices[1:]:
        crows.append(matrix.crow_indices()[1:] + crows[-1][-1])
    shape = (sum(matrix.shape[0] for matrix in matrices), matrices[0].shape[1])
    return torch.sparse_csr_tensor(torch.cat(crows), torch.cat([matrix.col_indices() for matrix in matrices]),
                                   torch.cat([matrix.values() for matrix in matrices]), shape, check_invariants=False)


def unit_length(counted: torch.Tensor) -> torch.Tensor:
    """Each row of a CSR count matrix divided by its L2 norm (a name's n-gram profile, whatever its length)."""
    crow, values = counted.crow_indices(), counted.values()
    rows = torch.repeat_interleave(torch.arange(len(crow) - 1), crow.diff())
    norms = torch.zeros(len(crow) - 1).index_add_(0, rows, values * values).sqrt().clamp_min(1e-12)
    return torch.sparse_csr_tensor(crow, counted.col_indices(), values / norms[rows], tuple(counted.shape),
                                   check_invariants=False)


def products(counted: torch.Tensor, labels: int) -> float:
    """(n-gram, label) products of one pass: what a full-batch fit costs."""
    return float(counted.values().numel()) * labels


class CountsTimesWeight(torch.autograd.Function):
    """counts @ weight for a sparse CSR `counts`, its backward through the transpose built once: autograd's own
    backward of a sparse product transposes the matrix at every step, which dominates the fit on a large table."""

    @staticmethod
    def forward(ctx: Any, weight: torch.Tensor, counted: torch.Tensor, transposed: torch.Tensor) -> torch.Tensor:
        ctx.transposed = transposed
        return counted @ weight

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return ctx.transposed @ grad, None, None


def transpose(counted: torch.Tensor) -> torch.Tensor:
    return csr(counted.to_sparse_coo().t().coalesce())


def fit_full(counted: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None, labels: int,
             penalty: float, start: tuple[torch.Tensor, torch.Tensor] | None = None,
             iterations: int = 100) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax regression with penalty/2 ||W||^2, full-batch L-BFGS (strong Wolfe line search). targets: label
    indices, or one distribution per name; weights: one per name, or None."""
    weight = (torch.zeros(counted.shape[1], labels) if start is None else start[0].clone()).requires_grad_()
    bias = (torch.zeros(labels) if start is None else start[1].clone()).requires_grad_()
    optimizer = torch.optim.LBFGS([weight, bias], lr=1, max_iter=iterations, history_size=20,
                                  line_search_fn="strong_wolfe", tolerance_grad=1e-7, tolerance_change=1e-10)
    transposed = transpose(counted)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        per_name = F.cross_entropy(CountsTimesWeight.apply(weight, counted, transposed) + bias, targets,
                                   reduction="none")
        loss = per_name.mean() if weights is None else (per_name * weights).sum() / weights.sum()
        loss = loss + penalty / 2 * (weight * weight).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return weight.detach(), bias.detach()


def penalties_for(names: int) -> tuple[float, ...]:
    low, high = PENALTY_TIMES_NAMES
    fitting = tuple(p for p in LADDER if low <= p * names <= high)
    return fitting or ((LADDER[0],) if LADDER[0] * names < low else (LADDER[-1],))  # a tiny or a huge table


def fit_on_validation(train: tuple, val: tuple, labels: int, penalties: Sequence[float] | None = None,
                      score: Callable[[torch.Tensor], float] | None = None) -> LinearFit:
    """fit_full on train = (counts, targets, weights or None) for each penalty of the ladder (or `penalties`),
    strongest first, the one most accurate on val = (counts, label indices) kept (or scored highest by `score`,
    which reads the validation names' predicted labels); once PAST_THE_BEST fits in a row fall short of it, the
    weaker ones are not fitted (validation accuracy rises to one peak and falls past it)."""
    began = time.perf_counter()
    (x_train, y_train, w_train), (x_val, y_val) = train, val
    score = score or (lambda predicted: float((predicted == y_val).double().mean()))
    best, start, accuracy, short = None, None, {}, 0
    for penalty in penalties or penalties_for(x_train.shape[0]):
        start = fit_full(x_train, y_train, w_train, labels, penalty, start)
        accuracy[penalty] = score((x_val @ start[0] + start[1]).argmax(1))
        short = 0 if best is None or accuracy[penalty] > accuracy[best[0]] else short + 1
        if short == 0:
            best = penalty, start
        elif short == PAST_THE_BEST:
            break
    penalty, (weight, bias) = best
    return LinearFit(weight, bias, penalty, accuracy, time.perf_counter() - began)


def fit_batches(counted: torch.Tensor, targets: torch.Tensor, labels: int, epochs: int = 5, seed: int = 0,
                val: tuple | None = None) -> LinearFit:
    """The same softmax by sparse Adam on shuffled batches of BATCH names (one-hot targets), each name's counts
    scaled to unit length (Adam's step is set for that scale; LinearFit.logits scales alike). With val = (counts,
    label indices): validated after each epoch, the best epoch's weights kept; without: `epochs` epochs (more on
    a small table, MIN_UPDATES steps at least)."""
    began = time.perf_counter()
    counted = unit_length(counted)
    torch.manual_seed(seed)
    table = torch.nn.EmbeddingBag(counted.shape[1], labels, mode="sum", sparse=True)
    torch.nn.init.zeros_(table.weight)
    bias = torch.nn.Parameter(torch.zeros(labels))
    optimizers = [torch.optim.SparseAdam(table.parameters(), lr=LEARNING_RATE),
                  torch.optim.Adam([bias], lr=LEARNING_RATE)]
    rows, order = counted.shape[0], np.random.default_rng(seed)
    batches = max(rows // BATCH, 1)
    accuracy, best = {}, None
    for epoch in range(1, (epochs if val is not None else max(epochs, -(-MIN_UPDATES // batches))) + 1):
        for batch in np.array_split(order.permutation(rows), batches):
            loss = F.cross_entropy(table(*bags(counted, batch)) + bias, targets[torch.from_numpy(batch)])
            for optimizer in optimizers:
                optimizer.zero_grad(set_to_none=True)
            loss.backward()
            for optimizer in optimizers:
                optimizer.step()
        if val is not None:
            fitted = LinearFit(table.weight.detach(), bias.detach(), 0.0, unit_rows=True)
            accuracy[epoch] = float((fitted.logits(val[0]).argmax(1) == val[1]).double().mean())
            if best is None or accuracy[epoch] > accuracy[best[0]]:
                best = epoch, (table.weight.detach().clone(), bias.detach().clone())
    weight, last_bias = best[1] if best else (table.weight.detach(), bias.detach())
    return LinearFit(weight, last_bias, 0.0, accuracy, time.perf_counter() - began, unit_rows=True)


def bags(counted: torch.Tensor, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Some rows of a CSR matrix as EmbeddingBag's flat input: column ids, each row's first position, the counts."""
    crow, col, values = counted.crow_indices(), counted.col_indices(), counted.values()
    index = torch.from_numpy(rows)
    starts, ends = crow[index], crow[index + 1]
    sizes = ends - starts
    offsets = torch.cumsum(sizes, 0) - sizes
    flat = torch.repeat_interleave(starts - offsets, sizes) + torch.arange(int(sizes.sum()))
    return col[flat], offsets, values[flat]
