"""A hashed character n-gram head: a linear model over a name's 1..n-grams whose scores are added to the
recurrent head's logits.

The n-grams are hashed from token indices inside the model, with tensor ops only (slices, arithmetic, a lookup),
so the same code runs in training, in the Predictor and in exported programs, and the checkpoint needs no
n-gram vocabulary: the hash is a pure function of the characters, the name's start and end, and the bucket count.

Each window's code is a polynomial in base = vocabulary size + 2, and a registered reduction (model.ngram_hash) turns
it into a bucket. "polynomial" keeps the code's residue mod the bucket count: where the base shares powers of two
with the bucket count, the residue forgets a window's first characters (with base 1,152 = 2^7 x 9 and 16,384
buckets, a trigram's first character moves its bucket only through the wrap mod PRIME), so "mixed" multiplies the
code by 2^32 / phi and reads the top of the product's low 32 bits (Fibonacci hashing), which every character moves.
Checkpoints written before the setting read "polynomial" (docs/configuration.md#architecture).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from nameorigin.config import NgramHash

PRIME = 2_147_483_647  # 2^31 - 1: every intermediate stays far below 2^63, so int64 arithmetic never wraps
GOLDEN = 2_654_435_769  # round(2^32 / phi), odd: a code below 2^31 times it stays below 2^63
LOW_32 = 1 << 32


def polynomial_bucket(code: torch.Tensor, buckets: int) -> torch.Tensor:
    return code % buckets


def mixed_bucket(code: torch.Tensor, buckets: int) -> torch.Tensor:
    """The top of (code x GOLDEN mod 2^32) scaled to [0, buckets): buckets * fraction, in integers (buckets < 2^31)."""
    return code * GOLDEN % LOW_32 * buckets // LOW_32


BUCKET_OF = {NgramHash.polynomial: polynomial_bucket, NgramHash.mixed: mixed_bucket}  # model.ngram_hash
NEW_HASH, OLD_HASH = str(NgramHash.mixed), str(NgramHash.polynomial)  # new models', and those written before it


def ngram_ids(tokens: torch.Tensor, lengths: torch.Tensor, vocab_size: int, max_n: int, buckets: int,
              boundaries: torch.Tensor | None = None, hashing: str = NEW_HASH) -> tuple[torch.Tensor, torch.Tensor]:
    """Bucket ids [B, K] of every 1..max_n-gram of each name with start/end markers, and which are real [B, K].
    tokens: [B, T] right-padded indices (< vocab_size); lengths: [B]. boundaries: [B, T], where a name of parts
    has the boundary between two parts (nameorigin.base.parts): a boundary ends one part and starts the next, like
    the end and start markers, so no n-gram holds one inside it, and each n-gram's hash carries its part's
    position (a family name's "son" is not a given name's). hashing: a key of BUCKET_OF."""
    bucket_of = BUCKET_OF[NgramHash(hashing)]
    batch, steps = tokens.shape
    start, end, base = vocab_size, vocab_size + 1, vocab_size + 2
    lengths = lengths.to(tokens.device)
    # [start, name..., pad...] with `end` written after each name, and max_n pads so that every n has the same
    # steps + 2 windows (those running past a name's end are masked): no branch depends on the length, which
    # keeps the graph exportable with a dynamic number of steps.
    framed = torch.cat([tokens.new_full((batch, 1), start), tokens, tokens.new_zeros(batch, max_n)], dim=1)
    position = torch.arange(framed.shape[1], device=tokens.device)
    framed = torch.where(position[None, :] == (lengths + 1)[:, None], torch.full_like(framed, end), framed)
    windows = steps + 2
    # The n-gram at i hashes as code_n(i) = (n base^n + sum_o x_{i+o} base^(n-1-o)) mod PRIME, so each n follows
    # from n - 1 in one step: code_n(i) = code_{n-1}(i) base + x_{i+n-1} + base^n (mod PRIME).
    ids, real = [], []
    code = torch.zeros((batch, windows), dtype=torch.long, device=tokens.device)
    if boundaries is not None:  # boundaries counted up to each framed position
        counted = torch.cat([boundaries.new_zeros(batch, 1), boundaries, boundaries.new_zeros(batch, max_n)],
                            dim=1).long().cumsum(1)
        part_tag = counted[:, :windows] * pow(base, max_n + 1, PRIME)  # the part of the window's first position
    for n in range(1, max_n + 1):
        code = (code * base + framed[:, n - 1 : n - 1 + windows] + pow(base, n, PRIME)) % PRIME
        inside = position[None, :windows] + n <= (lengths + 2)[:, None]  # the window ends at or before `end`
        if boundaries is None:
            ids.append(bucket_of(code, buckets))
        else:
            ids.append(bucket_of((code + part_tag) % PRIME, buckets))
            if n >= 3:  # a boundary strictly inside the window, at positions 1 .. n - 2 of it
                crossed = counted[:, n - 2 : n - 2 + windows] > counted[:, :windows]
                inside = inside & ~crossed
        real.append(inside)
    return torch.cat(ids, dim=1), torch.cat(real, dim=1)


class NgramHead(nn.Module):
    """Sum of one learned score vector per hashed n-gram: a linear n-gram classifier trained with the RNN."""

    def __init__(self, vocab_size: int, num_classes: int, buckets: int, max_n: int, dropout: float = 0.0,
                 hashing: str = NEW_HASH):
        super().__init__()
        self.vocab_size, self.buckets, self.max_n, self.dropout = vocab_size, buckets, max_n, dropout
        self.hashing = str(hashing)
        self.weight = nn.Parameter(torch.zeros(buckets, num_classes))  # starts silent: the RNN leads at first

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor,
                boundaries: torch.Tensor | None = None) -> torch.Tensor:
        ids, real = ngram_ids(tokens, lengths, self.vocab_size, self.max_n, self.buckets, boundaries, self.hashing)
        counted = real.unsqueeze(-1).to(self.weight.dtype)
        if self.training and self.dropout:  # model.ngram_dropout: each n-gram kept with chance 1 - p, scaled by 1/(1-p)
            kept = torch.rand(real.shape, device=real.device) >= self.dropout
            counted = counted * kept.unsqueeze(-1).to(self.weight.dtype) / (1 - self.dropout)
        return (F.embedding(ids, self.weight) * counted).sum(1)
