"""The abstention rule (nameorigin.serving.abstain), fitted after training where names are held out.

The score adds two z-scores (each standardized on the validation names): the novelty of the name's letters
(nameorigin.model.novelty, counted on the training names) and the energy of its decided logits (their
logsumexp: low when no label's evidence is strong, Liu et al. 2020). Each alone catches fewer of the tuning
countries' names (docs/serving.md). The threshold is the `false_abstention` quantile (5 % by default) of the
validation names' scores, so 5 % of names drawn like the training names abstain. The
refit model trains on the validation names too, so its own validation scores are in-sample: it carries this
rule over from best.ckpt, as it carries the temperature (nameorigin.training.refit).
"""

from __future__ import annotations

from typing import Any

import torch

from nameorigin.base.textnorm import UNK
from nameorigin.model.artifacts import AbstentionRule
from nameorigin.model.novelty import CharTrigrams, ood_score


def fit_abstention(datamodule: Any, decided_logits: torch.Tensor, false_abstention: float,
                   max_unknown_share: float) -> tuple[AbstentionRule, torch.Tensor]:
    """`decided_logits`: the validation names' logits as served (temperature included), in the order of
    `datamodule.whole_split_loader("val")`, which is read again here for the names' characters. Returns the rule
    and which validation names it turns away."""
    train = datamodule.datasets["train"]
    trigrams = CharTrigrams.fit(train.tokens.long(), train.lengths, len(datamodule.vocab))
    unk, novelty, unknown = datamodule.vocab.index(UNK), [], []
    for batch in datamodule.whole_split_loader("val"):  # the order the logits were collected in
        novelty.append(trigrams.score(batch.tokens, batch.lengths))
        unknown.append((batch.tokens == unk).sum(1).float() / batch.lengths.float())
    novelty, unknown, energy = torch.cat(novelty), torch.cat(unknown), decided_logits.float().logsumexp(-1)
    scale = {"novelty": [float(novelty.mean()), float(novelty.std())],
             "energy": [float(energy.mean()), float(energy.std())]}
    score = ood_score(novelty, energy, scale)
    threshold = float(torch.quantile(score.double(), false_abstention))
    abstained = (unknown > max_unknown_share) | (score < threshold)
    rule = AbstentionRule(threshold=threshold, scale=scale, novelty=trigrams.state(),
                          false_abstention=false_abstention, max_unknown_share=max_unknown_share,
                          val_abstained=float(abstained.float().mean()),
                          fitted_on="letter trigrams counted on the training split; the scores' scale and threshold "
                                    "on the validation split, as best.ckpt answers it (held out from it)")
    return rule, abstained
