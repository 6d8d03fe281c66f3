"""Checkpoints that survive crashes: atomic writes, and the RNG state needed to resume bit-for-bit."""

from __future__ import annotations

import io
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from pytorch_lightning.callbacks import Callback

from nameorigin.base.atomic import write_atomically, write_bytes_synced


class AtomicCheckpointIO(TorchCheckpointIO):
    """Serialize in memory, write to a temporary file in the same folder, then rename: a crash or a full disk
    mid-save leaves the old file whole (nameorigin.base.atomic)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None) -> None:
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        write_atomically(path, write_bytes_synced(buffer.getbuffer()))


@dataclass
class Served:
    """A checkpoint the run serves (best.ckpt, or the refit's refit.ckpt): where it is written, the model whose
    weights it holds (in memory) and the rest of it (as Lightning made it during training). `keep_model` takes the
    model's weights and what the steps after `fit` decided once they are done; the test's margin and the card are
    added after; `write` writes it, once, at the end."""

    path: str
    model: pl.LightningModule
    checkpoint: dict[str, Any]

    def keep_model(self) -> None:
        """The model's weights and settings as they are now, and its calibration and linear part (its split
        settings stay those of the training that made it)."""
        checkpoint = self.checkpoint
        for key in ("calibration", "linear_part"):
            checkpoint.pop(key, None)
        state = {key: value.detach().cpu().clone() for key, value in self.model.state_dict().items()}
        checkpoint.update(state_dict=state, hyper_parameters=dict(self.model.hparams), **self.model.served_decisions())

    def write(self) -> None:
        AtomicCheckpointIO().save_checkpoint(self.checkpoint, self.path)


class RNGState(Callback):
    """Keeps the torch and python RNG states in the checkpoint and puts them back before the resumed run's first
    training batch, so dropout masks after a resume are those an uninterrupted run draws. The state is captured
    when the checkpoint is written (after validation, or after a batch when the run is stopped mid-epoch):
    nothing draws random numbers between that and the next batch (the loaders have generators of their own),
    while a resumed run's sanity check does, hence the deferred restore."""

    def __init__(self) -> None:
        self._pending: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        version, state, gauss = random.getstate()
        return {"torch": torch.get_rng_state(), "python": [version, list(state), gauss]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._pending = state

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if self._pending is not None:
            torch.set_rng_state(self._pending["torch"])
            version, values, gauss = self._pending["python"]
            random.setstate((version, tuple(values), gauss))
            self._pending = None
