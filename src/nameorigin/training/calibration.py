"""After `fit`, on the validation split: best.ckpt's temperature, conformal thresholds, abstention rule and
held-out reference (the pipeline writes them into the checkpoint).

The abstention rule (nameorigin.serving.abstain) adds two z-scores (each standardized on the validation names):
the novelty of the name's letters (nameorigin.model.novelty, counted on the training names) and the energy of its
decided logits (their logsumexp: low when no label's evidence is strong, Liu et al. 2020). Each alone catches fewer
of the tuning countries' names (docs/serving.md). The threshold is the `false_abstention` quantile (5 % by default)
of the validation names' scores, so 5 % of names drawn like the training names abstain. The refit model trains on
the validation names too, so its own validation scores are in-sample: it carries this rule over from best.ckpt, as
it carries the temperature (nameorigin.training.refit).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytorch_lightning as pl
import torch

from nameorigin.base.textnorm import UNK
from nameorigin.config import CalibrationConfig
from nameorigin.fit.dashboard import log_calibration
from nameorigin.model.artifacts import AbstentionRule, Calibration
from nameorigin.model.calibration import TEMPERATURE_RANGE, calibrate, held_out_reference
from nameorigin.model.novelty import CharTrigrams, ood_score

log = logging.getLogger(__name__)
# What fitted every part of the calibration: names the answering model did not train on. The refit carries them.
HELD_OUT_BY_BEST = "the validation split, as best.ckpt answers it (trained on train alone)"


def calibrate_model(model: pl.LightningModule, datamodule: pl.LightningDataModule, settings: CalibrationConfig,
                    loggers: list) -> Calibration:
    """The temperature, conformal thresholds, abstention rule and held-out reference of the model as it is in
    memory (best.ckpt's weights, its linear part mixed in, temperature 1), fitted on the validation split."""
    logits, targets, shares = model.collect_logits(datamodule.whole_split_loader("val"))  # rank 0 alone: all of it
    fitted = calibrate(logits, targets, list(settings.coverages), int(settings.bins),
                       shares if model.config.soft_targets else None, str(settings.sets))
    decided = logits / fitted.temperature
    abstention, abstained = fit_abstention(datamodule, decided, float(settings.false_abstention),
                                           float(settings.max_unknown_share))
    kept = ~abstained  # as --composition answers a table: the names the rule turns away left out
    summary = dataclasses.replace(fitted, abstention=abstention, fitted_on=HELD_OUT_BY_BEST,
                                  reference=held_out_reference(decided[kept].softmax(-1), targets[kept],
                                                               HELD_OUT_BY_BEST))
    log.info("calibration on validation: temperature %.3f, ECE %.4f -> %.4f", summary.temperature,
             summary.val_ece_raw, summary.val_ece)
    if summary.temperature_at_bound:
        log.warning("the temperature stopped at the end of its range %s: validation gives too little to calibrate "
                    "on (no errors, or hardly a right answer); treat the probabilities as rough", TEMPERATURE_RANGE)
    log_calibration(loggers, summary, logits, targets)
    return summary


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
