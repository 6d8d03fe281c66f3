"""What `python train.py` does, as a function tests can call: compose -> instantiate -> fit -> test."""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.utilities.exceptions import MisconfigurationException

from nameorigin import refit, transfer
from nameorigin.calibration import TEMPERATURE_RANGE, calibrate
from nameorigin.calibration import check_settings as check_calibration
from nameorigin.card import write_model_card
from nameorigin.checkpointing import AtomicCheckpointIO, RNGState, update_checkpoint
from nameorigin.dashboard import log_calibration
from nameorigin.data import DataError
from nameorigin.predict import MODEL_ARGS, PredictError, load_checkpoint

log = logging.getLogger(__name__)


class NoAdverts(logging.Filter):
    """Lightning prints a tip to install its cloud logger at every Trainer start; a training log is no place for it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "litlogger" not in record.getMessage()


logging.getLogger("pytorch_lightning.utilities.rank_zero").addFilter(NoAdverts())

# What shapes the weights: a resumed run must be built exactly as the checkpoint was.
RESUME_MUST_MATCH = (*MODEL_ARGS, "ngram_buckets", "ngram_max")
# On/off settings, which a value other than true or false would turn on.
SWITCHES = ("test", "calibration.enabled", "refit.enabled", "card.enabled", "data.download", "model.soft_targets",
            "model.transfer_features")
# Lightning 2.6 builds torch pytree LeafSpecs, which torch 2.13 deprecates: a line on every run that users can do
# nothing about. Only that message is silenced.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning)


class ConfigError(ValueError):
    """An invalid setting; train.py turns it into one line and exit code 2."""


def build(cfg: DictConfig, group: str, **kwargs: Any) -> Any:
    """Instantiate one config group, turning a constructor's ValueError into a ConfigError naming the group."""
    try:
        return instantiate(cfg[group], **kwargs)
    except InstantiationException as error:
        cause = error.__cause__
        if isinstance(cause, DataError):
            raise cause from None
        unknown = re.match(r"Error locating target '([^']*)'.*\nfull_key: (\S+)", str(error), re.DOTALL)
        if unknown:  # a misspelled _target_: Hydra's own message is three lines and a hint about HYDRA_FULL_ERROR
            target, key = unknown.groups()
            raise ConfigError(f"{key}._target_={target} cannot be imported: give the dotted path "
                              "of an importable class, e.g. torch.optim.AdamW for an optimizer") from None
        # MisconfigurationException: Lightning's refusals; ModuleNotFoundError: an accelerator or logger whose
        # package is missing (trainer.accelerator=tpu needs torch_xla).
        if isinstance(cause, ValueError | TypeError | MisconfigurationException | ModuleNotFoundError):
            raise ConfigError(f"{group}: {cause}") from None
        raise


def instantiate_all(group_cfg: DictConfig | None, group: str) -> list[Any]:
    """Every entry of a group like callbacks/logger that has a _target_."""
    objects = []
    for key, entry in (group_cfg or {}).items():
        if isinstance(entry, DictConfig) and "_target_" in entry:
            objects.append(build(group_cfg, key))
    return objects


def find_last_checkpoint(log_dir: str | Path, exclude: str | Path | None = None) -> Path:
    """The most recently written last.ckpt under log_dir (for ckpt_path=last)."""
    skip = Path(exclude).resolve() if exclude else None
    found = [p for p in Path(log_dir).glob("**/checkpoints/last.ckpt")
             if skip is None or skip not in p.resolve().parents]
    if not found:
        raise ConfigError(f"ckpt_path=last but no last.ckpt under {log_dir}: train first or pass ckpt_path=<file>")
    return max(found, key=lambda p: p.stat().st_mtime)


def resolve_checkpoint(cfg: DictConfig) -> tuple[str | None, dict]:
    """The checkpoint to resume (path, its contents read weights-only), or (None, {}) for a fresh run."""
    if cfg.get("ckpt_path") in (None, ""):
        return None, {}
    if cfg.ckpt_path == "last":
        path = find_last_checkpoint(cfg.paths.log_dir, exclude=cfg.paths.output_dir)
    elif not Path(cfg.ckpt_path).is_file():
        state = "is a folder" if Path(cfg.ckpt_path).is_dir() else "does not exist"
        raise ConfigError(f"ckpt_path={cfg.ckpt_path} {state}: pass an existing .ckpt or ckpt_path=last")
    else:
        path = Path(cfg.ckpt_path)
    try:  # a broken or foreign file is one line here, not a traceback from inside Lightning
        checkpoint = load_checkpoint(path)
    except PredictError as error:
        raise ConfigError(f"ckpt_path: {error}") from None
    if refit.is_refit(checkpoint.get("NamesDataModule")):  # finished, and it has seen the validation names
        raise ConfigError(f"ckpt_path={path} is a refit model (trained on train + validation), not a training state: "
                          "resume from the run's last.ckpt or ckpt_path=last")
    trained_with = checkpoint["hyper_parameters"]
    wrong = [f"model.{key}={cfg.model.get(key)} (checkpoint: {trained_with.get(key)})" for key in RESUME_MUST_MATCH
             if key in cfg.model and trained_with.get(key) != cfg.model.get(key)]
    if wrong:
        raise ConfigError(f"ckpt_path={path} cannot resume this model: {', '.join(wrong)}; "
                          "resume with the checkpoint's model settings")
    return str(path), checkpoint


def check_settings(cfg: DictConfig) -> None:
    """Settings that would fail only after training (or never, silently), refused before anything runs."""
    for key in SWITCHES:  # `test=no` is the string "no" to Hydra: truthy, the opposite of what was meant
        value = OmegaConf.select(cfg, key)
        if value is not None and not isinstance(value, bool):
            raise ConfigError(f"{key}={value!r} must be true or false")
    for key, value in {"seed": cfg.get("seed"), "trainer.max_epochs": cfg.trainer.get("max_epochs")}.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"{key}={value!r} must be a whole number")
    if cfg.get("seed") is not None and not 0 <= cfg.seed < 2**32:  # numpy's range, which seed_everything enforces
        raise ConfigError(f"seed={cfg.seed} must be between 0 and 2**32 - 1")
    epochs = cfg.trainer.get("max_epochs")
    if epochs is not None and epochs != -1 and epochs < 1:  # -1 is Lightning's "no limit"
        raise ConfigError(f"trainer.max_epochs={epochs} trains nothing: pass a positive number of epochs")
    if cfg.get("task_name") == "finetune" and not cfg.model.get("init_from"):
        raise ConfigError("model.init_from is missing: pass model.init_from=<best.ckpt of "
                          "experiment=surnames_pretrain>")
    if cfg.model.get("known_names_cache") and not cfg.model.get("init_from"):
        raise ConfigError(f"model.known_names_cache={cfg.model.known_names_cache} is part of fine-tuning: use it "
                          "with model.init_from (experiment=finetune), or set model.known_names_cache=null")
    if (cfg.get("refit") or {}).get("enabled") and str(cfg.data.get("_target_", "")).endswith("SurnamesDataModule"):
        raise ConfigError("refit.enabled=true is for the names corpus: the surnames pretraining has no refit; pass "
                          "refit.enabled=false")
    precision, clip = str(cfg.trainer.get("precision")), cfg.trainer.get("gradient_clip_val")
    if precision.startswith("16") and clip and (cfg.model.get("optimizer") or {}).get("fused"):
        # float16's loss scaler unscales inside a fused step, after Lightning would have clipped: it refuses mid-run
        raise ConfigError(f"model.optimizer.fused=true cannot clip gradients (trainer.gradient_clip_val={clip}) "
                          f"under trainer.precision={precision}: pass model.optimizer.fused=false or "
                          "trainer.precision=bf16-mixed")
    settings = cfg.get("calibration")
    if settings and settings.get("enabled"):
        try:
            check_calibration(settings.get("coverages"), settings.get("bins"))
        except ValueError as error:
            raise ConfigError(str(error)) from None


def train(cfg: DictConfig) -> dict[str, float]:
    """Train, then test the best checkpoint. Returns the final metrics (callback_metrics as floats)."""
    check_settings(cfg)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    ckpt_path, resumed = resolve_checkpoint(cfg)
    datamodule = build(cfg, "data")
    pretrained = transfer.load_pretrained(cfg.model.init_from, cfg.model) if cfg.model.get("init_from") else None
    if pretrained is not None:  # fine-tuning keeps the pretrained vocabulary
        datamodule.fixed_vocab = pretrained["hyper_parameters"]["vocab"]
    datamodule.prepare_data()
    datamodule.setup("fit")
    if pretrained is not None:
        transfer.check_held_out(cfg.model.init_from, pretrained, datamodule)
    if ckpt_path is not None:  # before the model is built from this corpus' vocabulary
        datamodule.load_state_dict(resumed.get(type(datamodule).__name__, {}))
    model = build_model(cfg, datamodule, pretrained)
    callbacks = instantiate_all(cfg.get("callbacks"), "callbacks")
    loggers = instantiate_all(cfg.get("logger"), "logger")
    trainer: pl.Trainer = build(cfg, "trainer", callbacks=[*callbacks, RNGState()], logger=loggers or False,
                                plugins=[AtomicCheckpointIO()])
    datamodule.check_held_out_sizes(trainer.world_size)
    output_dir = Path(cfg.paths.output_dir)
    if trainer.is_global_zero:
        manifest = datamodule.write_manifest(output_dir / "split.json")
        log.info("split manifest: %s (sizes %s)", manifest, {k: len(v) for k, v in datamodule.splits.items()})

    trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    checkpoint = trainer.checkpoint_callback
    best = checkpoint.best_model_path if checkpoint is not None and checkpoint.best_model_path else None
    settings, summary = cfg.get("calibration"), None
    if best and settings and settings.get("enabled"):
        if trainer.is_global_zero:
            summary = calibrate_checkpoint(model, datamodule, best, settings, loggers)
        trainer.strategy.barrier()  # every rank tests the calibrated checkpoint
    final = best
    if best and cfg.get("refit", {}).get("enabled"):
        if trainer.world_size > 1:
            log.warning("refit skipped: it runs on one device; the model is best.ckpt, trained on train alone")
        else:
            final = refit_model(cfg, datamodule, pretrained, summary, loggers)
    if cfg.get("test"):
        trainer.test(model, datamodule=datamodule, ckpt_path=final, verbose=False)
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1})
    metrics["best_checkpoint"], metrics["model_checkpoint"] = best, final
    if trainer.is_global_zero:
        if final and cfg.get("card", {}).get("enabled"):
            write_model_card(output_dir, final, metrics)
        report(metrics, output_dir)
    return metrics


def refit_model(cfg: DictConfig, datamodule: pl.LightningDataModule, pretrained: dict | None,
                calibration: dict | None, loggers: list) -> str:
    """nameorigin.refit: a fresh model, same settings and seed, trained on train + validation; returns the path of
    checkpoints/refit.ckpt, which carries best.ckpt's calibration."""
    datamodule.add_validation_to_training()
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    model = build_model(cfg, datamodule, pretrained)
    callbacks = refit.training_callbacks(instantiate_all(cfg.get("callbacks"), "callbacks"))
    trainer: pl.Trainer = build(cfg, "trainer", callbacks=callbacks, logger=refit.refit_loggers(loggers) or False,
                                plugins=[AtomicCheckpointIO()], **refit.TRAINER_OVERRIDES)
    log.info("refit: a fresh model on train + validation (%d pairs) for %s epochs", len(datamodule.datasets["train"]),
             trainer.max_epochs)
    trainer.fit(model, datamodule=datamodule)
    refit.carry_calibration(model, calibration)
    path = Path(cfg.paths.output_dir) / "checkpoints" / refit.REFIT_FILE
    trainer.save_checkpoint(path, weights_only=True)  # a model to serve, not a state to resume
    datamodule.write_manifest(Path(cfg.paths.output_dir) / "split.json")  # now saying what the model trained on
    return str(path)


def build_model(cfg: DictConfig, datamodule: pl.LightningDataModule, pretrained: dict | None) -> pl.LightningModule:
    """The model config plus what the data decides (vocabulary, labels, prior, weights) and, when fine-tuning,
    what the pretrained checkpoint brings (loaded into the new model here)."""
    weights = cfg.model.get("class_weights")
    extra = {"class_weights": datamodule.class_weights(weights)} if isinstance(weights, str) else {}
    if getattr(datamodule, "label_names", None):
        extra["label_names"] = datamodule.label_names
    table = None
    if pretrained is not None:
        arguments, table = transfer.model_arguments(pretrained, cfg.model)
        extra.update(arguments)
    model = build(cfg, "model", vocab=datamodule.vocab, labels=datamodule.labels,
                  class_prior=datamodule.class_prior(), **extra)
    if pretrained is not None:
        log.info("fine-tuning from %s: loaded %s", cfg.model.init_from,
                 ", ".join(transfer.initialize(model.net, pretrained, table)))
    try:  # built once now, so a bad optimizer or scheduler setting is one line before training, not mid-fit
        scheduler = model.configure_optimizers().get("lr_scheduler", {}).get("scheduler")
        if scheduler is not None:  # some settings fail only once the schedule is computed (T_max=0 divides by 0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "scheduler.step() before optimizer.step()": a throwaway optimizer
                scheduler.step()
    except (ValueError, TypeError, ZeroDivisionError) as error:
        named = text_where_number(cfg) if isinstance(error, TypeError) and "'str'" in str(error) else None
        raise ConfigError(named or f"model.optimizer / model.scheduler: {error}") from None
    return model


def text_where_number(cfg: DictConfig) -> str | None:
    """Name the optimizer or scheduler setting given as text that a number was due for (lr=abc reaches torch as a
    string, whose own error only says that '<=' cannot compare a float and a str)."""
    for group in ("optimizer", "scheduler"):
        for key, value in (cfg.model.get(group) or {}).items():
            if isinstance(value, str) and not key.startswith("_") and not key.endswith("mode"):
                return f"model.{group}.{key}={value!r} is text where torch expects numbers"
    return None


def calibrate_checkpoint(model: pl.LightningModule, datamodule: pl.LightningDataModule, path: str,
                         settings: DictConfig, loggers: list) -> dict:
    """Fit the temperature and the conformal thresholds on validation and store them in the checkpoint."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.cpu().load_state_dict(state["state_dict"])
    model.net.temperature.fill_(1.0)
    logits, targets = model.collect_logits(datamodule.whole_split_loader("val"))  # on rank 0 alone: all of it
    summary = calibrate(logits, targets, list(settings.coverages), int(settings.bins))

    def store(checkpoint: dict) -> None:
        checkpoint["state_dict"]["net.temperature"] = torch.tensor(summary["temperature"])
        checkpoint["calibration"] = summary

    update_checkpoint(path, store)
    log.info("calibration on validation: temperature %.3f, ECE %.4f -> %.4f", summary["temperature"],
             summary["val_ece_raw"], summary["val_ece"])
    if summary["temperature_at_bound"]:
        log.warning("the temperature stopped at the end of its range %s: validation gives too little to calibrate "
                    "on (no errors, or hardly a right answer); treat the probabilities as rough", TEMPERATURE_RANGE)
    log_calibration(loggers, summary, logits, targets)
    return summary


def report(metrics: dict[str, Any], output_dir: Path) -> None:
    """Where things are, printed last so it is the first thing a user sees."""
    shown = {k: v for k, v in metrics.items() if k.startswith(("test/", "val/acc_best")) and "_f1/" not in k}
    lines = [f"  {k:<16} {v:.4f}" for k, v in sorted(shown.items())]
    final, best = metrics.get("model_checkpoint"), metrics.get("best_checkpoint")
    if final and final != best:
        lines.append(f"  model            {final}  (refit on train + validation; the one tested)")
    if best:
        picked = "  (trained on train, picked on validation)" if final != best else ""
        lines.append(f"  best checkpoint  {best}{picked}")
    lines.append(f"  dashboard        tensorboard --logdir {output_dir}")
    print("\n".join(["results:", *lines]), flush=True)
