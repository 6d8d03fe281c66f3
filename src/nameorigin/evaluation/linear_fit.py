"""The n-gram linear model the network competes with, fitted alone on a run's own split: softmax regression on a
name's hashed character n-gram counts (hashed exactly as the model's n-gram head), an L2 penalty picked on
validation (nameorigin.model.ngram_linear). The run mixes it into the network (nameorigin.training.linear_mix) and
the margin compares against it (nameorigin.evaluation.margin)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import torch

from nameorigin.data.batching import TRAINED_ON
from nameorigin.model import ngram_linear
from nameorigin.model.ngram import NEW_HASH
from nameorigin.model.ngram_linear import FIT_LIMIT, LinearFit


def design(dataset: Any, vocab_size: int, max_n: int, buckets: int, hashing: str = NEW_HASH) -> torch.Tensor:
    """A split's n-gram count matrix, hashed exactly as the model's n-gram head (`hashing`: its model.ngram_hash)."""
    return ngram_linear.counts(dataset.tokens, dataset.lengths, vocab_size, max_n, buckets,
                               getattr(dataset, "boundary", -1), hashing)


def targets_of(dataset: Any, soft: bool) -> torch.Tensor:
    """The labels, or each name's label distribution when the model trains against shares."""
    if not soft:
        return dataset.targets
    shares = dataset.languages.float()
    return shares / shares.sum(1, keepdim=True).clamp_min(1e-12)


def fits(datamodule: Any, buckets: int, max_n: int) -> bool:
    """Whether the full-batch fit is cheap enough for this table (ngram_linear.FIT_LIMIT), judged before the
    counts are built."""
    train = datamodule.datasets["train"]
    products = float(train.lengths.sum() + 2 * len(train)) * max_n * len(datamodule.labels)
    return buckets > 0 and products <= FIT_LIMIT


def fit_linear_model(datamodule: Any, buckets: int, max_n: int, soft: bool,
                    penalties: tuple[float, ...] | None = None, train: Any = None,
                    hashing: str = NEW_HASH) -> LinearFit:
    """The linear part on the training split (or `train`, an encoded split), its penalty picked on validation
    (accuracy against each name's label, or majority label for shares)."""
    vocab = len(datamodule.vocab)
    train, val = train or datamodule.datasets["train"], datamodule.datasets["val"]
    picked = ngram_linear.fit_on_validation(
        (design(train, vocab, max_n, buckets, hashing), targets_of(train, soft), train.weights),
        (design(val, vocab, max_n, buckets, hashing), val.targets), len(datamodule.labels), penalties)
    return replace(picked, hashing=str(hashing))


def refit_linear_model(datamodule: Any, buckets: int, max_n: int, soft: bool, penalty: float,
                       hashing: str = NEW_HASH) -> LinearFit:
    """The linear part again on the refit's training split (train + validation), with the penalty picked before."""
    start_time = time.perf_counter()
    train = datamodule.datasets["train"]
    weight, bias = ngram_linear.fit_full(design(train, len(datamodule.vocab), max_n, buckets, hashing),
                                         targets_of(train, soft), train.weights, len(datamodule.labels), penalty)
    return LinearFit(weight, bias, penalty, seconds=time.perf_counter() - start_time, hashing=str(hashing))


def fit_alone(datamodule: Any, buckets: int, max_n: int, soft: bool, hashing: str = NEW_HASH) -> LinearFit:
    """The linear part alone, fitted as a run that mixes it in would (the margin's baseline where the served
    model has none: a fine-tuned model): on the training split, its penalty picked on validation, and after a
    refit again on train + validation with that penalty."""
    if getattr(datamodule, "trained_on", "train") != TRAINED_ON:
        return fit_linear_model(datamodule, buckets, max_n, soft, hashing=hashing)
    picked = fit_linear_model(datamodule, buckets, max_n, soft, train=datamodule.encode(datamodule.splits["train"]),
                              hashing=hashing)
    return replace(refit_linear_model(datamodule, buckets, max_n, soft, picked.penalty, hashing),
                   val_acc=picked.val_acc)


def linear_logits(part: LinearFit, dataset: Any, vocab_size: int, max_n: int) -> torch.Tensor:
    return part.logits(design(dataset, vocab_size, max_n, part.weight.shape[0], part.hashing))
