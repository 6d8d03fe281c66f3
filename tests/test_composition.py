"""`--composition`: each label's share of a group's rows, by three methods with intervals
(nameorigin.analysis.composition), from names, a table file or a DataFrame."""

from __future__ import annotations

import csv
import json

import numpy as np
import pandas as pd
import pytest
import torch

from nameorigin.analysis.composition import Reference, estimate, frame_composition, linearized_em, table_composition
from nameorigin.cli.predict import main as predict_main
from nameorigin.serving.predict import Predictor
from nameorigin.serving.prior import estimate_prior


def test_a_model_that_is_always_right_finds_the_mix_by_every_method():
    labels = ["A", "B", "C"]
    probs = torch.eye(3).repeat_interleave(torch.tensor([5, 3, 2]), dim=0)  # ten names, one-hot and right
    counts = torch.tensor([100] * 10)
    reference = Reference(torch.eye(3).repeat(4, 1), torch.arange(3).repeat(4))
    found = estimate(probs, counts, torch.full((3,), 1 / 3), labels, reference, bootstraps=50)
    for method in ("mean", "em", "adjusted"):
        assert found.estimates[method] == pytest.approx([0.5, 0.3, 0.2], abs=1e-4), method
        assert all(low <= share <= high for share, (low, high) in
                   zip(found.estimates[method], found.intervals[method], strict=True)), method
    assert found.rows == 1000


def test_the_linearized_em_replicas_match_em_run_to_convergence():
    generator = torch.Generator().manual_seed(0)
    probs = torch.softmax(2 * torch.randn(400, 5, generator=generator), -1)
    trained = torch.full((5,), 0.2)
    counts = torch.randint(1, 20, (400,), generator=generator).double()
    em = estimate_prior(probs, trained, counts=counts)
    weights = (counts * torch.empty(400).uniform_(0.8, 1.2, generator=generator)).float()
    weights = (weights / weights.sum())[None]
    fast = linearized_em(probs, trained, em, weights)[0]
    slow = estimate_prior(probs, trained, counts=weights[0].double())
    assert (fast - slow).abs().max() < 2e-3 and (em - slow).abs().max() > 5 * (fast - slow).abs().max()


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
    assert predict_main([str(checkpoint), "--file", str(table), "--column", "surname", "--composition",
                         "--reference", str(trained[1]), "--format", "json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert set(found["estimates"]) == {"mean", "em", "adjusted"}
    assert found["rows"] + found["abstained"] + found["unusable"] == 503 and found["unusable"] >= 3
    for method, shares in found["estimates"].items():
        assert sum(shares) == pytest.approx(1, abs=1e-4)
        assert all(low <= share + 1e-9 and share <= high + 1e-9
                   for share, (low, high) in zip(shares, found["intervals"][method], strict=True)), method
    frame = frame_composition(pd.DataFrame({"surname": rows[:-3] + [None, "NaN", "x" * 80]}), "surname",
                              Predictor.load(checkpoint))
    assert frame.estimates["em"] == pytest.approx(found["estimates"]["em"], abs=1e-6)
    assert frame.rows == found["rows"] and frame.unusable == found["unusable"]
    assert predict_main([str(checkpoint), "--file", str(table), "--column", "surname", "--composition",
                         "--reference", str(trained[1])]) == 0
    text = capsys.readouterr().out
    assert "rows counted; left out:" in text and "adjusted (90% interval)" in text
    direct = table_composition(Predictor.load(checkpoint), str(table), "surname")
    assert "adjusted" not in direct.estimates  # no reference given: the tiny corpus is not the shipped one
    assert np.allclose(direct.estimates["mean"], found["estimates"]["mean"], atol=1e-6)


def test_composition_refuses_per_name_options_in_one_line(checkpoint, capsys):
    with pytest.raises(SystemExit) as exit_info:
        predict_main([str(checkpoint), "Nakamura", "--composition", "--coverage", "0.9"])
    assert exit_info.value.code == 2
    assert "--composition answers for the whole list" in capsys.readouterr().err
