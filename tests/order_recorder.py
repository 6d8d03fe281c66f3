"""A callback for tests that writes down what each training step read: one JSON line per epoch and rank, with
each batch's rows as (token ids, target). Added to a real run with
`+callbacks.order._target_=order_recorder.OrderRecorder +callbacks.order.folder=<folder>`."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytorch_lightning as pl


def row_keys(tokens, lengths, targets) -> list[str]:
    """One key per row: its token ids (without padding) and its target."""
    return [f"{tokens[i, : int(lengths[i])].tolist()}:{int(targets[i])}" for i in range(len(lengths))]


class OrderRecorder(pl.Callback):
    def __init__(self, folder: str):
        self.folder, self.batches = Path(folder), []

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx: int):
        self.batches.append(row_keys(batch.tokens, batch.lengths, batch.targets))

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with (self.folder / f"rank{trainer.global_rank}.jsonl").open("a") as out:
            out.write(json.dumps({"epoch": trainer.current_epoch, "batches": self.batches}) + "\n")
        self.batches = []


def read_epochs(folder: Path, rank: int = 0) -> list[list[list[str]]]:
    """Each epoch's batches, in the order they were trained on."""
    lines = (folder / f"rank{rank}.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["epoch"] for r in records] == list(range(len(records)))
    return [r["batches"] for r in records]


def dataset_rows(dataset) -> Counter:
    """The rows of a split as the recorder keys them."""
    return Counter(row_keys(dataset.tokens, dataset.lengths, dataset.targets))
