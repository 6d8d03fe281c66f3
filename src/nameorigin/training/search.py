"""Settings picked on the table's own validation split, within a budget: an in-process Optuna study over the
settings the run left to the data (nameorigin.training.sizing fills them by its rule first).

The rule's picks are the first candidate, so the search can only find something better on validation. Each
candidate trains on the training split and reports its validation accuracy after every epoch; a Hyperband pruner
stops the hopeless ones early, so most of the budget goes to the promising. No candidate starts once the budget
is spent, and one still running then stops after its current batch. The best candidate's settings become the
run's picks, and the run trains with them as with any setting (the test split is read once, after). `search.space`
replaces the default space with the user's own (a list of choices, or {low, high, log} for a number).

Optuna's Lightning integration imports `lightning.pytorch`; this project trains with `pytorch_lightning`, so
the few lines that report to the trial are a callback of its own (ReportToTrial).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import Callback

from nameorigin.base.errors import UserError
from nameorigin.base.extras import require_extra
from nameorigin.training.plan import changed
from nameorigin.training.sizing import NGRAM_TABLE_LIMIT, Pick

log = logging.getLogger(__name__)

# What the rule fills, searched: choices, or (low, high, log) for a number. A key the run set itself stays fixed.
DEFAULT_SPACE: dict[str, Any] = {
    "model.hidden_size": [64, 128, 256, 384],
    "model.optimizer.lr": {"low": 1e-3, "high": 1e-2, "log": True},
    "model.dropout": {"low": 0.0, "high": 0.5},
    "model.label_smoothing": [0.0, 0.05, 0.1, 0.2],
    "model.ngram_max": [3, 4, 5],
    "model.ngram_buckets": [2**16, 2**17, 2**18],
    "data.batch_size": [64, 128, 256, 512],
}


@dataclass
class Candidate:
    """One trial as the log and the card list it."""

    number: int
    settings: dict[str, Any]
    val_acc: float | None  # its best validation figure on the run's objective (accuracy, or people-weighted)
    epochs: float  # to its last validation report
    seconds: float
    state: str  # complete, pruned (by the pruner or the budget) or failed

    def line(self) -> str:
        acc = "n/a" if self.val_acc is None else f"{self.val_acc:.4f}"
        return f"candidate {self.number}: val acc {acc} after {self.epochs:g} epochs, {self.seconds:.0f} s, " \
               f"{self.state}: {shown_settings(self.settings)}"


def shown_settings(settings: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value:.3g}" if isinstance(value, float) else f"{key}={value}"
                     for key, value in settings.items())


class ReportToTrial(Callback):
    """Reports each epoch's validation figure on the run's objective (val/acc, or val/person_acc on a table with
    counts or shares) to the Optuna trial and stops the training when the pruner says so or the budget is spent."""

    def __init__(self, trial: Any, deadline: float, reports_per_epoch: int = 1, objective: str = "val/acc"):
        self.trial, self.deadline, self.per_epoch, self.objective = trial, deadline, reports_per_epoch, objective
        self.best, self.reports, self.stopped = None, 0, ""

    @property
    def epochs(self) -> float:
        """Epochs trained to the last report (a fraction when validation runs within an epoch)."""
        return self.reports / self.per_epoch

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking or self.objective not in trainer.callback_metrics:
            return
        value = float(trainer.callback_metrics[self.objective])
        self.best = value if self.best is None else max(self.best, value)
        self.reports += 1
        self.trial.report(value, self.reports)
        if self.trial.should_prune():
            self.stopped = "pruned"
        elif time.monotonic() > self.deadline:
            self.stopped = "stopped at the budget"
        trainer.should_stop = trainer.should_stop or bool(self.stopped)

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        """The budget holds to a batch, not to an epoch: a large table's epoch is minutes long."""
        if time.monotonic() > self.deadline:
            self.stopped = self.stopped or "stopped at the budget"
            trainer.should_stop = True


def space_of(cfg: DictConfig, picks: list[Pick], labels: int, given: set[str] = frozenset()) -> dict[str, Any]:
    """The user's space (search.space) less the keys set on the command line (`given`), or the default space over
    the keys the run left to the data."""
    user = OmegaConf.to_container(cfg.search.space, resolve=True) if cfg.search.space else None
    if user:
        for key, spec in user.items():
            if OmegaConf.select(cfg, key, default="absent") == "absent":
                raise UserError(f"search.space: {key} is not a setting of this run: name a key such as "
                                "model.hidden_size or model.optimizer.lr")
            check_spec(key, spec)
        return {key: spec for key, spec in user.items() if key not in given}
    left = {pick.key for pick in picks}
    space = {key: spec for key, spec in DEFAULT_SPACE.items() if key in left}
    if "model.label_smoothing" in space and not any(p.key == "model.label_smoothing" and p.value for p in picks):
        del space["model.label_smoothing"]  # soft targets: the rule set it to 0, nothing to smooth
    if "model.ngram_buckets" in space:
        space["model.ngram_buckets"] = [b for b in space["model.ngram_buckets"] if b * labels <= NGRAM_TABLE_LIMIT] \
            or [min(space["model.ngram_buckets"])]
    return space


def check_spec(key: str, spec: Any) -> None:
    if isinstance(spec, list) and spec:
        return
    if isinstance(spec, dict) and {"low", "high"} <= spec.keys() and spec["low"] < spec["high"]:
        return
    raise UserError(f"search.space.{key}: give a list of choices or {{low: L, high: H}} with L < H (log: true "
                    "for a log scale)")


def suggest(trial: Any, key: str, spec: Any) -> Any:
    if isinstance(spec, list):
        return trial.suggest_categorical(key, spec)
    if isinstance(spec["low"], int) and isinstance(spec["high"], int) and not spec.get("log"):
        return trial.suggest_int(key, spec["low"], spec["high"])
    return trial.suggest_float(key, float(spec["low"]), float(spec["high"]), log=bool(spec.get("log", False)))


def first_candidate(cfg: DictConfig, space: dict[str, Any]) -> dict[str, Any]:
    """The run's current values (the rule's picks and the user's own) of the searched keys that fit the space."""
    values = {}
    for key, spec in space.items():
        value = OmegaConf.select(cfg, key)
        value = value.value if isinstance(value, Enum) else value  # a choice's plain name, as the space lists it
        fits = value in spec if isinstance(spec, list) else \
            value is not None and spec["low"] <= value <= spec["high"]
        if fits:
            values[key] = value
    return values


def search(cfg: DictConfig, picks: list[Pick], train_candidate: Callable[[DictConfig, Callback], None],
           labels: int, given: set[str] = frozenset()) -> tuple[list[Pick], list[Candidate]]:
    """Run the study (`cfg`: the run's settings with the rule's picks in them, only read). Returns the picks (the
    searched keys now say so, with the best candidate's values) and every candidate. `train_candidate(cfg,
    callback)` trains one candidate with that callback; `given`: the keys set on the command line, which stay as
    given."""
    optuna = require_extra("optuna", "sweep", "search.budget_minutes")

    settings = cfg.search
    space = space_of(cfg, picks, labels, given)
    if not space:
        log.info("search: nothing to search (every setting of its space was given)")
        return picks, []
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    budget = 60 * float(settings.budget_minutes)
    start = time.monotonic()
    deadline = start + budget
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=int(settings.seed)),
                                pruner=optuna.pruners.HyperbandPruner(min_resource=1))
    study.enqueue_trial(first_candidate(cfg, space))
    candidates: list[Candidate] = []

    outcomes: dict[tuple, float | None] = {}  # settings already tried -> their figure (None: not a finished one)

    def objective(trial: Any) -> float:
        values = {key: suggest(trial, key, spec) for key, spec in space.items()}
        seen = tuple(sorted(values.items()))
        if seen in outcomes:  # the sampler drew settings it has tried: their figure again, without training
            if outcomes[seen] is None:
                raise optuna.TrialPruned()
            return outcomes[seen]
        trial_cfg = changed(cfg, values)
        reporter = ReportToTrial(trial, deadline, int(settings.reports_per_epoch), cfg.objective)
        began, state = time.monotonic(), "failed"
        try:  # a UserError (a setting this table cannot take) fails the candidate; the study goes on
            train_candidate(trial_cfg, reporter)
            state = reporter.stopped or "complete"
        finally:
            candidates.append(Candidate(trial.number, values, reporter.best, reporter.epochs,
                                        time.monotonic() - began, state))
            log.info("search: %s", candidates[-1].line())
        finished = reporter.best is not None and not reporter.stopped  # a partial figure cannot be the pick
        outcomes[seen] = reporter.best if finished else None
        if not finished:
            raise optuna.TrialPruned()
        return reporter.best

    def out_of_budget(study: Any, trial: Any) -> None:
        if time.monotonic() > deadline:
            study.stop()

    study.optimize(objective, n_trials=int(settings.max_trials), timeout=budget, callbacks=[out_of_budget],
                   catch=(UserError,))
    return take_best(picks, candidates, time.monotonic() - start, budget), candidates


def take_best(picks: list[Pick], candidates: list[Candidate], seconds: float, budget: float) -> list[Pick]:
    """The rule's picks with the best finished candidate's settings in place of theirs, each saying so (the rule's
    alone, when none finished)."""
    complete = [c for c in candidates if c.state == "complete" and c.val_acc is not None]
    if not complete:
        log.warning("search: no candidate finished within %.0f s; the rule's settings stay", seconds)
        return picks
    best = max(complete, key=lambda c: (c.val_acc, -c.number))
    why = (f"searched on validation: candidate {best.number} of {len(candidates)} ({len(complete)} finished) in "
           f"{seconds:.0f} s of a {budget:.0f} s budget, val acc {best.val_acc:.4f}")
    log.info("search: picked candidate %d (val acc %.4f) in %.0f s of a %.0f s budget", best.number, best.val_acc,
             seconds, budget)
    kept = [p for p in picks if p.key not in best.settings]
    return kept + [Pick(key, value, why) for key, value in best.settings.items()]


def plain(candidates: list[Candidate]) -> list[dict[str, Any]]:
    return [asdict(candidate) for candidate in candidates]


def command_line_keys() -> set[str]:
    """The keys the command line set (Hydra's task overrides), which a search leaves as given."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return set()
    return {override.split("=", 1)[0].lstrip("+~") for override in HydraConfig.get().overrides.task}
