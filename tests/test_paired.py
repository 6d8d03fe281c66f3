"""The paired comparison with the n-gram baseline: its statistics, and predict.py --evaluate --baseline on a real
(tiny) checkpoint."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import ROOT, run_script

from nameorigin.analysis.baseline import fit_ngram_baseline
from nameorigin.analysis.evaluate import checkpoint_splits, evaluate
from nameorigin.analysis.paired import bootstrap_margin, compare_with_baseline, mcnemar_p
from nameorigin.serving.predict import Predictor

PREDICT = str(ROOT / "scripts" / "predict.py")


def test_mcnemar_exact_p_values():
    assert mcnemar_p(10, 0) == pytest.approx(2 * 0.5**10)  # all ten disagreements one way
    assert mcnemar_p(0, 10) == mcnemar_p(10, 0)
    assert mcnemar_p(7, 3) == pytest.approx(2 * (1 + 10 + 45 + 120) / 1024)
    assert mcnemar_p(5, 5) == 1.0 and mcnemar_p(0, 0) == 1.0


def test_bootstrap_interval_matches_resampling_the_names():
    generator = torch.Generator().manual_seed(3)
    first = torch.rand(1500, generator=generator) < 0.85
    second = torch.where(torch.rand(1500, generator=generator) < 0.9, first, ~first)
    low, high = bootstrap_margin(first, second, samples=20_000)
    rows = torch.randint(0, 1500, (20_000, 1500), generator=generator)
    margins = first[rows].double().mean(1) - second[rows].double().mean(1)
    naive_low, naive_high = torch.quantile(margins, torch.tensor([0.025, 0.975], dtype=torch.double)).tolist()
    assert low == pytest.approx(naive_low, abs=2e-3) and high == pytest.approx(naive_high, abs=2e-3)
    assert low < (first.double().mean() - second.double().mean()) < high
    assert bootstrap_margin(torch.ones(50, dtype=torch.bool), torch.zeros(50, dtype=torch.bool)) == (1.0, 1.0)
    with pytest.raises(ValueError, match="equally long"):
        bootstrap_margin(first, second[:-1])


def test_predict_compares_the_checkpoint_with_the_baseline_name_by_name(trained):
    run, corpus, _ = trained
    checkpoint = run / "checkpoints" / "refit.ckpt"
    predictor = Predictor.from_checkpoint(checkpoint)
    splits = checkpoint_splits(predictor, corpus)
    # The model trained on train + val (the refit), so the baseline it is compared with does too.
    ours, baseline = evaluate(predictor, corpus), fit_ngram_baseline(splits, refit=True)
    result = compare_with_baseline(predictor, corpus)
    assert result["size"] == len(splits["test"]) == len(ours["correct"]) == len(baseline["test_predictions"])
    assert result["model_acc"] == ours["accuracy"] and result["baseline_acc"] == baseline["test_acc"]
    # The margin is exactly what the disagreements say, and the interval holds it.
    assert result["margin"] == pytest.approx((result["only_model"] - result["only_baseline"]) / result["size"])
    assert result["interval"][0] <= result["margin"] <= result["interval"][1]
    assert result["p"] == mcnemar_p(result["only_model"], result["only_baseline"])

    shown = run_script([PREDICT, str(checkpoint), "--evaluate", str(corpus), "--baseline"], cwd=run)
    assert shown.returncode == 0, shown.stderr[-2000:]
    margin = re.search(r"margin\s+([+-]\d+\.\d+) points", shown.stdout)
    assert margin and float(margin.group(1)) == pytest.approx(100 * result["margin"], abs=0.006)
    assert f"n-gram LR   accuracy {baseline['test_acc']:.4f}" in shown.stdout
    assert "refitted on train + validation, as the model was" in shown.stdout
    best = run_script([PREDICT, str(run / "checkpoints" / "best.ckpt"), "--evaluate", str(corpus), "--baseline"],
                      cwd=run)
    assert best.returncode == 0 and "chosen on validation)" in best.stdout and "refitted" not in best.stdout


def test_baseline_without_evaluate_is_a_usage_error(trained):
    run, _, _ = trained
    result = run_script([PREDICT, str(run / "checkpoints" / "best.ckpt"), "--baseline"], cwd=run)
    assert result.returncode == 2 and "--baseline compares on the test split" in result.stderr
    assert "Traceback" not in result.stderr
