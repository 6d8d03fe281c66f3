"""The refit: once validation has picked the checkpoint and fitted the temperature and the prediction-set
thresholds (best.ckpt, trained on train alone), a fresh model with the same settings and seed trains on train +
validation for the same number of epochs. That model, checkpoints/refit.ckpt, is the one tested and served.

Why: the corpus is small, and more training names help: docs/data-and-evaluation.md has what the refit bought,
on validation and on test. What it costs: the served model has
no held-out names of its own, so it carries the temperature and thresholds fitted for best.ckpt; the test split,
untouched by both stages, shows how well they carry (the model card's calibration table). The paired comparison
refits the n-gram baseline the same way, so the two are compared on equal training data.
"""

from __future__ import annotations

import dataclasses

from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from pytorch_lightning.loggers import Logger, TensorBoardLogger

from nameorigin.fit.trackers import refit_copies
from nameorigin.model.artifacts import Calibration

# Validation names are training names now, so no validation loop; refit.ckpt is written once, at the end.
TRAINER_OVERRIDES = {"limit_val_batches": 0, "num_sanity_val_steps": 0, "enable_checkpointing": False}


def training_callbacks(callbacks: list[Callback]) -> list[Callback]:
    """The run's callbacks without those that pick checkpoints on validation."""
    return [callback for callback in callbacks if not isinstance(callback, ModelCheckpoint)]


def refit_loggers(loggers: list[Logger]) -> list[Logger]:
    """TensorBoard loggers that write into a `refit` folder inside the run's own: the dashboard shows the refit's
    training curves as a run of their own, beside the first training's (their steps would overlap on one chart);
    and the trackers' own (nameorigin.fit.trackers.refit_copies)."""
    return [*(TensorBoardLogger(save_dir=logger.save_dir, name=logger.name, version=logger.version, sub_dir="refit",
                                default_hp_metric=False)
              for logger in loggers if isinstance(logger, TensorBoardLogger)), *refit_copies(loggers)]


def carried(summary: Calibration | None) -> Calibration | None:
    """best.ckpt's calibration as the refit model carries it (None when calibration is off)."""
    return dataclasses.replace(summary, carried_from="best.ckpt") if summary else None
