"""What fine-tuning composes around the core CharRNN (nameorigin.training.transfer fills it from a pretrained
checkpoint):
the pretrained country head, whose distribution joins the last state as input of the language head, and the
known-name table, whose country shares for a name found there add evidence to the logits."""

from __future__ import annotations

import torch
from torch import nn

from nameorigin.config import TransferShape
from nameorigin.model.known import KnownNames
from nameorigin.model.ngram import NgramHead


class TransferLayers(nn.Module):
    def __init__(self, shape: TransferShape, vocab_size: int, hidden_size: int, num_classes: int, ngram_max: int,
                 evidence_hidden: int = 0):
        super().__init__()
        classes = shape.source_classes
        self.feature_size = classes  # extra inputs of the language head
        # A grown vocabulary: each of the run's characters as the pretrained one (filled by transfer.initialize).
        self.register_buffer("source_tokens", torch.arange(vocab_size) if shape.source_vocab else None)
        source_vocab = shape.source_vocab or vocab_size
        self.source_head = nn.Linear(hidden_size, classes) if classes else None
        self.source_ngram = NgramHead(source_vocab, classes, shape.source_ngram_buckets, ngram_max,
                                      hashing=shape.source_ngram_hash) \
            if classes and shape.source_ngram_buckets else None
        self.known = self.evidence_head = None
        if shape.known_names:
            self.known = KnownNames(source_vocab, shape.known_countries, shape.known_names)
            # A hidden layer lets the evidence combine countries (a share of both GB and IE is not the sum of each).
            evidence_in = shape.known_countries + 1
            self.evidence_head = nn.Sequential(nn.Linear(evidence_in, evidence_hidden), nn.ReLU(),
                                               nn.Linear(evidence_hidden, num_classes)) if evidence_hidden \
                else nn.Linear(evidence_in, num_classes)

    def pretrained_modules(self) -> list[nn.Module]:
        """The modules loaded from the pretrained checkpoint (they may learn at a lower rate)."""
        return [m for m in (self.source_head, self.source_ngram) if m is not None]

    def features(self, h: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor,
                 boundaries: torch.Tensor | None = None) -> torch.Tensor | None:
        """The pretrained country model's distribution, or None without a country head."""
        if self.source_head is None:
            return None
        source = self.source_head(h)
        if self.source_ngram is not None:
            source = source + self.source_ngram(self.as_pretrained(tokens), lengths, boundaries)
        return source.softmax(-1)

    def evidence(self, tokens: torch.Tensor, lengths: torch.Tensor,
                 boundaries: torch.Tensor | None = None) -> torch.Tensor | None:
        """Logits from the exact name's country shares, or None without a known-name table. A name of parts is
        looked up by its parts where the table reads words, else by its family part (a surnames-only table)."""
        if self.known is None:
            return None
        if boundaries is not None and not self.known.reads_words:
            seen = boundaries.long().cumsum(1)
            tokens = tokens * (seen == seen[:, -1:])  # what precedes the last boundary becomes padding
        return self.evidence_head(self.known(self.as_pretrained(tokens), lengths))

    def as_pretrained(self, tokens: torch.Tensor) -> torch.Tensor:
        """The tokens in the pretrained vocabulary: unchanged unless the run's grew it."""
        return tokens if self.source_tokens is None else self.source_tokens[tokens.long()]
