"""Each training epoch reads the training split in its own order, drawn from (data.order_seed, epoch): in real
runs, on one process and under DDP, and in the sampler itself."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from conftest import TINY, train, write_corpus
from order_recorder import dataset_rows, read_epochs, row_keys

from nameorigin.data.batching import BucketBatchSampler, EpochOrder, OneLengthBatchSampler
from nameorigin.data.names import NamesDataModule

# A run that reads its training split three times and stops there: no refit, calibration, test or margin.
ORDER_RUN = [*TINY, "trainer.max_epochs=3", "refit.enabled=false", "test=false", "calibration.enabled=false",
             "callbacks.grad_accumulation.every_n_steps=1000", "+callbacks.order._target_=order_recorder.OrderRecorder"]


def recorded_run(cwd: Path, corpus: Path, *overrides: str) -> list[list[list[str]]]:
    cwd.mkdir(parents=True, exist_ok=True)
    result = train(cwd, f"data.root={corpus}", *ORDER_RUN, f"+callbacks.order.folder={cwd / 'order'}", *overrides)
    assert result.returncode == 0, result.stderr[-2000:]
    return read_epochs(cwd / "order")


def drawn_epochs(corpus: Path, split_seed: int, order_seed: int, epochs: int) -> list[list[list[str]]]:
    """The batches a training loader over `corpus` split by `split_seed` draws in each epoch with `order_seed`, keyed
    as the recorder keys them."""
    datamodule = NamesDataModule(root=str(corpus), batch_size=16, split_seed=split_seed, order_seed=order_seed)
    datamodule.setup("fit")
    loader, dataset = datamodule.train_dataloader(), datamodule.datasets["train"]
    drawn = []
    for epoch in range(epochs):
        loader.batch_sampler.sampler.set_epoch(epoch)
        drawn.append([row_keys(dataset.tokens[rows], dataset.lengths[rows], dataset.targets[rows])
                      for rows in (torch.tensor(batch) for batch in loader.batch_sampler)])
    return drawn


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple:
    """The same settings trained twice, and the training split they read."""
    root = tmp_path_factory.mktemp("order")
    corpus = write_corpus(root / "names")
    first, second = recorded_run(root / "first", corpus), recorded_run(root / "second", corpus)
    datamodule = NamesDataModule(root=str(corpus), batch_size=16)
    datamodule.setup("fit")
    return first, second, dataset_rows(datamodule.datasets["train"]), corpus, root


def test_each_epoch_of_a_real_run_draws_its_own_order_and_every_training_row_once(two_runs):
    epochs, _, training_rows, _, _ = two_runs
    assert len(epochs) == 3
    for batches in epochs:
        assert Counter(row for batch in batches for row in batch) == training_rows
    orders = [[row for batch in batches for row in batch] for batches in epochs]
    assert orders[0] != orders[1] and orders[1] != orders[2] and orders[0] != orders[2]


def test_a_rerun_with_the_same_seeds_repeats_every_epochs_order(two_runs):
    first, second, _, _, _ = two_runs
    assert first == second


def test_the_training_seed_drives_the_order_and_the_split_seed_does_not(two_runs):
    first, _, training_rows, corpus, root = two_runs
    reseeded = recorded_run(root / "seed1", corpus, "seed=1")
    assert Counter(row for batch in reseeded[0] for row in batch) == training_rows
    assert all(reseeded[epoch] != first[epoch] for epoch in range(3))
    # Another split: other rows, drawn by the same (training seed, epoch) streams. What the loaders of split 1 draw
    # with order seed 0 (the run's seed) is what the run read; with order seed 1 (the split's seed) it is not.
    resplit = recorded_run(root / "split1", corpus, "data.split_seed=1")
    drawn = {seed: drawn_epochs(corpus, split_seed=1, order_seed=seed, epochs=3) for seed in (0, 1)}
    assert resplit == drawn[0] and resplit != drawn[1]


def test_runs_without_a_test_are_compared_on_validation(two_runs):
    """compare-runs reads hp/ values, which a run writes with its test: a test=false sweep still shows val."""
    from conftest import NAMEORIGIN, run_in_process

    *_, root = two_runs
    listed = run_in_process([NAMEORIGIN, "compare-runs", str(root / "first")], cwd=root)
    assert listed.returncode == 0, listed.stderr
    row = listed.stdout.splitlines()[1].split()
    assert float(row[0]) > 0.25 and row[1:3] == ["-", "-"]  # validation read; no test figures


def test_seed_and_epoch_do_not_collide():
    """Random(seed + epoch) gave seed s at epoch 1 the order of seed s + 1 at epoch 0."""
    def order(seed: int, epoch: int) -> list[int]:
        sampler = EpochOrder(500, seed)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert order(0, 1) != order(1, 0) and order(3, 2) != order(4, 1) != order(5, 0)
    assert order(0, 1) == order(0, 1) and sorted(order(7, 3)) == list(range(500))


@pytest.mark.parametrize("kind", [BucketBatchSampler, OneLengthBatchSampler])
def test_lightning_finds_the_epoch_where_it_looks(kind):
    """Lightning calls set_epoch on the loader's sampler and on its batch sampler's `sampler`, never on the batch
    sampler itself: the epoch must live there."""
    from lightning_fabric.utilities.data import _set_sampler_epoch
    from torch.utils.data import DataLoader

    lengths = [3 + i % 7 for i in range(200)]
    sampler = kind(lengths, 16, shuffle=True, seed=0)
    loader = DataLoader(range(200), batch_sampler=sampler)
    def drawn() -> list[list[int]]:
        return [batch.tolist() for batch in loader]

    first = drawn()
    _set_sampler_epoch(loader, 1)
    assert sampler.epoch == 1 and drawn() != first
    _set_sampler_epoch(loader, 0)
    assert drawn() == first


def test_a_resumed_sampler_replays_its_epoch_from_the_next_batch():
    lengths = [3 + i % 7 for i in range(300)]
    sampler = BucketBatchSampler(lengths, 16, shuffle=True, seed=2)
    sampler.set_epoch(2)
    whole = list(sampler)
    resumed = BucketBatchSampler(lengths, 16, shuffle=True, seed=2)
    resumed.resume_at(2, 5)
    assert list(resumed) == whole[5:]
    assert list(resumed) == whole  # the next pass is the whole epoch again
