"""When a prediction abstains, and why (the scores are still given). The rule is fitted after training on held-out
names (nameorigin.training.calibration) and read from the checkpoint's calibration:

- unknown_characters: more than `max_unknown_share` of the name's characters are ones training never saw;
- out_of_distribution: its letters are unlike the training names' and no label's evidence is strong (the score
  of nameorigin.model.novelty.ood_score), below the threshold that abstains on `false_abstention` (5 % by
  default) of the validation names;
- large_set: with --coverage and --max-set-size K, its prediction set holds more than K labels.
A blank or unusable input is `unusable_input`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from nameorigin.base.textnorm import UNK
from nameorigin.model.novelty import ood_score

UNUSABLE, UNKNOWN, OUT_OF_DISTRIBUTION, LARGE_SET = ("unusable_input", "unknown_characters", "out_of_distribution",
                                                     "large_set")


@dataclass(frozen=True)
class Verdicts:
    """Per encoded name: its reason code and reason (None where it answers), as columns."""

    codes: np.ndarray  # object: a reason code or None
    reasons: np.ndarray  # object: the sentence or None

    @property
    def abstained(self) -> np.ndarray:
        return np.not_equal(self.codes, None)

    @classmethod
    def none(cls, count: int) -> Verdicts:
        return cls(np.full(count, None, dtype=object), np.full(count, None, dtype=object))


def abstentions(predictor: Any, encoded: tuple[torch.Tensor, torch.Tensor], energy: torch.Tensor,
                set_sizes: torch.Tensor | None, max_set_size: int | None, batch_size: int) -> Verdicts:
    """The verdict on each encoded name (the Predictor's padded tokens and lengths). `energy`: the logsumexp of
    each name's decided logits; `set_sizes`: each name's prediction-set size, with --coverage. Decided as masks
    over all names at once; only the names that abstain get a sentence."""
    rule, unk = predictor.abstention, predictor.char_to_index[UNK]
    tokens, lengths = encoded
    verdicts = Verdicts.none(len(lengths))
    shares = ((tokens == unk).sum(1).double() / lengths.double()).numpy()
    unknown = shares > rule.max_unknown_share if rule else np.zeros(len(shares), dtype=bool)
    for i in np.flatnonzero(unknown):
        verdicts.codes[i] = UNKNOWN
        verdicts.reasons[i] = (f"{shares[i]:.0%} of its characters were never in training (more than "
                               f"{rule.max_unknown_share:.0%})")
    left = ~unknown
    if predictor.novelty is not None and len(lengths):
        novelty = []
        for start in range(0, len(lengths), batch_size):
            part = lengths[start : start + batch_size]
            novelty.append(predictor.novelty.score(tokens[start : start + batch_size, : int(part.max())].long(), part))
        score = ood_score(torch.cat(novelty), energy, rule.scale).double().numpy()  # as the threshold: float64
        unlike = left & (score < rule.threshold)
        for i in np.flatnonzero(unlike):
            verdicts.codes[i] = OUT_OF_DISTRIBUTION
            verdicts.reasons[i] = (f"unlike the training names (score {score[i]:.2f} < {rule.threshold:.2f}): its "
                                   "letters are rare there and no label stands out")
        left &= ~unlike
    if set_sizes is not None and max_set_size is not None:
        sizes = set_sizes.numpy()
        for i in np.flatnonzero(left & (sizes > max_set_size)):
            verdicts.codes[i] = LARGE_SET
            verdicts.reasons[i] = f"its prediction set holds {sizes[i]} labels (more than {max_set_size})"
    return verdicts
