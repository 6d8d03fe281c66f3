"""The contenders and the clock of benchmarks/benchmark.py: the length-bucketed batches it times, torch's fused RNNs
and the PyTorch tutorial's one-name-at-a-time model to compare the cell loop against, and round-robin timing.

Kept apart from the script so that the script holds only what is measured and how it is reported."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from nameorigin.config import ModelConfig
from nameorigin.model.cells import cell_spec
from nameorigin.model.charrnn import CharRNN


def make_batches(names: list[str], batch_size: int, count: int, vocab: int, seed: int = 0,
                 one_length: bool = False) -> list[tuple]:
    """Length-bucketed batches, as the DataModule serves them; one_length: each of names of one length, as the
    fast path's loader serves them (nameorigin.fit.graphed)."""
    rng = random.Random(seed)
    picked = sorted(rng.sample(names, min(len(names), batch_size * count)), key=len)
    if one_length:
        by_length: dict[int, list[str]] = {}
        for name in picked:
            by_length.setdefault(len(name), []).append(name)
        chunks = [group[i : i + batch_size] for group in by_length.values()
                  for i in range(0, len(group) - batch_size + 1, batch_size)]
    else:
        chunks = [picked[i : i + batch_size] for i in range(0, len(picked) - batch_size + 1, batch_size)]
    batches = []
    for chunk in chunks:
        lengths = torch.tensor([len(n) for n in chunk])
        tokens = torch.zeros(len(chunk), int(lengths.max()), dtype=torch.long)
        for row, name in enumerate(chunk):
            tokens[row, : len(name)] = torch.tensor([2 + ord(c) % (vocab - 2) for c in name])
        batches.append((tokens, lengths, torch.randint(0, 18, (len(chunk),))))
    rng.shuffle(batches)
    return batches


def char_rnn(vocab: int, cell: str, hidden_size: int, embedding_dim: int, impl: str = "autograd",
             ngram_buckets: int = 0) -> CharRNN:
    """The project's network from its config, without dropout (the fused contenders have none)."""
    config = ModelConfig(cell=cell, hidden_size=hidden_size, embedding_dim=embedding_dim, impl=impl,
                         ngram_buckets=ngram_buckets, dropout=0.0)
    return CharRNN(config, vocab, 18)


class FusedClassifier(nn.Module):
    """The cell's torch reference (cuDNN/oneDNN-backed nn.RNN, nn.GRU, nn.LSTM) on packed sequences: the speed to
    match."""

    def __init__(self, cell: str, vocab: int, classes: int, hidden: int, embedding: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embedding, padding_idx=0)
        self.rnn = cell_spec(cell).torch_reference(embedding, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = pack_padded_sequence(self.embedding(tokens), lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, final = self.rnn(packed)
        return self.head((final[0] if isinstance(final, tuple) else final)[0])


def train_run(model: nn.Module, batches: list[tuple], device: str, capture_every: int = 0) -> float:
    """Names per second for one pass of forward + backward + AdamW step over `batches`."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    start = time.perf_counter()
    for step, (tokens, lengths, targets) in enumerate(batches):
        capture = capture_every > 0 and step % capture_every == 0
        kwargs = {"capture": True} if capture else {}
        logits = model(tokens.to(device), lengths.to(device), **kwargs)
        loss = F.cross_entropy(logits, targets.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if capture:  # the callback's work: split into per-step pieces, sum, compare, norms
            pieces = model.capture["cell"].contributions()
            for name, piece in pieces.items():
                grad = getattr(model.cell, name).grad
                float((piece.sum(0) - grad).norm() / grad.norm())
                piece.flatten(1).norm(dim=1).tolist()
            model.capture = None
        optimizer.step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return sum(len(b[1]) for b in batches) / (time.perf_counter() - start)


def alternate(contenders: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """Run the contenders round-robin `repeats` times (after one warm-up each); median names/s."""
    for run in contenders.values():
        run()
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, run in contenders.items():
            samples[name].append(run())
    return {name: statistics.median(values) for name, values in samples.items()}


class TutorialRNN(nn.Module):
    """The PyTorch tutorial's model: i2h and i2o on [one-hot char, hidden], LogSoftmax, one name at a time."""

    def __init__(self, vocab: int, hidden: int, classes: int):
        super().__init__()
        self.vocab, self.hidden = vocab, hidden
        self.i2h, self.i2o = nn.Linear(vocab + hidden, hidden), nn.Linear(vocab + hidden, classes)

    def forward(self, codes: list[int]) -> torch.Tensor:
        hidden, output = torch.zeros(1, self.hidden), None
        for code in codes:
            combined = torch.cat([F.one_hot(torch.tensor([code]), self.vocab).float(), hidden], dim=1)
            hidden, output = self.i2h(combined), self.i2o(combined)
        return F.log_softmax(output, dim=1)
