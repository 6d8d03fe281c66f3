"""How unlike the training names a name is: the mean log-probability of its characters under a character
trigram model of the training names, p(c | a b) = (n(abc) + alpha) / (n(ab) + alpha * V), with the start and
end markers of the n-gram head (nameorigin.model.ngram) and its hashing, so it runs on tensors.

The classifier's own confidence cannot say "none of these": a name from a language it never saw still lands on
the nearest label, often with a high probability (docs/serving.md#abstention-target-priors-and-dataframes).
Letter statistics can: a Finnish "Virtanen" spells trigrams the 18 tutorial languages rarely do. The counts are
kept sparse and plain (the non-zero buckets and their counts), so a checkpoint read weights-only and an export's
JSON sidecar both carry them.
"""

from __future__ import annotations

import torch

from nameorigin.model.ngram import NEW_HASH, OLD_HASH, ngram_ids

BUCKETS = 1 << 18
ALPHA = 0.1


class CharTrigrams:
    """Hashed trigram and context counts of a set of names; `score` gives each name's mean log-probability."""

    def __init__(self, vocab_size: int, trigrams: torch.Tensor, contexts: torch.Tensor, alpha: float = ALPHA,
                 hashing: str = NEW_HASH):
        self.vocab_size, self.buckets, self.alpha, self.hashing = vocab_size, len(trigrams), alpha, hashing
        self.trigrams, self.contexts = trigrams.float(), contexts.float()

    @staticmethod
    def windows(tokens: torch.Tensor, lengths: torch.Tensor, vocab_size: int, buckets: int,
                hashing: str = NEW_HASH) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per trigram window: its bucket, its first two characters' bucket, and whether it is real."""
        ids, real = ngram_ids(tokens, lengths, vocab_size, 3, buckets, hashing=hashing)
        width = ids.shape[1] // 3
        return ids[:, 2 * width :], ids[:, width : 2 * width], real[:, 2 * width :]

    @classmethod
    def fit(cls, tokens: torch.Tensor, lengths: torch.Tensor, vocab_size: int) -> CharTrigrams:
        trigram, context, real = cls.windows(tokens, lengths, vocab_size, BUCKETS)
        trigrams, contexts = (torch.bincount(ids[real], minlength=BUCKETS) for ids in (trigram, context))
        return cls(vocab_size, trigrams, contexts)

    def state(self) -> dict:
        """Plain types that survive JSON unchanged (lists of the non-zero buckets and their counts), for a
        checkpoint read weights-only and an export's sidecar."""
        state = {"vocab_size": self.vocab_size, "buckets": self.buckets, "alpha": self.alpha, "hashing": self.hashing}
        for key, counts in (("trigrams", self.trigrams), ("contexts", self.contexts)):
            ids = counts.nonzero().flatten()
            state[key] = [ids.tolist(), counts[ids].tolist()]
        return state

    @classmethod
    def from_state(cls, state: dict) -> CharTrigrams:
        tables = []
        for key in ("trigrams", "contexts"):
            table = torch.zeros(state["buckets"])
            ids, counts = state[key]
            table[torch.tensor(ids, dtype=torch.long)] = torch.tensor(counts, dtype=torch.float)
            tables.append(table)
        # Counted before the hash was a setting: the polynomial one (nameorigin.model.ngram).
        return cls(state["vocab_size"], *tables, alpha=state["alpha"], hashing=state.get("hashing", OLD_HASH))

    def score(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """[B] mean log-probability per character (the end marker included): lower is stranger."""
        trigram, context, real = self.windows(tokens.cpu(), lengths.cpu(), self.vocab_size, self.buckets,
                                              self.hashing)
        total = self.vocab_size + 2
        logp = torch.log((self.trigrams[trigram] + self.alpha) / (self.contexts[context] + self.alpha * total))
        real = real.float()
        return (logp * real).sum(1) / real.sum(1).clamp_min(1)


def ood_score(novelty: torch.Tensor, energy: torch.Tensor, scale: dict) -> torch.Tensor:
    """The abstention score: z(novelty) + z(energy), each standardized with the validation names' (mean, sd).
    Lower is further out of distribution."""
    (novelty_mean, novelty_sd), (energy_mean, energy_sd) = scale["novelty"], scale["energy"]
    return (novelty - novelty_mean) / max(novelty_sd, 1e-6) + (energy - energy_mean) / max(energy_sd, 1e-6)
