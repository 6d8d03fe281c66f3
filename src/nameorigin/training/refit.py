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
import logging
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from pytorch_lightning.loggers import Logger, TensorBoardLogger

from nameorigin.fit.checkpointing import AtomicCheckpointIO, Served
from nameorigin.fit.instantiate import instantiate_all
from nameorigin.fit.module import NameClassifier
from nameorigin.fit.trackers import refit_copies
from nameorigin.model.artifacts import REFIT_FILE, Calibration
from nameorigin.model.ngram_linear import LinearFit
from nameorigin.training import linear_mix
from nameorigin.training.candidates import build_model, fast_path_trainer
from nameorigin.training.plan import RunPlan

log = logging.getLogger(__name__)

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


class RefitClassifier(NameClassifier):
    """The refit's model. Its settings go to the refit's own loggers only: the run's trainer tests it, and the run's
    trackers keep the first training's settings (MLflow keeps a run's parameters once; the refit's class prior,
    from train + validation, differs)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._log_hyperparams = False


def refit_model(plan: RunPlan, datamodule: pl.LightningDataModule, calibration: Calibration | None, loggers: list,
                mixture: dict | None) -> tuple[Served, LinearFit | None]:
    """A fresh model, same plan and seed, trained on train + validation (and its linear part fitted again there and
    mixed at the weight validation picked), carrying best.ckpt's calibration: returns checkpoints/refit.ckpt, to be
    written, and its linear part (None without one)."""
    datamodule.add_validation_to_training()
    pl.seed_everything(plan.settings.seed, workers=True, verbose=False)
    model = build_model(plan, datamodule, RefitClassifier)
    callbacks = training_callbacks(instantiate_all(plan.settings.callbacks, "callbacks"))
    own_loggers = refit_loggers(loggers)
    for logger in own_loggers:
        logger.log_hyperparams(model.hparams_initial)
    trainer, _ = fast_path_trainer(plan, model, datamodule, callbacks=callbacks, logger=own_loggers or False,
                                   plugins=[AtomicCheckpointIO()], **TRAINER_OVERRIDES)
    log.info("refit: a fresh model on train + validation (%d pairs) for %s epochs", len(datamodule.datasets["train"]),
             trainer.max_epochs)
    trainer.fit(model, datamodule=datamodule)
    mixed = linear_mix.mix_refit(model, datamodule, mixture) if mixture else None
    model.serve_with(carried(calibration), mixed.mixture if mixed else None)
    # What trainer.save_checkpoint would write, kept in memory: a model to serve, not a state to resume.
    served = Served(str(plan.output_dir / "checkpoints" / REFIT_FILE), model,
                    trainer._checkpoint_connector.dump_checkpoint(weights_only=True))
    served.keep_model()
    datamodule.write_manifest(plan.output_dir / "split.json")  # its trained_on: the refit's names
    return served, mixed.fit if mixed else None
