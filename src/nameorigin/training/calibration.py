"""After `fit`: best.ckpt's temperature, conformal thresholds, abstention rule and held-out reference, all fitted
on the validation split (the pipeline writes them into the checkpoint)."""

from __future__ import annotations

import logging

import pytorch_lightning as pl
from omegaconf import DictConfig

from nameorigin.fit.dashboard import log_calibration
from nameorigin.model.artifacts import Calibration
from nameorigin.model.calibration import TEMPERATURE_RANGE, calibrate, held_out_reference
from nameorigin.training.abstention import fit_abstention

log = logging.getLogger(__name__)
# What fitted every part of the calibration: names the answering model did not train on. The refit carries them.
HELD_OUT_BY_BEST = "the validation split, as best.ckpt answers it (trained on train alone)"


def calibrate_model(model: pl.LightningModule, datamodule: pl.LightningDataModule, settings: DictConfig,
                    loggers: list) -> Calibration:
    """The temperature, conformal thresholds, abstention rule and held-out reference of the model as it is in
    memory (best.ckpt's weights, its linear part mixed in), fitted on the validation split."""
    model.serve_with(None, model.mixture)  # temperature 1: the logits calibration fits
    logits, targets, shares = model.collect_logits(datamodule.whole_split_loader("val"))  # rank 0 alone: all of it
    summary = calibrate(logits, targets, list(settings.coverages), int(settings.bins),
                        shares if model.config.soft_targets else None, str(settings.sets))
    decided = logits / summary.temperature
    summary.abstention, abstained = fit_abstention(datamodule, decided, float(settings.false_abstention),
                                                   float(settings.max_unknown_share))
    summary.fitted_on = HELD_OUT_BY_BEST
    kept = ~abstained  # as --composition answers a table: the names the rule turns away left out
    summary.reference = held_out_reference(decided[kept].softmax(-1), targets[kept], HELD_OUT_BY_BEST)
    log.info("calibration on validation: temperature %.3f, ECE %.4f -> %.4f", summary.temperature,
             summary.val_ece_raw, summary.val_ece)
    if summary.temperature_at_bound:
        log.warning("the temperature stopped at the end of its range %s: validation gives too little to calibrate "
                    "on (no errors, or hardly a right answer); treat the probabilities as rough", TEMPERATURE_RANGE)
    log_calibration(loggers, summary, logits, targets)
    return summary
