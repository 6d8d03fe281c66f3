"""`--composition`: each label's share of a group's rows, by three methods, the adjusted one with intervals
(nameorigin.analysis.composition), from names, a table file or a DataFrame."""

from __future__ import annotations

import csv
import json

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import TINY, run_dirs, train, write_confusable_corpus

from benchmarks.composition_check import Draws, composition_check
from benchmarks.prior_check import named_mix
from nameorigin.analysis.composition import (
    Reference,
    Resampling,
    estimate,
    frame_composition,
    reference_from,
    solve_mix,
    stored_reference,
    table_composition,
)
from nameorigin.analysis.evaluate import checkpoint_splits
from nameorigin.cli.app import main as nameorigin
from nameorigin.serving.predict import Predictor


def test_a_model_that_is_always_right_finds_the_mix_by_every_method():
    labels = ["A", "B", "C"]
    probs = torch.eye(3).repeat_interleave(torch.tensor([5, 3, 2]), dim=0)  # ten names, one-hot and right
    counts = torch.tensor([100] * 10)
    reference = Reference(torch.eye(3).repeat(4, 1), torch.arange(3).repeat(4))
    found = estimate(probs, counts, torch.full((3,), 1 / 3), labels, reference, Resampling(bootstraps=50))
    for method in ("mean", "em", "adjusted"):
        assert found.estimates[method] == pytest.approx([0.5, 0.3, 0.2], abs=1e-4), method
    assert list(found.intervals) == ["adjusted"]  # the one method whose intervals hold their level
    assert all(low <= share <= high for share, (low, high) in
               zip(found.estimates["adjusted"], found.intervals["adjusted"], strict=True))
    without = estimate(probs, counts, torch.full((3,), 1 / 3), labels, None, Resampling(bootstraps=50))
    assert set(without.estimates) == {"mean", "em"} and not without.intervals
    assert found.rows == 1000


def test_a_singular_confusion_takes_the_least_squares_mix():
    """A resample whose only names of two labels are one name listed under both has two equal rows."""
    confusion = torch.eye(3).repeat(2, 1, 1)
    confusion[1, 0] = confusion[1, 1] = torch.tensor([0.5, 0.5, 0.0])
    mean = torch.tensor([[0.2, 0.3, 0.5], [0.2, 0.3, 0.5]])
    mix = solve_mix(confusion, mean)
    assert torch.allclose(mix[0], mean[0]) and torch.isfinite(mix).all()
    assert torch.allclose(mix[1], torch.tensor([0.25, 0.25, 0.5]), atol=1e-5)


@pytest.fixture(scope="module")
def checkpoint(trained):
    return trained[0] / "checkpoints" / "best.ckpt"


@pytest.mark.slow
def test_the_command_reads_a_table_and_a_frame_gives_the_same(checkpoint, trained, tmp_path, capsys):
    names = sorted({line for path in trained[1].glob("*.txt") for line in path.read_text().splitlines()})
    rows = [names[i % 40] for i in range(500)] + ["", "NaN", "x" * 80]
    table = tmp_path / "people.csv"
    with table.open("w", newline="") as f:
        csv.writer(f).writerows([["surname"], *([name] for name in rows)])
    assert nameorigin(["composition", str(checkpoint), "--file", str(table), "--column", "surname",
                       "--reference", str(trained[1]), "--format", "json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert set(found["estimates"]) == {"mean", "em", "adjusted"}
    assert found["rows"] + found["abstained"] + found["unusable"] == 503 and found["unusable"] >= 3
    assert all(sum(shares) == pytest.approx(1, abs=1e-4) for shares in found["estimates"].values())
    assert set(found["intervals"]) == {"adjusted"}
    assert all(low <= share + 1e-9 and share <= high + 1e-9 for share, (low, high) in
               zip(found["estimates"]["adjusted"], found["intervals"]["adjusted"], strict=True))
    frame = frame_composition(pd.DataFrame({"surname": rows[:-3] + [None, "NaN", "x" * 80]}), "surname",
                              Predictor.load(checkpoint))
    assert frame.estimates["em"] == pytest.approx(found["estimates"]["em"], abs=1e-6)
    assert "adjusted" in frame.estimates and "best.ckpt" in frame.reference  # the checkpoint's own reference
    assert frame.rows == found["rows"] and frame.unusable == found["unusable"]
    assert nameorigin(["composition", str(checkpoint), "--file", str(table), "--column", "surname",
                       "--reference", str(trained[1])]) == 0
    text = capsys.readouterr().out
    assert "rows counted; left out:" in text and "adjusted (90% interval)" in text
    direct = table_composition(Predictor.load(checkpoint), str(table), "surname")
    assert "adjusted" not in direct.estimates  # no reference given: the tiny corpus is not the shipped one
    assert np.allclose(direct.estimates["mean"], found["estimates"]["mean"], atol=1e-6)


def test_composition_refuses_per_name_options_in_one_line(checkpoint, capsys):
    with pytest.raises(SystemExit) as exit_info:
        nameorigin(["composition", str(checkpoint), "Nakamura", "--coverage", "0.9"])
    assert exit_info.value.code == 2
    assert "No such option: --coverage" in capsys.readouterr().err  # a per-name option: not a composition flag


def test_every_checkpoint_of_a_run_carries_best_ckpts_held_out_reference(trained):
    """The adjusted method's confusion comes from names the answering model did not train on: best.ckpt's answers
    on validation, stored at calibration and carried to the refit (whose own answers there are in-sample)."""
    run, corpus, _ = trained
    best, refit = (Predictor.load(run / "checkpoints" / name) for name in ("best.ckpt", "refit.ckpt"))
    assert refit.calibration.reference == best.calibration.reference
    stored = stored_reference(refit)
    assert "best.ckpt" in stored.measured_on and "validation" in stored.measured_on
    again = reference_from(best, checkpoint_splits(best, corpus)["val"])  # best.ckpt answering validation now
    assert len(again.targets) == len(stored.targets)
    assert torch.allclose(stored.confusion(), again.confusion(), atol=1e-5)
    card = refit.model_card  # the run's model carries the card
    assert "## What fitted each part" in card and "best.ckpt answers it" in card


@pytest.mark.slow
def test_the_refit_and_best_ckpt_cover_alike_and_a_refit_refuses_its_own_validation(tmp_path, capsys):
    corpus = write_confusable_corpus(tmp_path / "names")
    # the learning rate of the tiny models the suite trains (the small tier's 6e-3 is for hidden size 256)
    result = train(tmp_path, f"data.root={corpus}", *TINY[:3], "trainer.max_epochs=6", *TINY[4:],
                   "model.optimizer.lr=3e-3")
    assert result.returncode == 0, result.stderr[-2000:]
    (run,) = run_dirs(tmp_path)
    coverage = {}
    for name in ("best.ckpt", "refit.ckpt"):
        predictor = Predictor.load(run / "checkpoints" / name)
        mixes = {spec: named_mix(spec, predictor) for spec in ("uniform", "dominated", "absent")}
        found = composition_check(predictor, corpus, mixes, Draws(tables=40, size=300), abstain=False)
        coverage[name] = np.mean([mix["adjusted"]["coverage"] for mix in found["mixes"].values()])
    assert coverage["best.ckpt"] >= 0.7 and abs(coverage["best.ckpt"] - coverage["refit.ckpt"]) <= 0.1, coverage
    with pytest.raises(SystemExit) as exit_info:
        nameorigin(["composition", str(run / "checkpoints" / "refit.ckpt"), "Nakamura", "--reference",
                    str(corpus)])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1 and "drop --reference" in err
    assert nameorigin(["composition", str(run / "checkpoints" / "refit.ckpt"), "Nakamura", "Bellelli"]) == 0
    assert "reference: " in capsys.readouterr().out
