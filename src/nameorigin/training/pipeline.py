"""What `python train.py` does, as a function tests can call, read top to bottom: the candidates prepared (each
one's plan resolved once, nameorigin.training.plan) and fitted, validation picking one, then the stages after
`fit`, each taking the plan and what the stage before returned: the linear part mixed in, the calibration fitted,
the refit, the test and the margin of the model served, and the outputs."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from nameorigin.base.errors import UserError
from nameorigin.config import TransferUse
from nameorigin.evaluation.margin import margin_metrics, measure_margin
from nameorigin.fit.split_logits import has_pairs
from nameorigin.fit.timing import StageClock
from nameorigin.fit.trackers import report_to_trackers
from nameorigin.model.artifacts import Calibration
from nameorigin.model.ngram_linear import LinearFit
from nameorigin.training import ensemble, linear_mix, transfer
from nameorigin.training.calibration import calibrate_model
from nameorigin.training.candidates import Fitted, fit_candidate, prepare
from nameorigin.training.outputs import RunChecks, ServedFiles, report, write_outputs
from nameorigin.training.refit import refit_model

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


def train(cfg: DictConfig) -> dict[str, Any]:
    """Train (the plain model, and the one from the starting point when there is one: validation picks), then
    finish the chosen model. Returns the final metrics (floats) and the served checkpoints' paths
    (`best_checkpoint`, `model_checkpoint`)."""
    quiet_third_party()
    ensemble.check(cfg)
    sources = [(cfg, None)]  # each candidate's composed config and starting point, read once
    transferred = transfer.candidate(cfg)
    if transferred is not None:
        sources = [transferred] if cfg.transfer.use == TransferUse.always else [*sources, transferred]
    fitted, kept, transfer_note = [], [], {}
    for source in sources:
        try:
            fitted.append(fit_candidate(*prepare(*source)))
            kept.append(source)
        except UserError as error:
            if source is not transferred or not fitted:  # transfer.use=always: nothing else to serve
                raise
            transfer_note = transfer.refused(fitted[0], error)
    run, source, figures = fitted[0], kept[0], {}
    if len(fitted) > 1:
        run, figures, differences = transfer.choose(fitted)
        transfer.discard([other for other in fitted if other is not run])
        source = kept[fitted.index(run)]
        transfer_note = {"differences": differences} if differences else {}
    if run.plan.settings.ensemble.members > 1:  # each member starts where the run did, read once
        composed, plan = source[0], run.plan
        run, assembled = ensemble.assemble(run, lambda index: fit_candidate(*prepare(
            ensemble.member_config(composed, plan.picks, index), plan.starting_point)))
        figures.update(assembled)
    tried = {"starting_point": transferred[1].record()} if transferred is not None else {}
    return finish(run, Path(cfg.paths.output_dir), figures, {**transfer_note, **tried})


def finish(run: Fitted, output_dir: Path, figures: dict[str, float], transfer_note: dict) -> dict[str, Any]:
    """The stages after `fit`, in order, on best.ckpt's weights in memory; the run's own files go to `output_dir`
    (the run folder, whichever candidate's folder the model came from). Returns the run's metrics."""
    plan, trainer, datamodule = run.plan, run.trainer, run.datamodule
    metrics = {**run.metrics, **figures}
    clock = StageClock()
    served, mixed = serve(run, clock)
    tested = served.tested.model if served.tested else run.model
    margin = None
    if plan.settings.test:
        with clock.stage("test"):
            trainer.test(tested, datamodule=datamodule, verbose=False)
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1})
        if served.tested and plan.settings.margin.enabled and trainer.is_global_zero and has_pairs(datamodule):
            with clock.stage("margin"):
                margin = measure_margin(tested, datamodule, run.loggers, mixed)
            metrics.update(margin_metrics(margin))
    metrics.update(clock.metrics())
    final = served.tested.path if served.tested else None
    metrics["best_checkpoint"], metrics["model_checkpoint"] = served.best.path if served.best else None, final
    if trainer.is_global_zero:
        with clock.stage("writing the outputs"):  # in train.log only: results.json is among them
            write_outputs(plan, output_dir, served, tested, metrics,
                          RunChecks(margin, run.gradient_check, transfer_note or None))
        report_to_trackers(run.loggers, plan.flat(), plan.picks, final,
                           [output_dir / "MODEL_CARD.md", output_dir / "label_report.json"])
        report(metrics, output_dir, margin, transfer_note)  # the results block: the run's last lines
    return metrics


def serve(run: Fitted, clock: StageClock) -> tuple[ServedFiles, LinearFit | None]:
    """The models to serve, not yet written: best.ckpt with its linear part mixed in and its calibration fitted
    (both on rank 0; every rank then tests what it fitted), then the refit when asked. Returns them and the linear
    model mixed into the tested one (the margin's baseline), or None."""
    best, plan, trainer = run.best, run.plan, run.trainer
    if best is None:
        return ServedFiles(), None
    model = best.model.cpu()
    mixed, calibration = None, None
    if trainer.is_global_zero:
        with clock.stage("linear part"):
            mixed = linear_mix.mix_best(model, run.datamodule)  # before calibration: it fits the model served
        if plan.settings.calibration.enabled:
            with clock.stage("calibration"):
                calibration = calibrate_model(model, run.datamodule, plan.settings.calibration, run.loggers)
    mixture = mixed.mixture if mixed else None
    if trainer.world_size > 1:
        state, fitted, mixture = trainer.strategy.broadcast(
            (model.state_dict(), calibration.plain() if calibration else None, mixture), src=0)
        calibration = Calibration.from_plain(fitted)
        model.load_state_dict(state)
    model.serve_with(calibration, mixture)
    best.keep_model()
    if not plan.settings.refit.enabled:
        return ServedFiles(best), mixed.fit if mixed else None
    if trainer.world_size > 1:
        log.warning("refit skipped: it runs on one device; the model is best.ckpt, trained on train alone")
        return ServedFiles(best), mixed.fit if mixed else None
    with clock.stage("refit"):
        refit, refit_linear = refit_model(plan, run.datamodule, calibration, run.loggers, mixture)
    return ServedFiles(best, refit), refit_linear
