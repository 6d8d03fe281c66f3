"""The per-label report (intervals that mean what they say) and class-conditional (Mondrian) prediction sets, on
synthetic scores whose answers are known."""

from __future__ import annotations

import math

import pytest
import torch

from nameorigin.model.artifacts import Calibration
from nameorigin.model.calibration import calibrate, conformal_thresholds, mondrian_thresholds, prediction_sets
from nameorigin.model.label_report import (
    bootstrap_f1,
    f1_from_confusion,
    label_report,
    report_table,
    weakest_by_recall,
    weakest_line,
    wilson,
)


@pytest.mark.parametrize(("successes", "trials"), [(5, 10), (0, 10), (10, 10), (81, 263), (1, 7)])
def test_the_wilson_interval_equals_scipys(successes, trials):
    from scipy.stats import binomtest

    reference = binomtest(successes, trials).proportion_ci(confidence_level=0.95, method="wilson")
    assert wilson(successes, trials) == pytest.approx([reference.low, reference.high], abs=1e-9)
    assert wilson(0, 0) == [0.0, 1.0]
    low, high = wilson(successes, trials)
    assert low <= successes / trials <= high  # exactly, at 0 and at all successes too


def test_the_per_label_figure_draws_labels_right_every_time_and_never_at_all():
    from nameorigin.fit.plots import label_report_figure

    probs, truth = synthetic(300, seed=6)
    rows = label_report(probs, truth, ["A", "B", "C"], {"marginal": 0.0})  # every set holds every label
    rows[2]["recall"], rows[2]["recall_95"] = None, [0.0, 1.0]  # a label without test names
    figure = label_report_figure(rows, 0.9)
    assert [tick.get_text() for tick in figure.axes[0].get_yticklabels()][0] == f"A ({rows[0]['test_names']})"


def test_the_bootstrap_interval_of_f1_holds_the_f1_and_narrows_with_more_names():
    generator = torch.Generator().manual_seed(0)
    widths = []
    for n in (100, 1600):
        truth = torch.randint(3, (n,), generator=generator)
        noise = torch.randint(3, (n,), generator=generator)
        preds = torch.where(torch.rand(n, generator=generator) < 0.7, truth, noise)
        confusion = torch.bincount(truth * 3 + preds, minlength=9).view(3, 3)
        f1, interval = f1_from_confusion(confusion), bootstrap_f1(truth, preds, 3)
        assert ((interval[:, 0] <= f1) & (f1 <= interval[:, 1])).all()
        widths.append(float((interval[:, 1] - interval[:, 0]).mean()))
    assert widths[1] < widths[0] / 2.5  # about 1 / sqrt(16) as wide


def synthetic(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Three labels; label 0's names are confidently right, label 2's are often confused: marginal sets cover
    label 0 more and label 2 less than asked."""
    generator = torch.Generator().manual_seed(seed)
    truth = torch.multinomial(torch.tensor([0.6, 0.3, 0.1]), n, replacement=True, generator=generator)
    sharpness = torch.tensor([4.0, 2.0, 0.6])[truth]
    logits = torch.randn(n, 3, generator=generator)
    logits[torch.arange(n), truth] += sharpness
    return logits.softmax(-1), truth


def coverage_by_label(sets: torch.Tensor, truth: torch.Tensor) -> list[float]:
    held = sets.gather(1, truth[:, None]).squeeze(1).double()
    return [float(held[truth == k].mean()) for k in range(3)]


def test_mondrian_sets_hold_each_labels_coverage_where_marginal_sets_do_not():
    probs, truth = synthetic(6000, seed=1)
    test_probs, test_truth = synthetic(20000, seed=2)
    marginal = conformal_thresholds(probs, truth, [0.9])
    by_label, fallback = mondrian_thresholds(probs, truth, [0.9], marginal)
    assert fallback == {"0.9": []} and len(by_label["0.9"]) == 3
    marginal_coverage = coverage_by_label(prediction_sets(test_probs, marginal["0.9"]), test_truth)
    mondrian_coverage = coverage_by_label(prediction_sets(test_probs, by_label["0.9"]), test_truth)
    assert marginal_coverage[2] < 0.85 and marginal_coverage[0] > 0.93, marginal_coverage
    assert all(0.88 <= c <= 0.92 for c in mondrian_coverage), mondrian_coverage
    # Marginal sets always hold the top label; class-conditional ones hold what reaches its own threshold, so a
    # label right more often than 90 % is not held far above it, and a set can be empty.
    assert prediction_sets(test_probs, marginal["0.9"]).any(1).all()
    assert not prediction_sets(test_probs, by_label["0.9"]).any(1).all()


def test_a_label_too_rare_for_its_quantile_takes_the_marginal_threshold_and_is_listed():
    probs, truth = synthetic(400, seed=3)
    rare = torch.nonzero(truth == 2).squeeze(1)
    keep = torch.cat([torch.nonzero(truth != 2).squeeze(1), rare[:8]])  # 8 < 0.9 / 0.1 = 9 names of label 2
    marginal = conformal_thresholds(probs[keep], truth[keep], [0.9])
    by_label, fallback = mondrian_thresholds(probs[keep], truth[keep], [0.9], marginal)
    assert fallback["0.9"] == [2] and by_label["0.9"][2] == marginal["0.9"]
    nine = torch.cat([keep, rare[8:9]])
    assert mondrian_thresholds(probs[nine], truth[nine], [0.9], marginal)[1]["0.9"] == []


def test_a_calibration_serves_the_kind_of_set_it_was_asked_for_and_round_trips():
    probs, truth = synthetic(3000, seed=4)
    logits = probs.log()
    marginal = calibrate(logits, truth, [0.8, 0.9])
    mondrian = calibrate(logits, truth, [0.8, 0.9], sets="mondrian")
    assert marginal.threshold("0.9") == marginal.conformal["0.9"]
    assert mondrian.threshold("0.9") == mondrian.conformal_by_label["0.9"]
    assert mondrian.threshold("0.9", "marginal") == marginal.conformal["0.9"]
    assert Calibration.from_plain(mondrian.plain()) == mondrian
    old = {key: value for key, value in marginal.plain().items() if not key.startswith(("conformal_", "sets"))}
    assert Calibration.from_plain(old).threshold("0.9", "mondrian") == marginal.conformal["0.9"]  # older files


def test_the_report_has_every_label_with_its_intervals_and_names_the_weakest():
    probs, truth = synthetic(900, seed=5)
    calibration = calibrate(probs.log(), truth, [0.9])
    abstained = torch.zeros(len(truth), dtype=torch.bool)
    abstained[truth == 2] = True
    rows = label_report(probs, truth, ["A", "B", "C"], {"marginal": calibration.threshold("0.9", "marginal"),
                                                        "mondrian": calibration.threshold("0.9", "mondrian")},
                        abstained)
    assert [row["label"] for row in rows] == ["A", "B", "C"]
    assert sum(row["test_names"] for row in rows) == 900
    preds = probs.argmax(-1)
    for k, row in enumerate(rows):
        right = int(((preds == k) & (truth == k)).sum())
        assert row["recall"] == pytest.approx(right / int((truth == k).sum()))
        assert row["precision"] == pytest.approx(right / int((preds == k).sum()))
        for key in ("precision", "recall", "f1", "set_coverage_marginal", "set_coverage_mondrian"):
            low, high = row[f"{key}_95"]
            assert low <= row[key] <= high, (key, row)
        assert 0 <= row["ece_one_vs_rest"] <= 1 and row["abstained"] == (1.0 if k == 2 else 0.0)
    assert weakest_by_recall(rows)["label"] == "C"
    assert weakest_line(rows, "origin").startswith("Weakest origin by recall: C, recall ")
    table = report_table(rows, "origin")
    assert len(table) == 5 and "class-conditional" in table[0] and table[4].startswith("| C | ")
    assert math.isclose(sum(float(line.split(" | ")[1]) for line in table[2:]), 900)
