"""An ensemble of k networks served as one model (ensemble.members=K): K - 1 more networks of the kind the run
serves, each trained from its own seed on the same split; the first k of them (k picked on validation, each
network more lifting accuracy by more than ensemble.min_gain) are assembled into one Ensemble, the run's
best.ckpt, which the steps after `fit` (linear part, calibration, test, margin, card) then treat as any
model. The members trained on the training split alone, and validation picked k: no refit follows."""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from nameorigin.base.errors import UserError
from nameorigin.fit.checkpointing import Served
from nameorigin.fit.module import NameClassifier
from nameorigin.fit.split_logits import logits_in_order
from nameorigin.training.plan import changed

log = logging.getLogger(__name__)
MEMBERS_FOLDER = "members"  # inside the run folder: members/1, members/2, ... (the run itself is the first)


def check(cfg: DictConfig) -> None:
    """Refuse, before anything trains, what an ensemble cannot be part of."""
    if cfg.ensemble.members == 1:
        return
    if cfg.get("ckpt_path"):
        raise UserError("ensemble.members with ckpt_path: a resumed run trains one network; drop one of them")
    if "ddp" in str(cfg.trainer.get("strategy") or ""):
        raise UserError("ensemble.members assembles its networks in one process: drop the DDP trainer, or "
                        "ensemble.members=1")


def member_config(cfg: DictConfig, picks: tuple, index: int) -> DictConfig:
    """The settings of the run's `index`-th network, from the candidate's composed config: the run's picks (the
    rule's or the search's), its own seed, its own folder, no refit and no search of its own."""
    return changed(cfg, {**{pick.key: pick.value for pick in picks}, "seed": int(cfg.seed) + index,
                         "refit.enabled": False, "search.budget_minutes": 0, "ensemble.members": 1,
                         "transfer.publish": None,
                         "paths.output_dir": str(Path(cfg.paths.output_dir) / MEMBERS_FOLDER / str(index))})


def pick_size(logits: list[torch.Tensor], targets: torch.Tensor, min_gain: float) -> tuple[int, list[float]]:
    """How many of the networks (in training order) to serve, from their validation logits (decided alike): the
    accuracy of the mean of the first k logits for every k, and the k kept (one more only where it adds more than
    `min_gain`)."""
    accuracy = [float((torch.stack(logits[:k]).mean(0).argmax(1) == targets).double().mean())
                for k in range(1, len(logits) + 1)]
    kept = 1
    for k in range(2, len(logits) + 1):
        if accuracy[k - 1] > accuracy[kept - 1] + min_gain:
            kept = k
    return kept, accuracy


def assemble(run: Any, fit_member: Callable[[int], Any]) -> tuple[Any, dict[str, float]]:
    """Train the other networks with `fit_member(index)` (a candidates.Fitted each), pick how many to serve, and
    make the ensemble the run's best.ckpt: returns the run to finish (its model the ensemble, no refit) and the
    figures for the results and the card."""
    settings = run.plan.settings.ensemble
    if run.best is None:
        log.warning("ensemble: the run kept no checkpoint, so one network")
        return run, {}
    others = [fit_member(index) for index in range(1, int(settings.members))]
    fitted = [run, *(other for other in others if other.best is not None)]
    models = [one.model.cpu() for one in fitted]  # each holding its best.ckpt's weights
    val = run.datamodule.datasets["val"]
    offset = run.model.net.logit_offset.cpu()
    logits = [logits_in_order(model.net, val, decided=False) + offset for model in models]
    size, accuracy = pick_size(logits, val.targets, float(settings.min_gain))
    figures = {f"ensemble/val_acc_{k}": acc for k, acc in enumerate(accuracy, start=1)}
    figures.update({"ensemble/members": float(size), "ensemble/fit_s_others": sum(
        one.metrics["time/fit_s"] for one in others)})
    log.info("ensemble: validation accuracy %s for the first 1..%d networks: %d served%s", ", ".join(
        f"{acc:.4f}" for acc in accuracy), len(accuracy), size,
             " (trained on train alone, as validation compared them: no refit)" if size > 1 else "")
    for one in others:
        shutil.rmtree(one.plan.output_dir / "checkpoints", ignore_errors=True)
    if size == 1:
        return run, figures
    ensemble = joined(models[:size])
    checkpoint = {key: value for key, value in run.best.checkpoint.items()  # the first network's optimizer state:
                  if key not in ("optimizer_states", "lr_schedulers")}   # an ensemble is served, not resumed
    # the members trained on train alone: validation picked k
    return dataclasses.replace(run, best=Served(run.best.path, ensemble, checkpoint), model=ensemble,
                               plan=run.plan.without_refit()), figures


def joined(models: list[NameClassifier]) -> NameClassifier:
    """One NameClassifier whose network is the Ensemble of the models' networks (their decision layers left neutral:
    the ensemble's own applies the logit adjustment and, after calibration, the temperature)."""
    hp = models[0].hparams
    ensemble = NameClassifier(models[0].config, hp["vocab"], hp["labels"], hp["class_prior"], hp["label_names"],
                              models[0].transfer_shape, members=len(models))
    with torch.no_grad():
        for member, model in zip(ensemble.net.members, models, strict=True):
            member.load_state_dict(model.net.state_dict())
            member.logit_offset.zero_()
            member.temperature.fill_(1.0)
    return ensemble
