"""Length-bucketed batches, shared by every corpus: names as one padded token tensor, a sampler that batches
names of similar length (resumable and sharded across ranks), and the DataModule base that serves them."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Sampler

from nameorigin.base.atomic import write_atomically
from nameorigin.base.errors import UserError

# What a data module's state says once the refit added validation to training (nameorigin.training.refit).
TRAINED_ON = "train+val"


def is_refit(data_settings: dict | None) -> bool:
    """Whether a checkpoint's data settings (its NamesDataModule entry) say it was trained on train + val."""
    return (data_settings or {}).get("trained_on") == TRAINED_ON


class Batch(NamedTuple):
    """What every corpus' loader yields. `shares[i, k]`: label k's share of name i (a hard-labelled name's
    labels marked True; a share table's or the surnames' shares as floats). `weights`: a per-name weight for the
    training loss (data.weight_column), or None."""

    tokens: torch.Tensor
    lengths: torch.Tensor
    targets: torch.Tensor
    shares: torch.Tensor
    weights: torch.Tensor | None = None


class EncodedRows(torch.utils.data.Dataset):
    """Names as one padded token tensor (subclasses set names, tokens, lengths): the sampler yields row indices."""

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, index: int) -> int:
        return index

    def rows(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(row indices, int64 tokens trimmed to the batch's longest name, lengths)."""
        idx = torch.tensor(indices, dtype=torch.long)
        lengths = self.lengths[idx]
        return idx, self.tokens[idx, : int(lengths.max())].long(), lengths


class EpochOrder(Sampler[int]):
    """A permutation of range(size) drawn from (seed, epoch): the order a training epoch reads its rows in.

    It is the batch sampler's `sampler`, where Lightning looks for `set_epoch` at every epoch's start (on the
    loader's sampler and on its batch sampler's sampler, never on the batch sampler itself). The generator is
    numpy's SeedSequence with the epoch as its spawn key: distinct (seed, epoch) pairs draw distinct streams (a
    generator seeded with seed + epoch would give seed s at epoch 1 the order of seed s + 1 at epoch 0)."""

    def __init__(self, size: int, seed: int = 0):
        self.size, self.seed, self.epoch = size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def generator(self) -> np.random.Generator:
        """This epoch's random stream: the rows' order, then the batches' order."""
        return np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(self.epoch,)))

    def __iter__(self) -> Iterator[int]:
        return iter(self.generator().permutation(self.size).tolist())

    def __len__(self) -> int:
        return self.size


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of similar length: shuffle, sort within pools of `pool` batches, shuffle the batches.

    Training's order is a function of (seed, epoch) only: the epoch lives in `self.sampler` (EpochOrder), which
    Lightning advances, so every epoch draws its own order and a resumed run replays the interrupted one. In a
    distributed run, training gives each rank every `num_replicas`-th batch, dropping the remainder so every rank
    takes as many steps (DDP's gradient sync needs that). Evaluation instead gives each rank every
    `num_replicas`-th name, batched on its own: every held-out name is scored exactly once, and ranks may hold
    different counts (the module gathers variable-size results).
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, shuffle: bool, seed: int = 0, pool: int = 50,
                 num_replicas: int = 1, rank: int = 0):
        self.lengths = list(map(int, lengths))
        self.batch_size, self.shuffle, self.pool = batch_size, shuffle, pool
        self.num_replicas, self.rank = num_replicas, rank
        self.sampler = EpochOrder(len(self.lengths), seed)
        self.skip = 0  # batches of the next epoch already trained on (a run resumed mid-epoch)

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def resume_at(self, epoch: int, batches: int) -> None:
        """The next pass is epoch `epoch`'s order from its batch `batches` on (ResumableLoader)."""
        self.sampler.set_epoch(epoch)
        self.skip = batches

    def _bucket(self, order: list[int]) -> list[list[int]]:
        step = self.batch_size * self.pool
        batches = []
        for start in range(0, len(order), step):
            chunk = sorted(order[start : start + step], key=self.lengths.__getitem__)
            batches += [chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        return batches

    def _batches(self) -> list[list[int]]:
        if not self.shuffle:
            return self._bucket(list(range(self.rank, len(self.lengths), self.num_replicas)))
        rng = self.sampler.generator()
        batches = self._bucket(rng.permutation(len(self.lengths)).tolist())
        batches = [batches[i] for i in rng.permutation(len(batches))]
        if self.num_replicas > 1:
            batches = batches[: len(batches) - len(batches) % self.num_replicas]
        return batches[self.rank :: self.num_replicas]

    def __iter__(self) -> Iterator[list[int]]:
        skip, self.skip = self.skip, 0
        yield from self._batches()[skip:]

    def __len__(self) -> int:
        return len(self._batches())


class OneLengthBatchSampler(BucketBatchSampler):
    """Batches whose names all have one length, for the fast path (nameorigin.fit.graphed): the shape of
    each is then known on the host. Shuffled, resumed and sharded as BucketBatchSampler's; the last batch of each
    length may be short."""

    def _bucket(self, order: list[int]) -> list[list[int]]:
        by_length: dict[int, list[int]] = {}
        for index in order:
            by_length.setdefault(self.lengths[index], []).append(index)
        return [rows[i : i + self.batch_size] for _, rows in sorted(by_length.items())
                for i in range(0, len(rows), self.batch_size)]


class ResumableLoader(DataLoader):
    """The training loader, which says where it is in its epoch: Lightning keeps a loader's state_dict in every
    checkpoint and hands it back before a resumed epoch's first batch, so a run stopped mid-epoch
    (nameorigin.fit.preemption) goes on at its next batch, in the same order. Where it is comes from the
    trainer's count of batches trained on, not of batches drawn: Lightning draws one ahead."""

    def __init__(self, *args: Any, datamodule: pl.LightningDataModule | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.datamodule = datamodule

    def state_dict(self) -> dict[str, int]:
        trainer = getattr(self.datamodule, "trainer", None)
        done = trainer.fit_loop.epoch_loop.batch_progress.current.processed if trainer is not None else 0
        return {"epoch": self.batch_sampler.epoch, "batches": done}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if 0 < state["batches"] < len(self.batch_sampler):  # at an epoch's end the next one starts afresh
            self.batch_sampler.resume_at(state["epoch"], state["batches"])


class OneLengthRows(NamedTuple):
    """What the fast path's loader yields: row indices into the split kept on the device, and their one length."""

    rows: torch.Tensor
    length: int


def one_length_loader(dataset: Any, batch_size: int, seed: int, datamodule: pl.LightningDataModule) -> DataLoader:
    """Training batches as OneLengthRows, in pinned memory, so Lightning's copy to the device does not wait."""
    trainer = getattr(datamodule, "trainer", None)
    replicas, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
    lengths = dataset.lengths.tolist()
    sampler = OneLengthBatchSampler(lengths, batch_size, True, seed, num_replicas=replicas, rank=rank)
    return ResumableLoader(range(len(lengths)), batch_sampler=sampler, pin_memory=torch.cuda.is_available(),
                           collate_fn=lambda rows: OneLengthRows(torch.tensor(rows), lengths[rows[0]]),
                           generator=torch.Generator().manual_seed(seed), datamodule=datamodule)


def bucket_loader(dataset: Any, batch_size: int, shuffle: bool, seed: int, datamodule: pl.LightningDataModule,
                  num_workers: int = 0, shard: bool = True) -> DataLoader:
    """Length-bucketed batches of a dataset with `lengths` and `collate`, sharded across the trainer's ranks unless
    shard=False (one process reading a whole split, as calibration does on rank 0)."""
    trainer = getattr(datamodule, "trainer", None)
    replicas, rank = (trainer.world_size, trainer.global_rank) if trainer is not None and shard else (1, 0)
    sampler = BucketBatchSampler(dataset.lengths.tolist(), batch_size, shuffle, seed, num_replicas=replicas,
                                 rank=rank)
    # Its own generator: creating an iterator then draws nothing from the global RNG, which dropout uses and a
    # resumed run restores.
    settings = {"batch_sampler": sampler, "collate_fn": dataset.collate, "num_workers": num_workers,
                "persistent_workers": num_workers > 0, "generator": torch.Generator().manual_seed(seed)}
    if shuffle:  # training: resumable mid-epoch
        return ResumableLoader(dataset, datamodule=datamodule, **settings)
    return DataLoader(dataset, **settings)


class BucketedDataModule(pl.LightningDataModule):
    """What every corpus' DataModule shares: bucketed loaders over `self.datasets`, the split manifest, and the
    resume check. Subclasses set datasets, batch_size, split_seed, order_seed, num_workers, splits and
    corpus_sha256, and define manifest(), state_dict() (the settings that decide the split) and corpus_setting()."""

    datasets: dict[str, Any]
    batch_size: int
    split_seed: int
    order_seed: int
    num_workers: int
    splits: dict
    corpus_sha256: str
    one_length_batches: bool = False

    def use_batch_size(self, batch_size: int) -> None:
        """Serve batches of this size from now on (the rule or the search picked it once the split was known)."""
        self.batch_size = int(batch_size)

    def use_one_length_batches(self) -> None:
        """Serve training batches of one length each (the fast path's, nameorigin.fit.graphed)."""
        self.one_length_batches = True

    def manifest(self) -> dict:
        raise NotImplementedError

    def state_dict(self) -> dict:
        raise NotImplementedError

    def corpus_setting(self) -> str:
        """The setting that names the corpus (data.root or data.cache), for the resume error."""
        raise NotImplementedError

    def split_differences(self, state: dict) -> list[str]:
        """The split settings (keys of state_dict() but the corpus hash) on which a saved state differs from this
        data module's; settings the state does not hold are not compared."""
        mine = self.state_dict()
        return [key for key in mine if key != "corpus_sha256" and key in state and state[key] != mine[key]]

    def load_state_dict(self, state: dict) -> None:
        """Refuse to resume on another corpus or split: a resumed run trained on another split would have seen
        some of the held-out names, and its test score would no longer be held out."""
        if not self.splits:
            return
        mine = self.state_dict()
        if state.get("corpus_sha256") != mine["corpus_sha256"]:
            raise UserError(f"{self.corpus_setting()} differs from the corpus this checkpoint was trained on "
                            "(sha256 mismatch): point it at the original files")
        wrong = [f"data.{key}={mine[key]} (checkpoint: {state[key]})" for key in self.split_differences(state)]
        if wrong:
            raise UserError(f"cannot resume on another split: {', '.join(wrong)}; resume with the checkpoint's "
                            "data settings")

    def write_manifest(self, path: str | Path) -> Path:
        return write_atomically(path, lambda tmp: tmp.write_text(json.dumps(self.manifest(), indent=1)))

    def _loader(self, split: str, shuffle: bool, shard: bool = True) -> DataLoader:
        return bucket_loader(self.datasets[split], self.batch_size, shuffle, self.order_seed, self, self.num_workers,
                             shard)

    def whole_split_loader(self, split: str) -> DataLoader:
        """Every name of one split in this process, whatever the trainer's world size (calibration on rank 0)."""
        return self._loader(split, shuffle=False, shard=False)

    def check_held_out_sizes(self, world_size: int) -> None:
        """Each rank scores its own share of validation and test: a rank with no names would wait forever in the
        gathers of the others."""
        small = {split: len(self.datasets[split]) for split in ("val", "test")
                 if len(self.datasets[split]) < world_size}
        if small:
            sizes = ", ".join(f"{split} holds {n}" for split, n in small.items())
            raise UserError(f"{sizes} names, fewer than the {world_size} processes of trainer.devices: use fewer "
                            "devices or a larger corpus")

    def train_dataloader(self) -> DataLoader:
        if self.one_length_batches:  # the fast path (use_one_length_batches)
            return one_length_loader(self.datasets["train"], self.batch_size, self.order_seed, self)
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
