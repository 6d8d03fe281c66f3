"""EpochTimer: each training epoch's wall time and names per second, in the log and in TensorBoard
(`time/train_epoch_s`, `time/train_names_per_s`), validation excluded: the figure that compares devices, batch
sizes and the fast path (docs/speed.md). StageClock: how long each step after `fit` took, so a user sees where a
run's time went."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback

from nameorigin.data.batching import OneLengthRows

log = logging.getLogger(__name__)


class EpochTimer(Callback):
    """Lightning validates inside the training epoch (at its end, or every val_check_interval), so each
    validation's seconds are taken out of the epoch's."""

    def __init__(self) -> None:
        self.start, self.names, self.validating, self.validation_s = 0.0, 0, 0.0, 0.0

    @staticmethod
    def wait(pl_module: pl.LightningModule) -> None:
        if pl_module.device.type == "cuda":  # kernels still queued belong to the epoch they were launched in
            torch.cuda.synchronize(pl_module.device)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.wait(pl_module)
        self.start, self.names, self.validation_s = time.perf_counter(), 0, 0.0

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.wait(pl_module)
        self.validating = time.perf_counter()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.wait(pl_module)
        self.validation_s += time.perf_counter() - self.validating

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self.names += len(batch.rows if isinstance(batch, OneLengthRows) else batch.lengths)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.wait(pl_module)
        seconds = time.perf_counter() - self.start - self.validation_s
        rate = self.names * trainer.world_size / seconds
        pl_module.log_dict({"time/train_epoch_s": seconds, "time/train_names_per_s": rate}, sync_dist=True)
        if trainer.is_global_zero:
            log.info("epoch %d trained in %.2f s (%.0f names/s)", trainer.current_epoch, seconds, rate)


class StageClock:
    """The seconds of each step after `fit` (the linear part, calibration, the refit, the test, the margin): each
    logged as it ends, all of them kept for results.json and the results block (`time/step_<step>_s`)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = time.perf_counter() - start
            log.info("%s took %.1f s", name, self.seconds[name])

    def metrics(self) -> dict[str, float]:
        return {f"{STEP}{name.replace(' ', '_')}_s": seconds for name, seconds in self.seconds.items()}


STEP = "time/step_"  # the results' key of a step after `fit`: time/step_linear_part_s, ...


def fit_seconds(metrics: dict[str, Any]) -> tuple[float, int] | None:
    """Every network's training, in seconds, and how many networks: the served one's `time/fit_s`, or both of
    transfer's candidates where it trained two, and an ensemble's other members."""
    if "transfer/fit_s_plain" in metrics:
        fits = [metrics["transfer/fit_s_plain"], metrics["transfer/fit_s_transferred"]]
    elif "time/fit_s" in metrics:
        fits = [metrics["time/fit_s"]]
    else:
        return None
    others = int(metrics.get("ensemble/members", 1)) - 1
    return sum(fits) + metrics.get("ensemble/fit_s_others", 0.0), len(fits) + others


def step_seconds(metrics: dict[str, Any]) -> list[tuple[str, float]]:
    """Each step after `fit` that ran, by name, with its seconds."""
    return [(key[len(STEP):-2].replace("_", " "), value) for key, value in metrics.items() if key.startswith(STEP)]


def time_line(metrics: dict[str, Any]) -> str | None:
    """Where the run's time went, in one line: fitting every network, then each step after it that ran."""
    fit = fit_seconds(metrics)
    shown = [] if fit is None else [f"fit {fit[0]:.1f} s" + (f" ({fit[1]} networks)" if fit[1] > 1 else "")]
    shown += [f"{name} {seconds:.1f} s" for name, seconds in step_seconds(metrics)]
    return ", ".join(shown) if shown else None
