"""The steps after `fit` (linear part, calibration, refit, test, margin, card) work on best.ckpt's weights in memory,
and each served checkpoint is written once, at the end, with everything they decided."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import TINY, run_dirs, train, write_corpus

from nameorigin.fit.checkpointing import AtomicCheckpointIO


@pytest.mark.slow
def test_each_served_checkpoint_is_written_once_after_fit_from_the_best_weights(tmp_path, monkeypatch):
    writes = []
    save = AtomicCheckpointIO.save_checkpoint

    def recorded(self, checkpoint, path, storage_options=None):
        writes.append((Path(path).name, checkpoint.get("epoch"), checkpoint["state_dict"]["net.cell.weight_hh"].clone(),
                       sorted(checkpoint)))
        save(self, checkpoint, path, storage_options)

    monkeypatch.setattr(AtomicCheckpointIO, "save_checkpoint", recorded)
    corpus = write_corpus(tmp_path / "names")
    # Eight epochs on names the model learns in a few: validation stops improving early, so the best epoch is not
    # the last, and reloading (or keeping) the last epoch's weights would show.
    result = train(tmp_path, f"data.root={corpus}", *TINY[:3], "trainer.max_epochs=8", *TINY[4:])
    assert result.returncode == 0, result.stderr[-2000:]
    (run,) = run_dirs(tmp_path)
    last_fit_write = max(i for i, (name, *_) in enumerate(writes) if name == "last.ckpt")
    during_fit, after_fit = writes[: last_fit_write + 1], writes[last_fit_write + 1:]
    assert sorted(name for name, *_ in after_fit) == ["best.ckpt", "refit.ckpt"], [w[0] for w in writes]
    best_during_fit = [w for w in during_fit if w[0] == "best.ckpt"][-1]
    last_epoch = [w for w in during_fit if w[0] == "last.ckpt"][-1]
    assert best_during_fit[1] < last_epoch[1], "the best epoch is the last here: the test shows nothing"
    (best_after_fit,) = [w for w in after_fit if w[0] == "best.ckpt"]
    # The cell is not touched by the steps after fit: it is the best epoch's, not the last's.
    assert best_after_fit[1] == best_during_fit[1]
    assert torch.equal(best_after_fit[2], best_during_fit[2]) and not torch.equal(best_after_fit[2], last_epoch[2])
    assert {"calibration", "linear_part"} <= set(best_after_fit[3])
    (refit,) = [w for w in after_fit if w[0] == "refit.ckpt"]
    assert {"calibration", "linear_part", "margin", "model_card"} <= set(refit[3])
    # What was written is what was tested: the calibration's temperature is the decision layer's in the file.
    for name in ("best.ckpt", "refit.ckpt"):
        checkpoint = torch.load(run / "checkpoints" / name, weights_only=True)
        assert float(checkpoint["state_dict"]["net.temperature"]) == pytest.approx(
            checkpoint["calibration"]["temperature"])
