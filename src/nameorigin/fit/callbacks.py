"""GradAccumulationLogger: shows, live, that each reused cell's gradient is the sum of one contribution per use.

Every `every_n_steps` optimizer steps the module's forward records per-timestep tensors (CharRNN capture);
after that backward this callback splits each shared weight's gradient by distance from the last character the
cell read, checks that the pieces add up to what this backward added to `.grad`, and logs it all under
`grad_accum/`: `grad_accum/<weight>/...` for the forward cell, `grad_accum/<cell>/<weight>/...` for any other
(`cell_reverse`, which reads each name backwards, so its distance 0 is the name's first character). It only
reads: training itself is unchanged.
"""

from __future__ import annotations

import logging
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.loggers import TensorBoardLogger

from nameorigin.base.errors import UserError
from nameorigin.fit.plots import figure_to_writer, heatmap_figure, partial_sum_figure
from nameorigin.model.charrnn import FIRST_CELL, SHARED_WEIGHTS

log = logging.getLogger(__name__)


def gradient_horizon(norms: torch.Tensor, mass: float = 0.9) -> int:
    """Smallest number of final characters whose contributions hold `mass` of the summed norm."""
    shares = torch.cumsum(norms, 0) / norms.sum().clamp_min(1e-30)
    return int(torch.searchsorted(shares, shares.new_tensor(mass) - 1e-12).item()) + 1


class GradAccumulationLogger(Callback):
    """Logs per-timestep gradient contributions of each cell's shared weights and checks their sum."""

    def __init__(self, every_n_steps: int = 50, tolerance: float = 1e-5, horizon_mass: float = 0.9,
                 max_distance: int = 20):
        if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int) or every_n_steps < 1:
            raise UserError(f"callbacks.grad_accumulation.every_n_steps={every_n_steps!r} must be a whole number >= 1")
        self.every_n_steps, self.tolerance = every_n_steps, tolerance
        self.horizon_mass, self.max_distance = horizon_mass, max_distance
        self.history: list[dict[str, Any]] = []  # one entry per inspected step, kept for the epoch-end images
        self.max_residual = 0.0
        self.keys: list[str] = []  # the panels' weights, every cell's (shared_weights)
        self._last_captured_step = -1
        self._rendered = 0
        self._grad_before: dict[str, torch.Tensor | None] | None = None

    def state_dict(self) -> dict[str, Any]:
        """What the checks so far found, so a resumed run's images and summary hold the steps before it."""
        return {"history": self.history, "max_residual": self.max_residual, "keys": self.keys,
                "last_captured_step": self._last_captured_step, "rendered": self._rendered}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history, self.max_residual, self.keys = state["history"], state["max_residual"], state["keys"]
        self._last_captured_step, self._rendered = state["last_captured_step"], state["rendered"]

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        step = trainer.global_step
        if step % self.every_n_steps == 0 and step != self._last_captured_step:
            self._last_captured_step = step
            pl_module.capture_next()

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        if pl_module.net.capture is None:
            return
        # With accumulate_grad_batches > 1, .grad already holds earlier batches: compare only what this adds.
        self._grad_before = {key: None if weight.grad is None else weight.grad.detach().clone()
                             for key, weight in shared_weights(pl_module.net)}

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if pl_module.net.capture is None or self._grad_before is None:
            return
        capture, before, self._grad_before = pl_module.net.take_capture(), self._grad_before, None
        pieces = {panel_key(cell, weight): piece for cell, record in capture.items()
                  for weight, piece in record.contributions().items()}
        lengths = next(iter(capture.values())).lengths
        self.keys = [key for key, _ in shared_weights(pl_module.net)]
        record: dict[str, Any] = {"step": trainer.global_step, "mean_length": float(lengths.float().mean())}
        for name, weight in shared_weights(pl_module.net):
            grad = weight.grad.detach()
            added = grad if before[name] is None else grad - before[name]
            per_use = pieces[name].to(added.dtype)
            total = per_use.sum(0)
            if trainer.world_size > 1:  # DDP averages .grad across ranks during backward: average the sums too
                total = trainer.strategy.reduce(total, reduce_op="mean")
            residual = float((total - added).norm() / added.norm().clamp_min(1e-30))
            norms = per_use.flatten(1).norm(dim=1)
            partial = torch.cumsum(per_use, 0).flatten(1).norm(dim=1) / added.norm().clamp_min(1e-30)
            record[name] = {"residual": residual, "norms": norms.cpu(), "partial": partial.cpu(),
                            "horizon": gradient_horizon(norms, self.horizon_mass),
                            "last_char_share": float(norms[0] / norms.sum().clamp_min(1e-30))}
            self.max_residual = max(self.max_residual, residual)
            if not residual < self.tolerance:
                log.warning("grad_accum check failed at step %d: %s residual %.3g > %.1g",
                            trainer.global_step, name, residual, self.tolerance)
        self.history.append(record)
        if trainer.is_global_zero:
            self._write_scalars(trainer, record)

    def _write_scalars(self, trainer: pl.Trainer, record: dict[str, Any]) -> None:
        writer = tensorboard_writer(trainer)
        if writer is None:
            return
        step = record["step"]
        for name in self.keys:
            entry = record[name]
            writer.add_scalar(f"grad_accum/{name}/residual", entry["residual"], step)
            writer.add_scalar(f"grad_accum/{name}/horizon90", entry["horizon"], step)
            writer.add_scalar(f"grad_accum/{name}/last_char_share", entry["last_char_share"], step)
            norms = entry["norms"].double()
            distances = torch.arange(len(norms), dtype=torch.float64)
            # A histogram over distance-from-end whose bucket heights are the contributions' norms.
            writer.add_histogram_raw(
                f"grad_accum/{name}/norm_by_distance", min=0.0, max=float(len(norms) - 1),
                num=float(norms.sum()), sum=float((norms * distances).sum()),
                sum_squares=float((norms * distances**2).sum()), bucket_limits=(distances + 0.5).tolist(),
                bucket_counts=norms.tolist(), global_step=step)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        writer = tensorboard_writer(trainer)
        if writer is None or len(self.history) == self._rendered or not trainer.is_global_zero:
            return  # nothing new to draw
        self._rendered = len(self.history)
        steps = [r["step"] for r in self.history]
        rows = {n: [r[n]["norms"][: self.max_distance] for r in self.history] for n in self.keys}
        figure_to_writer(writer, "grad_accum/heatmap", heatmap_figure(steps, rows, self.max_distance),
                         trainer.global_step)
        latest = self.history[-1]
        curves = {n: latest[n]["partial"] for n in self.keys}
        figure_to_writer(writer, "grad_accum/running_sum", partial_sum_figure(curves, latest["step"]),
                         trainer.global_step)

    def summary(self, last: int = 10) -> dict[str, Any]:
        """Means over the last `last` checks (one batch's horizon mostly reflects its names' length)."""
        recent = self.history[-last:]
        mean = lambda values: sum(values) / len(values)  # noqa: E731
        return {"checks": len(self.history), "max_residual": self.max_residual,
                "mean_name_length": round(mean([r["mean_length"] for r in recent]), 2),
                "horizon90": {n: round(mean([r[n]["horizon"] for r in recent]), 2) for n in self.keys},
                "last_char_share": {n: round(mean([r[n]["last_char_share"] for r in recent]), 3)
                                    for n in self.keys}}

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.history and trainer.is_global_zero:
            log.info("grad_accum (means over the last 10 checks): %s", self.summary())


def panel_key(cell: str, weight: str) -> str:
    """The name of a cell's weight in the panels: the forward cell's weights by their own name, as for a one-way
    model; another cell's prefixed with the cell's name."""
    return weight if cell == FIRST_CELL else f"{cell}/{weight}"


def shared_weights(net: Any) -> list[tuple[str, torch.nn.Parameter]]:
    """Every reused weight of every cell, by panel key."""
    return [(panel_key(name, weight), getattr(cell, weight)) for name, cell in net.named_cells()
            for weight in SHARED_WEIGHTS]


def tensorboard_writer(trainer: pl.Trainer) -> Any | None:
    """The SummaryWriter of the first TensorBoard logger, or None when TensorBoard logging is off."""
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            return logger.experiment
    return None
