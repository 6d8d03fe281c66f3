"""Checkpoints that survive crashes: atomic writes, and the RNG state needed to resume bit-for-bit."""

from __future__ import annotations

import io
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from pytorch_lightning.callbacks import Callback

from nameorigin.base.atomic import write_atomically, write_bytes_synced
from nameorigin.base.checkpoint_io import load_checkpoint


class AtomicCheckpointIO(TorchCheckpointIO):
    """Serialize in memory, write to a temporary file in the same folder, then rename: a crash or a full disk
    mid-save leaves the old file whole (nameorigin.base.atomic)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None) -> None:
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        write_atomically(path, write_bytes_synced(buffer.getbuffer()))


def update_checkpoint(path: str | Path, update: Callable[[dict[str, Any]], None]) -> None:
    """Load a checkpoint (weights-only), let `update` change it, and write it back atomically."""
    path = Path(path)
    checkpoint = load_checkpoint(path)
    update(checkpoint)
    AtomicCheckpointIO().save_checkpoint(checkpoint, path)


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
