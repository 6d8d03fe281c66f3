"""The default configuration on the real corpus (NAMES_DATA_DIR): a regression floor under the measured scores."""

from __future__ import annotations

import json

import pytest
from conftest import run_dirs, train
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


@pytest.mark.slow
def test_default_training_on_the_real_corpus(real_corpus, tmp_path):
    result = train(tmp_path, f"data.root={real_corpus}", "callbacks.progress_bar=null", timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = run_dirs(tmp_path)
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0}).Reload()
    test_acc, test_f1 = (events.Scalars(tag)[-1].value for tag in ("hp/test_acc", "hp/test_macro_f1"))
    # Measured 0.833 / 0.485 for this seed (README); always predicting Russian scores about 0.52 / 0.04.
    # The floors leave room for float differences between machines and catch a broken model, split or metric.
    assert test_acc >= 0.80 and test_f1 >= 0.43, (test_acc, test_f1)
    for weight in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        assert max(e.value for e in events.Scalars(f"grad_accum/{weight}/residual")) < 1e-5
    manifest = json.loads((run / "split.json").read_text())
    names = {split: {name for name, _ in pairs} for split, pairs in manifest["splits"].items()}
    assert not (names["train"] & names["test"] or names["val"] & names["test"] or names["train"] & names["val"])
