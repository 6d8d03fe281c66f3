"""Where a training step's time goes (nameorigin.fit.step_profile, `debug=step_profile`): a real run clocks
its steps by phase, profiles the next ones, and sorts the operators' time into kinds that add up."""

from __future__ import annotations

import json

import pytest
from conftest import TINY, run_dirs, train

from nameorigin.fit.step_profile import PHASES, kind_of


def test_operators_are_sorted_by_what_they_are():
    assert kind_of("aten::addmm") == kind_of("aten::mm") == "products"
    assert kind_of("aten::embedding_dense_backward") == "ngram_table"
    assert kind_of("aten::_fused_adamw_") == "optimizer_kernels"
    assert kind_of("aten::sigmoid") == "elementwise"
    # A named range is not an operator: its own time is the interpreter's between operators.
    assert kind_of("Optimizer.step#AdamW.step") == kind_of("CellLoopBackward") == "python"


@pytest.mark.slow
@pytest.mark.parametrize("impl", ["autograd", "bptt"])
def test_a_run_under_debug_step_profile_says_where_its_steps_went(tiny_corpus, tmp_path, impl):
    result = train(tmp_path, f"data.root={tiny_corpus}", *TINY, "debug=step_profile", f"model.impl={impl}")
    assert result.returncode == 0, result.stderr[-2000:]
    (run,) = run_dirs(tmp_path)
    report = json.loads((run / "step_profile.json").read_text())
    assert report["steps"] >= 1 and report["names"] >= report["steps"] and report["names_per_s"] > 0
    assert set(report["phases"]) == set(PHASES) and sum(report["phases"].values()) == pytest.approx(1, abs=0.01)
    assert sum(report["operators"].values()) == pytest.approx(1, abs=0.01)
    assert report["operators"]["products"] > 0 and report["operators"]["elementwise"] > 0
    assert report["operator_calls_per_step"] > 10  # a loop over characters: many small operators a step
    line = next(line for line in (run / "train.log").read_text().splitlines() if "step profile: " in line)
    assert f"{report['steps']} steps at {report['names_per_s']:.0f} names/s" in line


def test_the_epoch_timer_leaves_validation_out(tmp_path, monkeypatch):
    """Lightning validates inside the training epoch: a validation's seconds must not count. The timer reads a
    clock the test moves (a second per training step, 100 per validation), so the figures are exact on any load."""
    import types

    import pytorch_lightning as pl
    import torch

    from nameorigin.data.batching import Batch
    from nameorigin.fit import timing
    from nameorigin.fit.timing import EpochTimer

    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: clock.now))

    class SlowValidation(pl.Callback):
        def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            clock.now += 100.0

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)

        def training_step(self, batch: Batch, index: int) -> torch.Tensor:
            clock.now += 1.0
            return self.layer(batch.tokens.float()).sum()

        def validation_step(self, batch: Batch, index: int) -> None:
            self.layer(batch.tokens.float())

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    batches = [Batch(torch.ones(4, 3), torch.full((4,), 3), torch.zeros(4), torch.zeros(4, 2))] * 5
    timer = EpochTimer()
    trainer = pl.Trainer(max_epochs=1, num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                         callbacks=[timer, SlowValidation()])
    train, val = (torch.utils.data.DataLoader(items, batch_size=None) for items in (batches, batches[:1]))
    trainer.fit(Tiny(), train_dataloaders=train, val_dataloaders=val)
    assert timer.validation_s == 100.0
    assert float(trainer.callback_metrics["time/train_epoch_s"]) == pytest.approx(5.0)
    assert float(trainer.callback_metrics["time/train_names_per_s"]) == pytest.approx(20 / 5.0)
