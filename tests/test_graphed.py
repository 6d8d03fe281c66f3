"""The fast path (nameorigin.fit.graphed) on the CPU, where its step runs eagerly: one-length batches, the
static-shape step against the dynamic one, and its refusals."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch
from conftest import TINY, train_refused, write_corpus

from nameorigin.config import ModelConfig
from nameorigin.data.batching import OneLengthBatchSampler
from nameorigin.data.names import NamesDataModule
from nameorigin.fit.graphed import GraphedSteps, device_rows
from nameorigin.fit.module import NameClassifier
from nameorigin.model.cells import CELLS


def test_one_length_batches_cover_the_split_once_per_epoch_in_a_seeded_order():
    rng = random.Random(0)
    lengths = [rng.randint(2, 9) for _ in range(300)]
    sampler = OneLengthBatchSampler(lengths, 16, shuffle=True, seed=3)
    sampler.set_epoch(1)
    batches = list(sampler)
    assert all(len({lengths[i] for i in batch}) == 1 for batch in batches)
    assert sorted(i for batch in batches for i in batch) == list(range(300))
    assert max(map(len, batches)) == 16 and len(batches) == len(sampler)
    assert list(sampler) == batches  # the same epoch replays (resume)
    sampler.set_epoch(2)
    assert list(sampler) != batches
    halves = [OneLengthBatchSampler(lengths, 16, True, 3, num_replicas=2, rank=r) for r in (0, 1)]
    assert len(list(halves[0])) == len(list(halves[1]))  # DDP's ranks take as many steps


@pytest.fixture(scope="module")
def tiny_split(tmp_path_factory) -> NamesDataModule:
    corpus = write_corpus(tmp_path_factory.mktemp("graphed") / "names")
    datamodule = NamesDataModule(root=str(corpus), download=False)
    datamodule.setup("fit")
    return datamodule


def loss_and_grads(model: NameClassifier, batch, one_length: bool) -> tuple[torch.Tensor, dict]:
    model.zero_grad(set_to_none=True)
    loss = model.loss(model.net(batch.tokens, batch.lengths, one_length=one_length), batch)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("impl", ["autograd", "bptt"])
@pytest.mark.parametrize("cell", list(CELLS))
def test_the_static_step_gives_the_dynamic_steps_loss_and_gradients(tiny_split, cell, impl):
    """The fast path's batch is gathered on the device and runs unsorted, at a shape the host knows; the dynamic
    step collates on the host and sorts by length. Same names, same loss, same gradients, every weight."""
    train = tiny_split.datasets["train"]
    length, _ = Counter(train.lengths.tolist()).most_common(1)[0]
    rows = [i for i, n in enumerate(train.lengths.tolist()) if n == length][:12]
    torch.manual_seed(0)
    config = ModelConfig(cell=cell, impl=impl, hidden_size=16, embedding_dim=8, ngram_buckets=64, dropout=0.0,
                         label_smoothing=0.1)
    model = NameClassifier(config, tiny_split.vocab, tiny_split.labels).train()
    dynamic = train.collate(rows)
    static = GraphedSteps(model, device_rows(train, torch.device("cpu")), clip=1.0).gather(torch.tensor(rows),
                                                                                           length)
    for ours, theirs in zip(static, dynamic, strict=True):
        assert (ours is None and theirs is None) or torch.equal(ours, theirs)
    expected_loss, expected = loss_and_grads(model, dynamic, one_length=False)
    loss, grads = loss_and_grads(model, static, one_length=True)
    torch.testing.assert_close(loss, expected_loss, rtol=0, atol=1e-6)
    assert grads.keys() == expected.keys() and "net.cell.weight_hh" in grads
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected[name], rtol=1e-5, atol=1e-6, msg=name)


def test_a_batch_of_mixed_lengths_cannot_pass_for_one_length(tiny_split):
    """The check above can fail: told that padded names are full length, the hand-written backward sends each
    name's gradient in at the batch's last step instead of its own."""
    train = tiny_split.datasets["train"]
    batch = train.collate(list(range(12)))
    assert len(set(batch.lengths.tolist())) > 1
    model = NameClassifier(ModelConfig(impl="bptt", hidden_size=16, embedding_dim=8, ngram_buckets=0, dropout=0.0),
                           tiny_split.vocab, tiny_split.labels).train()
    _, right = loss_and_grads(model, batch, one_length=False)
    _, wrong = loss_and_grads(model, batch, one_length=True)
    assert float((right["net.cell.weight_hh"] - wrong["net.cell.weight_hh"]).abs().max()) > 1e-4


@pytest.mark.parametrize("overrides, message", [
    (["trainer.accumulate_grad_batches=2"], "model.fast_path=on steps the optimizer every batch: drop "
                                            "trainer.accumulate_grad_batches=2 or set model.fast_path=off"),
    (["+trainer.gradient_clip_algorithm=value"], "model.fast_path=on clips by norm"),
    (["trainer=ddp_cpu"], "model.fast_path=on runs on one device, not 2"),
])
def test_settings_the_fast_path_cannot_keep_are_refused_with_the_fix(tmp_path, overrides, message):
    corpus = write_corpus(tmp_path / "names")
    result = train_refused(tmp_path, f"data.root={corpus}", *TINY, "model.fast_path=on", *overrides)
    assert result.returncode == 2 and message in result.stderr, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_a_divergence_on_the_fast_path_stops_at_the_deferred_check_with_the_last_good_checkpoint(tmp_path):
    """The finiteness flag is read every 50 steps and at each epoch's end: a schedule that multiplies the rate by
    1e30 after the first epoch still stops the run, with the message and checkpoint of the dynamic step."""
    corpus = write_corpus(tmp_path / "names")
    result = train_refused(tmp_path, f"data.root={corpus}", *TINY, "model.fast_path=on", "trainer.max_epochs=3",
                           "trainer.gradient_clip_val=null", "model.optimizer._target_=torch.optim.SGD",
                           "model.optimizer.lr=0.01",
                           "model.scheduler._target_=torch.optim.lr_scheduler.StepLR", "~model.scheduler.T_max",
                           "+model.scheduler.step_size=1", "+model.scheduler.gamma=1e30")
    assert result.returncode == 1, (result.stdout[-2000:], result.stderr[-2000:])
    assert "non-finite training loss within the 50 steps up to step" in result.stderr, result.stderr[-2000:]
    (run,) = [p for p in (tmp_path / "outputs").glob("*/*") if p.is_dir()]
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["epoch"] == 0
    assert all(torch.isfinite(v).all() for v in last["state_dict"].values() if v.is_floating_point())
