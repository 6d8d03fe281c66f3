"""What `python train.py` does, as a function tests can call: compose -> instantiate -> fit -> test."""

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
from nameorigin.config import ModelConfig, TransferUse
from nameorigin.evaluation.margin import margin_metrics, measure_margin
from nameorigin.fit import graphed
from nameorigin.fit.callbacks import GradAccumulationLogger
from nameorigin.fit.checkpointing import AtomicCheckpointIO, RNGState, Served
from nameorigin.fit.instantiate import build, instantiate_all, instantiation_error
from nameorigin.fit.module import NameClassifier
from nameorigin.fit.preemption import Preemption
from nameorigin.fit.resume import carry_over, resolve_checkpoint
from nameorigin.fit.split_logits import has_pairs
from nameorigin.fit.timing import StageClock
from nameorigin.fit.trackers import report_to_trackers
from nameorigin.model.artifacts import REFIT_FILE, Calibration
from nameorigin.training import ensemble, linear_mix, refit, search, sizing, transfer
from nameorigin.training.calibration import calibrate_model
from nameorigin.training.outputs import report, write_outputs
from nameorigin.training.settings import RunSettings, changed, checked

log = logging.getLogger(__name__)


class NoAdverts(logging.Filter):
    """Lightning prints a tip to install its cloud logger at every Trainer start; a training log is no place for it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "litlogger" not in record.getMessage()


NO_ADVERTS = NoAdverts()


def quiet_third_party() -> None:
    """Lines a run prints that users can do nothing about, silenced when a run starts (never at import): Lightning's
    advert, and the deprecation of the torch pytree LeafSpecs Lightning 2.6 builds (that message only)."""
    advertiser = logging.getLogger("pytorch_lightning.utilities.rank_zero")
    if NO_ADVERTS not in advertiser.filters:
        advertiser.addFilter(NO_ADVERTS)
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated",
                            category=FutureWarning)


@dataclasses.dataclass
class Fitted:
    """One candidate after `fit`: its resolved settings, data, model (holding best.ckpt's weights), trainer and
    loggers, its best.ckpt (None when it kept none) as read once, its metrics so far, and the gradient check's
    summary (or None)."""

    settings: RunSettings
    datamodule: pl.LightningDataModule
    pretrained: dict | None
    model: NameClassifier
    trainer: pl.Trainer
    loggers: list
    best: Served | None
    metrics: dict
    gradient_check: dict | None

    @property
    def cfg(self) -> DictConfig:
        return self.settings.cfg


def train(cfg: DictConfig) -> dict[str, Any]:
    """Train (the plain model, and the transferred one when a starting point is there: validation picks), then
    test the chosen model. Returns the final metrics (callback_metrics as floats) and the served checkpoints' paths
    (`best_checkpoint`, `model_checkpoint`)."""
    quiet_third_party()
    ensemble.check(cfg)
    transferred_cfg = transfer.candidate_config(cfg)
    fitted, transfer_note = [], {}
    if transferred_cfg is None or cfg.transfer.use != TransferUse.always:
        fitted.append(fit_candidate(cfg))
    if transferred_cfg is not None:
        try:
            fitted.append(fit_candidate(transferred_cfg))
        except UserError as error:
            if not fitted:  # transfer.use=always: nothing else to serve
                raise
            transfer_note = transfer.refused(fitted[0], error)
    run, figures = fitted[0], {}
    if len(fitted) > 1:
        run, figures, differences = transfer.choose(fitted)
        transfer_note = {"differences": differences} if differences else {}
    if cfg.ensemble.members > 1:
        run, assembled = ensemble.assemble(run, cfg, fit_candidate)
        figures.update(assembled)
    trainer, datamodule = run.trainer, run.datamodule
    metrics = {**run.metrics, **figures}
    clock = StageClock()
    served = finish_model(run, trainer.world_size > 1, clock)
    model = run.model  # tested in the module the run's loggers know (a tracker refuses settings that change)
    if served and served[-1].model is not model:  # the refit's weights and decisions, from memory
        model.load_state_dict(served[-1].model.state_dict())
        model.serve_with(served[-1].model.calibration, served[-1].model.mixture)
        model.linear_fit = served[-1].model.linear_fit
    margin = None
    if cfg.test:
        with clock.stage("test"):
            trainer.test(model, datamodule=datamodule, verbose=False)
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1})
        if served and cfg.margin.enabled and trainer.is_global_zero and has_pairs(datamodule):
            with clock.stage("margin"):
                margin = measure_margin(model, datamodule, run.loggers)
            metrics.update(margin_metrics(margin))
    metrics.update(clock.metrics())
    final = served[-1].path if served else None
    metrics["best_checkpoint"], metrics["model_checkpoint"] = served[0].path if served else None, final
    if trainer.is_global_zero:
        with clock.stage("writing the outputs"):  # in train.log only: results.json is among them
            write_outputs(cfg, served, model, metrics, run.settings.picks, run.settings.candidates,
                          {"margin": margin, "gradient_check": run.gradient_check, "transfer": transfer_note or None})
        output_dir = Path(cfg.paths.output_dir)
        report_to_trackers(run.loggers, run.cfg, run.settings.picks, final,
                           [output_dir / "MODEL_CARD.md", output_dir / "label_report.json"])
        report(metrics, output_dir, margin, transfer_note)  # the results block: the run's last lines
    return metrics


def fit_candidate(cfg: DictConfig) -> Fitted:
    """Read and split the data, resolve the settings left to it, build the model and the trainer, and fit."""
    datamodule, pretrained, settings = prepare(cfg)
    cfg, model_config = settings.cfg, settings.model
    ckpt_path, resumed = resolve_checkpoint(cfg, model_config)
    if pretrained is not None:
        transfer.check_held_out(model_config.init_from, pretrained, datamodule)
    if ckpt_path is not None:  # before the model is built from this corpus' vocabulary
        datamodule.load_state_dict(resumed.get("data", {}))
    model = build_model(cfg, model_config, datamodule, pretrained)
    trainer, loggers = build_trainer(cfg, model, datamodule)
    if ckpt_path is not None:
        ckpt_path = carry_over(ckpt_path, resumed, cfg.paths.output_dir)
    started = time.perf_counter()
    try:
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path)
    finally:
        Path(cfg.paths.output_dir, "checkpoints", "resume.ckpt").unlink(missing_ok=True)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    metrics["time/fit_s"] = time.perf_counter() - started
    gradient_check = next((callback.summary() for callback in trainer.callbacks
                           if isinstance(callback, GradAccumulationLogger) and callback.history), None)
    callback = trainer.checkpoint_callback
    best = None
    if callback is not None and callback.best_model_path:  # read once; its weights are the model's from here on
        best = Served(callback.best_model_path, model, load_checkpoint(callback.best_model_path))
        model.load_state_dict(best.checkpoint["state_dict"])
    return Fitted(settings, datamodule, pretrained, model, trainer, loggers, best, metrics, gradient_check)


def prepare(cfg: DictConfig) -> tuple[pl.LightningDataModule, dict | None, RunSettings]:
    """The data read and split, the pretrained checkpoint when fine-tuning, and the run's settings resolved: the
    given ones checked, then the encoder's left to the starting point, the rest left to the data filled by the
    rule, or by the search on validation (nameorigin.training.settings). `cfg` is only read."""
    given = checked(cfg)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = build(cfg, "data")
    pretrained = transfer.load_pretrained(given.init_from, given) if given.init_from else None
    if pretrained is not None:  # fine-tuning keeps the pretrained vocabulary (grown), and its encoder's sizes
        datamodule.pretrained_vocab = pretrained["hyper_parameters"]["vocab"]
        cfg = changed(cfg, transfer.encoder_settings(cfg, pretrained))
    datamodule.prepare_data()
    datamodule.setup("fit")
    if getattr(datamodule, "setup_seconds", None):
        log.info("corpus read in %.1f s, split in %.1f s, encoded in %.1f s", *datamodule.setup_seconds.values())
    picks = sizing.picks_for(cfg, len(datamodule.splits["train"]), len(datamodule.labels),
                             bool(given.soft_targets or getattr(datamodule, "soft_labels", False)))
    candidates = []
    if cfg.search.budget_minutes > 0:
        picks, candidates = run_search(changed(cfg, {p.key: p.value for p in picks}), datamodule, picks, pretrained)
        pl.seed_everything(cfg.seed, workers=True, verbose=False)  # the run starts as its picked candidate did
    settings = RunSettings.resolved(cfg, picks, candidates)
    if picks:
        datamodule.batch_size = settings.cfg.data.batch_size
    return datamodule, pretrained, settings


def build_trainer(cfg: DictConfig, model: NameClassifier, datamodule: pl.LightningDataModule) -> tuple:
    """The run's Trainer with its callbacks and loggers (returned too), the fast path when it applies, and the
    split manifest written."""
    callbacks = instantiate_all(cfg.get("callbacks"), "callbacks")
    loggers = instantiate_all(cfg.get("logger"), "logger")
    if not loggers:  # Lightning refuses a learning-rate monitor with nothing to write to (logger=none)
        callbacks = [callback for callback in callbacks if not isinstance(callback, LearningRateMonitor)]
    # A stop on a signal saves after every other callback has finished the batch.
    last = [callback for callback in callbacks if isinstance(callback, Preemption)]
    callbacks = [*(callback for callback in callbacks if callback not in last), RNGState(), *last]
    trainer: pl.Trainer = build(cfg, "trainer", callbacks=callbacks, logger=loggers or False,
                                plugins=[AtomicCheckpointIO()])
    if graphed.enable(model.config.fast_path, trainer, model, datamodule):
        device = trainer.strategy.root_device
        log.info("fast path: one-length batches, the training split on %s, the step %s (model.fast_path=off: the "
                 "dynamic step)", device, "captured as CUDA graphs" if device.type == "cuda" else "run eagerly")
    datamodule.check_held_out_sizes(trainer.world_size)
    if trainer.is_global_zero:
        manifest = datamodule.write_manifest(Path(cfg.paths.output_dir) / "split.json")
        log.info("split manifest: %s (sizes %s)", manifest, {k: len(v) for k, v in datamodule.splits.items()})
    return trainer, loggers


def finish_model(run: Fitted, distributed: bool, clock: StageClock) -> list[Served]:
    """The steps after `fit`, in order, on best.ckpt's weights in memory: the linear part mixed in, the calibration
    fitted (both on rank 0; every rank then tests what it fitted), then the refit when asked. Returns the
    checkpoints to serve, not yet written: best.ckpt, and refit.ckpt (the one tested) after it."""
    best, cfg, trainer = run.best, run.cfg, run.trainer
    if best is None:
        return []
    model = best.model.cpu()
    mixture, calibration = None, None
    if trainer.is_global_zero:
        with clock.stage("linear part"):
            mixture = linear_mix.mix_best(model, run.datamodule)  # before calibration: it fits the model served
        model.serve_with(None, mixture)
        if cfg.calibration.enabled:
            with clock.stage("calibration"):
                calibration = calibrate_model(model, run.datamodule, cfg.calibration, run.loggers)
        model.serve_with(calibration, mixture)
    if distributed:
        state, fitted, mixture = trainer.strategy.broadcast(
            (model.state_dict(), calibration.plain() if calibration else None, mixture), src=0)
        calibration = Calibration.from_plain(fitted)
        model.load_state_dict(state)
        model.serve_with(calibration, mixture)
    best.keep_model()
    if not cfg.refit.enabled:
        return [best]
    if distributed:
        log.warning("refit skipped: it runs on one device; the model is best.ckpt, trained on train alone")
        return [best]
    with clock.stage("refit"):
        return [best, refit_model(cfg, run.settings.model, run.datamodule, run.pretrained, calibration,
                                  run.loggers, mixture)]


def run_search(cfg: DictConfig, datamodule: pl.LightningDataModule, picks: list, pretrained: dict | None) -> tuple:
    """nameorigin.training.search: each candidate trains here on the training split, without checkpoints or
    loggers; returns the picks and the candidates."""
    if cfg.get("ckpt_path"):
        raise UserError("search.budget_minutes with ckpt_path: a resumed run keeps the settings it was trained "
                        "with; drop one of them")
    if "ddp" in str(cfg.trainer.get("strategy") or ""):
        raise UserError("search.budget_minutes runs its candidates in one process: drop the DDP trainer, or "
                        "search.budget_minutes=0")

    def train_candidate(candidate_cfg: DictConfig, reporter: Any) -> None:
        config = checked(candidate_cfg)
        datamodule.batch_size = candidate_cfg.data.batch_size
        pl.seed_everything(candidate_cfg.seed, workers=True, verbose=False)
        model = build_model(candidate_cfg, config, datamodule, pretrained)
        within = {"val_check_interval": 1 / reporter.per_epoch} if reporter.per_epoch > 1 else {}
        trainer = build(candidate_cfg, "trainer", callbacks=[reporter], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, **within)
        trainer.fit(model, datamodule=datamodule)

    return search.search(cfg, picks, train_candidate, len(datamodule.labels), search.command_line_keys())


def refit_model(cfg: DictConfig, model_config: ModelConfig, datamodule: pl.LightningDataModule,
                pretrained: dict | None, calibration: Calibration | None, loggers: list,
                mixture: dict | None = None) -> Served:
    """nameorigin.training.refit: a fresh model, same settings and seed, trained on train + validation (and its
    linear part fitted again there and mixed at the weight validation picked), carrying best.ckpt's calibration;
    returns checkpoints/refit.ckpt, to be written."""
    datamodule.add_validation_to_training()
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    model = build_model(cfg, model_config, datamodule, pretrained)
    callbacks = refit.training_callbacks(instantiate_all(cfg.get("callbacks"), "callbacks"))
    trainer: pl.Trainer = build(cfg, "trainer", callbacks=callbacks, logger=refit.refit_loggers(loggers) or False,
                                plugins=[AtomicCheckpointIO()], **refit.TRAINER_OVERRIDES)
    graphed.enable(model_config.fast_path, trainer, model, datamodule)
    log.info("refit: a fresh model on train + validation (%d pairs) for %s epochs", len(datamodule.datasets["train"]),
             trainer.max_epochs)
    trainer.fit(model, datamodule=datamodule)
    model.serve_with(refit.carried(calibration), linear_mix.mix_refit(model, datamodule, mixture) if mixture else None)
    # What trainer.save_checkpoint would write, kept in memory: a model to serve, not a state to resume.
    served = Served(str(Path(cfg.paths.output_dir) / "checkpoints" / REFIT_FILE), model,
                    trainer._checkpoint_connector.dump_checkpoint(weights_only=True))
    served.keep_model()
    datamodule.write_manifest(Path(cfg.paths.output_dir) / "split.json")  # its trained_on: the refit's names
    return served


def build_model(cfg: DictConfig, config: ModelConfig, datamodule: pl.LightningDataModule,
                pretrained: dict | None) -> NameClassifier:
    """The model config plus what the data decides (vocabulary, labels, prior, weights) and, when fine-tuning,
    what the pretrained checkpoint brings (loaded into the new model here)."""
    if isinstance(config.class_weights, str):
        config = dataclasses.replace(config, class_weights=datamodule.class_weights(config.class_weights))
    config = dataclasses.replace(config, name_parts=getattr(datamodule, "name_parts", None))  # the data's parts
    if config.soft_targets is None:  # the data decides: a share table and the surnames train against their shares
        config = dataclasses.replace(config, soft_targets=bool(getattr(datamodule, "soft_labels", False)))
    shape, table = transfer.model_arguments(pretrained, config, datamodule.vocab) if pretrained is not None \
        else (None, None)
    model = NameClassifier(config, datamodule.vocab, datamodule.labels, datamodule.class_prior(),
                           getattr(datamodule, "label_names", None), shape)
    if pretrained is not None:
        log.info("fine-tuning from %s: loaded %s", config.init_from,
                 ", ".join(transfer.initialize(model.net, pretrained, table, datamodule.vocab)))
    try:  # built once now, so a bad optimizer or scheduler setting is one line before training, not mid-fit
        scheduler = model.configure_optimizers().get("lr_scheduler", {}).get("scheduler")
        if scheduler is not None:  # some settings fail only once the schedule is computed (T_max=0 divides by 0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "scheduler.step() before optimizer.step()": a throwaway optimizer
                scheduler.step()
    except InstantiationException as error:
        raise instantiation_error(error, "model.optimizer") from None
    except (ValueError, TypeError, ZeroDivisionError) as error:
        named = text_where_number(cfg) if isinstance(error, TypeError) and "'str'" in str(error) else None
        raise UserError(named or f"model.optimizer / model.scheduler: {error}") from None
    return model


def text_where_number(cfg: DictConfig) -> str | None:
    """Name the optimizer or scheduler setting given as text that a number was due for (lr=abc reaches torch as a
    string, whose own error only says that '<=' cannot compare a float and a str)."""
    for group in ("optimizer", "scheduler"):
        for key, value in (cfg.model.get(group) or {}).items():
            if isinstance(value, str) and not key.startswith("_") and not key.endswith("mode"):
                return f"model.{group}.{key}={value!r} is text where torch expects numbers"
    return None
