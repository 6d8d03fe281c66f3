"""When a prediction abstains, and why (the scores are still given). The rule is fitted after training on held-out
names (nameorigin.training.abstention) and read from the checkpoint's calibration:

- unknown_characters: more than `max_unknown_share` of the name's characters are ones training never saw;
- out_of_distribution: its letters are unlike the training names' and no label's evidence is strong (the score
  of nameorigin.model.novelty.ood_score), below the threshold that abstains on `false_abstention` (5 % by
  default) of the validation names;
- large_set: with --coverage and --max-set-size K, its prediction set holds more than K labels.
A blank or unusable input is `unusable_input`, as before.
"""

from __future__ import annotations

from typing import Any

import torch

from nameorigin.base.textnorm import UNK
from nameorigin.model.novelty import ood_score

UNUSABLE, UNKNOWN, OUT_OF_DISTRIBUTION, LARGE_SET = ("unusable_input", "unknown_characters", "out_of_distribution",
                                                     "large_set")


def abstentions(predictor: Any, encoded: tuple[torch.Tensor, torch.Tensor], energy: torch.Tensor,
                sets: list[list[str]] | None, max_set_size: int | None,
                batch_size: int) -> list[tuple[str | None, str | None]]:
    """(reason code, reason) per encoded name (the Predictor's padded tokens and lengths); (None, None) where it
    answers. `energy`: the logsumexp of each name's decided logits."""
    rule, unk = predictor.abstention, predictor.char_to_index[UNK]
    tokens, lengths = encoded
    score = []
    if predictor.novelty is not None:
        novelty = []
        for start in range(0, len(lengths), batch_size):
            part = lengths[start : start + batch_size]
            novelty.append(predictor.novelty.score(tokens[start : start + batch_size, : int(part.max())].long(), part))
        score = ood_score(torch.cat(novelty), energy, rule.scale).tolist()
    shares = ((tokens == unk).sum(1).double() / lengths.double()).tolist()
    verdicts = []
    for i, unknown in enumerate(shares):
        if rule and unknown > rule.max_unknown_share:
            verdicts.append((UNKNOWN, f"{unknown:.0%} of its characters were never in training (more than "
                                      f"{rule.max_unknown_share:.0%})"))
        elif score and score[i] < rule.threshold:
            verdicts.append((OUT_OF_DISTRIBUTION, f"unlike the training names (score {score[i]:.2f} < "
                                                  f"{rule.threshold:.2f}): its letters are rare there and no "
                                                  "label stands out"))
        elif sets is not None and max_set_size is not None and len(sets[i]) > max_set_size:
            verdicts.append((LARGE_SET, f"its prediction set holds {len(sets[i])} labels (more than {max_set_size})"))
        else:
            verdicts.append((None, None))
    return verdicts
