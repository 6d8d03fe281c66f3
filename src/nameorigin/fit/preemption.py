"""Stopping on a signal without losing the epoch: SIGTERM (a preemptible machine's or a cluster's notice, with a
grace period) or SIGINT (Ctrl+C) while training makes the run save `last.ckpt` at the end of the batch in flight,
say so in one line, and exit 128 + the signal's number. `ckpt_path=last` then resumes at the next batch: the
training loader says where it was (nameorigin.data.batching.ResumableLoader), the RNG state is put back before
that batch (nameorigin.fit.checkpointing.RNGState), and the optimizer, schedule and callbacks' states are in
the checkpoint, so the finished run equals an uninterrupted one.

The handlers replace Lightning's own SIGTERM handler while training runs (Lightning's stops at the next batch
without a checkpoint) and are put back when training ends. A signal during validation is answered at the next
training batch or at the end of training, whichever comes first. A second signal before the save is done
ends the process at once, as the first would have without this callback.
"""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preempted(SystemExit):
    """The run stopped on a signal after saving its state: exit code 128 + the signal's number."""

    def __init__(self, signum: int, checkpoint: Path, where: str):
        super().__init__(128 + signum)
        self.line = (f"stopped by {signal.Signals(signum).name} {where}: saved {checkpoint}; resume with "
                     "ckpt_path=last")


class Preemption(Callback):
    """Saves `dirpath`/last.ckpt and stops the run when SIGTERM or SIGINT arrives during training."""

    def __init__(self, dirpath: str):
        self.dirpath = Path(dirpath)
        self.received: int | None = None
        self.previous: dict[int, Any] = {}

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        for signum in SIGNALS:
            self.previous[signum] = signal.signal(signum, self.note)

    def note(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:  # asked twice: stop now, as the default handler would
            self.put_back()
            signal.raise_signal(signum)
        self.received = signum

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self.received is not None:
            self.stop(trainer, f"in epoch {trainer.current_epoch + 1} of {trainer.max_epochs}, after its batch "
                               f"{batch_idx + 1} of {trainer.num_training_batches}")

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.put_back()
        if self.received is not None:  # arrived during the last validation: training is over, its state saved
            self.stop(trainer, "at the end of training")

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.put_back()

    def stop(self, trainer: pl.Trainer, where: str) -> None:
        signum, self.received = self.received, None
        path = self.dirpath / "last.ckpt"
        trainer.save_checkpoint(path, weights_only=False)  # the whole training state
        raise Preempted(signum, path, where)

    def put_back(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous = {}
