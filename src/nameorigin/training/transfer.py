"""The `transfer` group: the surnames model that `make pretrain` publishes is the starting point
(nameorigin.training.starting_point) of a candidate that any run trains beside its plain model, with validation
picking which one is served; a pretraining publishes its model there."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from nameorigin.base.atomic import write_atomically
from nameorigin.base.errors import UserError
from nameorigin.config import OBJECTIVES, TransferUse, plain, shape_fields
from nameorigin.training.plan import changed
from nameorigin.training.starting_point import StartingPoint

log = logging.getLogger(__name__)
# Where the transferred candidate of a use=auto run writes its checkpoints and logs, inside the run folder.
CANDIDATE_FOLDER = "transfer"


def candidate(cfg: DictConfig) -> tuple[DictConfig, StartingPoint] | None:
    """The transferred candidate's settings (a copy of the run's, before anything fills it) and its starting point,
    read here once; None when this run trains no such candidate: transfer.use=never, a run fine-tuning by hand
    (model.init_from), a resumed run, or no starting point yet (then train.log says how to build one)."""
    settings = cfg.transfer
    if settings.use == TransferUse.never or cfg.model.get("init_from") or cfg.get("ckpt_path"):
        return None
    path = Path(settings.starting_point)
    if not path.is_file():
        if settings.use == TransferUse.always:
            raise UserError(f"transfer.use=always but transfer.starting_point={path} does not exist: build it once "
                            "with `make pretrain`, or pass transfer.use=auto")
        log.info("transfer: no starting point at %s, so the plain model alone (`make pretrain` builds it once; "
                 "then validation decides per table whether the surnames model helps)", path)
        return None
    point = StartingPoint.read(str(path), "transfer.starting_point")
    differs = point.fixed_differences(cfg.model)
    if differs and settings.use == TransferUse.auto:
        log.info("transfer: the starting point fixes settings this run sets otherwise (%s), so the plain model "
                 "alone, no candidate from the starting point (leave those settings to the data to try it)",
                 ", ".join(differs))
        return None
    cache = settings.known_names_cache
    if cache and not Path(cache).is_dir():
        raise UserError(f"transfer.known_names_cache={cache} does not exist: it is written by `make pretrain` "
                        "beside the starting point; pass transfer.known_names_cache=null to go without the lookup")
    values = {"model.init_from": str(path), "model.transfer_features": True, "model.known_names_cache": cache,
              "model.evidence_hidden": settings.evidence_hidden,
              "model.pretrained_lr_scale": settings.pretrained_lr_scale,
              "refit.enabled": False}  # validation picked it against the plain model: train alone, as compared
    if settings.use == TransferUse.auto:
        values["paths.output_dir"] = str(Path(cfg.paths.output_dir) / CANDIDATE_FOLDER)
    return changed(cfg, values), point


def setting_differences(plain_run: Any, transferred: Any) -> list[str]:
    """The settings shaping the weights on which the two candidates differ ("model.ngram_max: 5 plain, 4 from the
    starting point"), for the results block and the card."""
    one, other = plain(plain_run.plan.model), plain(transferred.plan.model)
    return [f"model.{key}: {one[key]} plain, {other[key]} from the starting point"
            for key in [*shape_fields(plain_run.plan.model, "encoder"), "ngram_buckets", "ngram_max"]
            if one[key] != other[key]]


def choose(fitted: list) -> tuple[Any, dict[str, float], list[str]]:
    """The plain and the transferred candidate (pipeline.Fitted, in that order) -> the one with the higher best
    validation figure on the run's objective (the plain one on a tie), both candidates' figures for the results and
    the card (`transfer/val_acc_plain`, or `transfer/val_person_acc_plain` on a table with counts or shares), and
    the settings on which they differ."""
    plain_run, transferred = fitted
    objective = plain_run.plan.settings.objective
    score = {"plain": best_score(plain_run), "transferred": best_score(transferred)}
    chosen = transferred if score["transferred"] > score["plain"] else plain_run
    log.info("transfer: validation %s %.4f plain, %.4f from the starting point (%.0f s and %.0f s of "
             "training): the %s model is served", OBJECTIVES.get(objective, objective), score["plain"],
             score["transferred"], plain_run.metrics["time/fit_s"], transferred.metrics["time/fit_s"],
             "transferred" if chosen is transferred else "plain")
    differences = setting_differences(plain_run, transferred)
    if differences:
        log.info("transfer: the candidates differ in %s", "; ".join(differences))
    figures = {figure_key(objective, "plain"): score["plain"],
               figure_key(objective, "transferred"): score["transferred"],
               "transfer/fit_s_plain": plain_run.metrics["time/fit_s"],
               "transfer/fit_s_transferred": transferred.metrics["time/fit_s"],
               "transfer/chosen": float(chosen is transferred)}
    return chosen, figures, differences


def figure_key(objective: str, candidate: str) -> str:
    """Where a candidate's best validation figure goes among the run's metrics: transfer/val_acc_plain, ..."""
    return f"transfer/{objective.replace('/', '_')}_{candidate}"


def compared(metrics: dict[str, Any]) -> tuple[str, float, float] | None:
    """The objective validation compared the candidates on (a key of OBJECTIVES), and the plain and transferred
    figures; None when the run compared no candidates."""
    for objective in OBJECTIVES:
        if figure_key(objective, "plain") in metrics:
            return objective, metrics[figure_key(objective, "plain")], metrics[figure_key(objective, "transferred")]
    return None


def tried_starting_point(results: dict[str, Any]) -> dict[str, Any] | None:
    """The starting point a run's results.json names as tried (StartingPoint.record), None when it tried none."""
    return (results.get("transfer") or {}).get("starting_point")


def discard(runs: list) -> None:
    """The candidates validation did not pick lose their checkpoints, so the run folder holds one model."""
    for run in runs:
        shutil.rmtree(run.plan.output_dir / "checkpoints", ignore_errors=True)


def refused(plain_run: Any, error: UserError) -> dict[str, Any]:
    """The candidate from the starting point was refused after the plain model had trained: the plain model is
    served and the run says why (the refused candidate's folder goes)."""
    log.warning("transfer: the candidate from the starting point was refused (%s): the plain model is served", error)
    shutil.rmtree(plain_run.plan.output_dir / CANDIDATE_FOLDER, ignore_errors=True)
    return {"refused": str(error)}


def best_score(run: Any) -> float:
    """A candidate's best validation figure on the objective (best.ckpt's), -inf when it kept no checkpoint."""
    callback = run.trainer.checkpoint_callback
    score = callback.best_model_score if callback is not None else None
    return float(score) if score is not None else float("-inf")


def publish(model: str, destination: str) -> None:
    """A pretraining's served model copied to where runs look for their starting point (transfer.publish)."""
    write_atomically(Path(destination), lambda path: shutil.copyfile(model, path))
    log.info("starting point published: %s (runs with transfer.use=auto now try it on validation)", destination)
