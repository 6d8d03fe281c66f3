"""One candidate of a run, up to its fitted network: `prepare` reads and splits the data and resolves the run's
plan (the only step that reads the composed config), then `fit_candidate` builds the model and the trainer from
the plan and fits. The plain model, the one from the starting point and each ensemble member are candidates."""

from __future__ import annotations

import dataclasses
import logging
import time
import warnings
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from hydra.errors import InstantiationException
from omegaconf import DictConfig
from pytorch_lightning.callbacks import LearningRateMonitor

from nameorigin.base.checkpoint_io import load_checkpoint
from nameorigin.base.errors import UserError
from nameorigin.evaluation.like_for_like import fits_shares_or_weights
from nameorigin.fit import graphed
from nameorigin.fit.callbacks import GradAccumulationLogger
from nameorigin.fit.checkpointing import AtomicCheckpointIO, RNGState, Served
from nameorigin.fit.instantiate import build, instantiate_all, instantiation_error
from nameorigin.fit.module import NameClassifier
from nameorigin.fit.preemption import Preemption
from nameorigin.fit.resume import carry_over, resolve_checkpoint
from nameorigin.training import search, sizing
from nameorigin.training.held_out import held_out_elsewhere
from nameorigin.training.plan import RunPlan, changed, checked
from nameorigin.training.starting_point import StartingPoint

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Fitted:
    """One candidate after `fit`: its plan, data, model (holding best.ckpt's weights), trainer and loggers, its
    best.ckpt (None when it kept none) as read once, its metrics so far, and the gradient check's summary (or
    None)."""

    plan: RunPlan
    datamodule: pl.LightningDataModule
    model: NameClassifier
    trainer: pl.Trainer
    loggers: list
    best: Served | None
    metrics: dict
    gradient_check: dict | None


def prepare(cfg: DictConfig, starting_point: StartingPoint | None = None) -> tuple[RunPlan, pl.LightningDataModule]:
    """The run's plan and its data, read and split: the given settings checked, the starting point read (once:
    `starting_point` when the caller read it, else model.init_from's), the encoder's settings left to it, the rest
    left to the data filled by the rule or by the search on validation (nameorigin.training.sizing, .search).
    `cfg` is only read; nothing after this reads it."""
    given = checked(cfg)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    point = starting_point
    if point is None and given.init_from:
        point = StartingPoint.read(given.init_from, "model.init_from")
    if point is not None:  # fine-tuning keeps the pretrained vocabulary (grown), and its encoder's sizes
        cfg = changed(cfg, point.encoder_settings(cfg.model, given.transfer_features))
        point.check_fits(checked(cfg))
        point = point.with_known_names(given.known_names_cache)
    datamodule = build(cfg.data, "data", **({"pretrained_vocab": point.vocab} if point else {}),
                       **({"held_out_elsewhere": held_out_elsewhere(list(cfg.data.leave_out_of))}
                          if cfg.data.get("leave_out_of") else {}))
    datamodule.prepare_data()
    datamodule.setup("fit")
    if getattr(datamodule, "setup_seconds", None):
        log.info("corpus read in %.1f s, split in %.1f s, encoded in %.1f s", *datamodule.setup_seconds.values())
    if point is not None:
        point.check_held_out(datamodule)
    picks = sizing.picks_for(cfg, len(datamodule.splits["train"]), len(datamodule.labels),
                             bool(given.soft_targets or getattr(datamodule, "soft_labels", False)))
    objective = sizing.objective_pick(cfg, fits_shares_or_weights(datamodule))
    if objective is not None:
        log.info("objective: validation picks by %s=%s (%s)", objective.key, objective.value, objective.why)
        picks.append(objective)
    candidates = []
    if cfg.search.budget_minutes > 0:
        picks, candidates = run_search(changed(cfg, {p.key: p.value for p in picks}), datamodule, picks, point)
        pl.seed_everything(cfg.seed, workers=True, verbose=False)  # the run starts as its picked candidate did
    plan = RunPlan.resolved(cfg, picks, candidates, point)
    if picks:
        datamodule.use_batch_size(plan.settings.data.batch_size)
    return plan, datamodule


def fit_candidate(plan: RunPlan, datamodule: pl.LightningDataModule) -> Fitted:
    """Build the model and the trainer from the plan, and fit (resuming from ckpt_path when it names one)."""
    settings = plan.settings
    ckpt_path, resumed = resolve_checkpoint(settings.ckpt_path, settings.paths["log_dir"], plan.output_dir,
                                            plan.model)
    if ckpt_path is not None:  # before the model is built from this corpus' vocabulary
        datamodule.load_state_dict(resumed.get("data", {}))
    model = build_model(plan, datamodule)
    trainer, loggers = build_trainer(plan, model, datamodule)
    if ckpt_path is not None:
        ckpt_path = carry_over(ckpt_path, resumed, plan.output_dir)
    started = time.perf_counter()
    try:
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path)
    finally:
        Path(plan.output_dir, "checkpoints", "resume.ckpt").unlink(missing_ok=True)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    metrics["time/fit_s"] = time.perf_counter() - started
    gradient_check = next((callback.summary() for callback in trainer.callbacks
                           if isinstance(callback, GradAccumulationLogger) and callback.history), None)
    callback = trainer.checkpoint_callback
    best = None
    if callback is not None and callback.best_model_path:  # read once; its weights are the model's from here on
        best = Served(callback.best_model_path, model, load_checkpoint(callback.best_model_path))
        model.load_state_dict(best.checkpoint["state_dict"])
    return Fitted(plan, datamodule, model, trainer, loggers, best, metrics, gradient_check)


def build_trainer(plan: RunPlan, model: NameClassifier, datamodule: pl.LightningDataModule) -> tuple:
    """The run's Trainer with its callbacks and loggers (returned too), the fast path when it applies, and the
    split manifest written."""
    settings = plan.settings
    callbacks = instantiate_all(settings.callbacks, "callbacks")
    loggers = instantiate_all(settings.logger, "logger")
    if not loggers:  # Lightning refuses a learning-rate monitor with nothing to write to (logger=none)
        callbacks = [callback for callback in callbacks if not isinstance(callback, LearningRateMonitor)]
    # A stop on a signal saves after every other callback has finished the batch.
    last = [callback for callback in callbacks if isinstance(callback, Preemption)]
    callbacks = [*(callback for callback in callbacks if callback not in last), RNGState(), *last]
    trainer, fast = fast_path_trainer(plan, model, datamodule, callbacks=callbacks, logger=loggers or False,
                                      plugins=[AtomicCheckpointIO()])
    if fast:
        device = trainer.strategy.root_device
        log.info("fast path: one-length batches, the training split on %s, the step %s (model.fast_path=off: the "
                 "dynamic step)", device, "captured as CUDA graphs" if device.type == "cuda" else "run eagerly")
    datamodule.check_held_out_sizes(trainer.world_size)
    if trainer.is_global_zero:
        manifest = datamodule.write_manifest(plan.output_dir / "split.json")
        log.info("split manifest: %s (sizes %s)", manifest, {k: len(v) for k, v in datamodule.splits.items()})
    return trainer, loggers


def fast_path_trainer(plan: RunPlan, model: NameClassifier, datamodule: pl.LightningDataModule,
                      **kwargs: Any) -> tuple[pl.Trainer, bool]:
    """The plan's Trainer, and whether the fast path applies (nameorigin.fit.graphed): then the Trainer is built
    without Lightning's clipping (the step clips, to the configured norm) and the model and the data are switched
    to it."""
    trainer: pl.Trainer = build(plan.settings.trainer, "trainer", **kwargs)
    if not graphed.applies(plan.model.fast_path, trainer):
        return trainer, False
    model.use_fast_path(trainer.gradient_clip_val)
    datamodule.use_one_length_batches()
    return build(plan.settings.trainer, "trainer", **{**kwargs, "gradient_clip_val": None}), True


def run_search(cfg: DictConfig, datamodule: pl.LightningDataModule, picks: list,
               point: StartingPoint | None) -> tuple:
    """nameorigin.training.search, inside `prepare`: each candidate trains here on the training split, without
    checkpoints or loggers; returns the picks and the candidates."""
    if cfg.get("ckpt_path"):
        raise UserError("search.budget_minutes with ckpt_path: a resumed run keeps the settings it was trained "
                        "with; drop one of them")
    if "ddp" in str(cfg.trainer.get("strategy") or ""):
        raise UserError("search.budget_minutes runs its candidates in one process: drop the DDP trainer, or "
                        "search.budget_minutes=0")

    def train_candidate(candidate_cfg: DictConfig, reporter: Any) -> None:
        plan = RunPlan.resolved(candidate_cfg, starting_point=point)
        datamodule.use_batch_size(plan.settings.data.batch_size)
        pl.seed_everything(plan.settings.seed, workers=True, verbose=False)
        model = build_model(plan, datamodule)
        within = {"val_check_interval": 1 / reporter.per_epoch} if reporter.per_epoch > 1 else {}
        trainer = build(plan.settings.trainer, "trainer", callbacks=[reporter], logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, **within)
        trainer.fit(model, datamodule=datamodule)

    return search.search(cfg, picks, train_candidate, len(datamodule.labels), search.command_line_keys())


def build_model(plan: RunPlan, datamodule: pl.LightningDataModule,
                module: type[NameClassifier] = NameClassifier) -> NameClassifier:
    """The plan's model config plus what the data decides (vocabulary, labels, prior, weights) and, when
    fine-tuning, what the starting point brings (loaded into the new model here); `module`: the refit's class."""
    config, point = plan.model, plan.starting_point
    if isinstance(config.class_weights, str):
        config = dataclasses.replace(config, class_weights=datamodule.class_weights(config.class_weights))
    config = dataclasses.replace(config, name_parts=getattr(datamodule, "name_parts", None))  # the data's parts
    if config.soft_targets is None:  # the data decides: a share table and the surnames train against their shares
        config = dataclasses.replace(config, soft_targets=bool(getattr(datamodule, "soft_labels", False)))
    model = module(config, datamodule.vocab, datamodule.labels, datamodule.class_prior(),
                   getattr(datamodule, "label_names", None),
                   point.shape(config, datamodule.vocab) if point is not None else None)
    if point is not None:
        log.info("fine-tuning from %s: loaded %s", config.init_from, ", ".join(point.initialize(model.net,
                                                                                                 datamodule.vocab)))
    try:  # built once now, so a bad optimizer or scheduler setting is one line before training, not mid-fit
        scheduler = model.configure_optimizers().get("lr_scheduler", {}).get("scheduler")
        if scheduler is not None:  # some settings fail only once the schedule is computed (T_max=0 divides by 0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "scheduler.step() before optimizer.step()": a throwaway optimizer
                scheduler.step()
    except InstantiationException as error:
        raise instantiation_error(error, "model.optimizer") from None
    except (ValueError, TypeError, ZeroDivisionError) as error:
        named = text_where_number(config) if isinstance(error, TypeError) and "'str'" in str(error) else None
        raise UserError(named or f"model.optimizer / model.scheduler: {error}") from None
    return model


def text_where_number(config: Any) -> str | None:
    """Name the optimizer or scheduler setting given as text that a number was due for (lr=abc reaches torch as a
    string, whose own error only says that '<=' cannot compare a float and a str)."""
    for group in ("optimizer", "scheduler"):
        for key, value in (getattr(config, group) or {}).items():
            if isinstance(value, str) and not key.startswith("_") and not key.endswith("mode"):
                return f"model.{group}.{key}={value!r} is text where torch expects numbers"
    return None
