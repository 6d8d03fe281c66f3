"""After `fit`: best.ckpt's temperature, conformal thresholds, abstention rule and held-out reference, all fitted
on the validation split and stored in the checkpoint."""

from __future__ import annotations

import logging

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig

from nameorigin.base.checkpoint_io import load_checkpoint
from nameorigin.model.artifacts import Calibration
from nameorigin.model.calibration import TEMPERATURE_RANGE, calibrate, held_out_reference
from nameorigin.training.abstention import fit_abstention
from nameorigin.training.checkpointing import update_checkpoint
from nameorigin.training.dashboard import log_calibration

log = logging.getLogger(__name__)
# What fitted every part of the calibration: names the answering model did not train on. The refit carries them.
HELD_OUT_BY_BEST = "the validation split, as best.ckpt answers it (trained on train alone)"


def calibrate_checkpoint(model: pl.LightningModule, datamodule: pl.LightningDataModule, path: str,
                         settings: DictConfig, loggers: list) -> Calibration:
    """Fit the temperature and the conformal thresholds on validation and store them in the checkpoint."""
    state = load_checkpoint(path)
    model.cpu().load_state_dict(state["state_dict"])
    model.net.temperature.fill_(1.0)
    logits, targets, shares = model.collect_logits(datamodule.whole_split_loader("val"))  # rank 0 alone: all of it
    summary = calibrate(logits, targets, list(settings.coverages), int(settings.bins),
                        shares if model.config.soft_targets else None, str(settings.sets))
    decided = logits / summary.temperature
    summary.abstention, abstained = fit_abstention(datamodule, decided, float(settings.false_abstention),
                                                   float(settings.max_unknown_share))
    summary.fitted_on = HELD_OUT_BY_BEST
    kept = ~abstained  # as --composition answers a table: the names the rule turns away left out
    summary.reference = held_out_reference(decided[kept].softmax(-1), targets[kept], HELD_OUT_BY_BEST)

    def store(checkpoint: dict) -> None:
        checkpoint["state_dict"]["net.temperature"] = torch.tensor(summary.temperature)
        checkpoint["calibration"] = summary.plain()  # the format version is on_save_checkpoint's

    update_checkpoint(path, store)
    log.info("calibration on validation: temperature %.3f, ECE %.4f -> %.4f", summary.temperature,
             summary.val_ece_raw, summary.val_ece)
    if summary.temperature_at_bound:
        log.warning("the temperature stopped at the end of its range %s: validation gives too little to calibrate "
                    "on (no errors, or hardly a right answer); treat the probabilities as rough", TEMPERATURE_RANGE)
    log_calibration(loggers, summary, logits, targets)
    return summary
