"""callbacks=ema: Lightning's EMAWeightAveraging in a real run. Validation picks best.ckpt on the averaged
weights, and the checkpoint serves them (the raw ones kept under current_model_state, for resuming)."""

from __future__ import annotations

import pytest
import torch
from conftest import TINY, run_dirs, train
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nameorigin.data.names import NamesDataModule
from nameorigin.serving.predict import Predictor


@pytest.mark.slow
def test_ema_validates_checkpoints_and_serves_the_averaged_weights(tiny_corpus, tmp_path):
    result = train(tmp_path, f"data.root={tiny_corpus}", *TINY, "trainer.max_epochs=3", "callbacks=ema",
                   "callbacks.weight_averaging.decay=0.9", "model.linear_part=false", "refit.enabled=false",
                   "margin.enabled=false")
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = run_dirs(tmp_path)
    best = run / "checkpoints" / "best.ckpt"
    checkpoint = torch.load(best, weights_only=True)
    averaged, raw = checkpoint["state_dict"], checkpoint["current_model_state"]
    cell = [key for key in averaged if key.startswith("net.cell") and averaged[key].is_floating_point()]
    assert cell and any(not torch.equal(averaged[key], raw[key]) for key in cell)
    # The validation accuracy that picked best.ckpt is the averaged weights' own.
    data = NamesDataModule(root=str(tiny_corpus), download=False)
    data.setup("fit")
    names, labels = zip(*data.splits["val"], strict=True)
    predictor = Predictor.from_checkpoint(best)
    tokens, lengths, _ = predictor.encode_many(list(names))
    answered = [predictor.labels[i] for i in predictor.probabilities((tokens, lengths)).argmax(1).tolist()]
    accuracy = sum(a == b for a, b in zip(answered, labels, strict=True)) / len(labels)
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0}).Reload()
    assert accuracy == pytest.approx(max(event.value for event in events.Scalars("val/acc")), abs=1e-6)
