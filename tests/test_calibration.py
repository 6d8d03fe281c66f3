"""Temperature scaling and split-conformal prediction sets on synthetic data whose answer is known."""

from __future__ import annotations

import pytest
import torch
from torchmetrics.classification import MulticlassCalibrationError

from nameorigin.base.errors import UserError
from nameorigin.config import CalibrationConfig
from nameorigin.model.calibration import (
    TEMPERATURE_RANGE,
    calibrate,
    conformal_thresholds,
    expected_calibration_error,
    fit_temperature,
    prediction_sets,
    reliability,
)


def sample(n: int, classes: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """True logits and labels drawn from them: a perfectly calibrated model would output these logits."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, classes, generator=gen) * 2
    labels = torch.multinomial(logits.softmax(-1), 1, generator=gen).squeeze(1)
    return logits, labels


@pytest.mark.parametrize("true_temperature", [0.5, 1.0, 3.0])
def test_fit_temperature_recovers_the_overconfidence_factor(true_temperature):
    logits, labels = sample(20_000)
    fitted = fit_temperature(logits * true_temperature, labels)
    assert fitted == pytest.approx(true_temperature, rel=0.05)


def test_a_validation_split_without_errors_stops_the_temperature_at_its_bound():
    # Every name right by a wide margin: the loss keeps falling as T -> 0, which would make every probability 1.0.
    labels = torch.arange(300) % 3
    logits = torch.randn(300, 3, generator=torch.Generator().manual_seed(4)) * 0.1
    logits[torch.arange(300), labels] += 5
    summary = calibrate(logits, labels, [0.9])
    assert summary.temperature == pytest.approx(TEMPERATURE_RANGE[0]) and summary.temperature_at_bound
    assert not calibrate(*sample(5_000, seed=5), [0.9]).temperature_at_bound


def test_ece_matches_torchmetrics_and_drops_after_scaling():
    logits, labels = sample(5_000, seed=1)
    overconfident = logits * 3
    probs = overconfident.softmax(-1)
    reference = MulticlassCalibrationError(6, n_bins=15, norm="l1")(probs, labels)
    assert expected_calibration_error(probs, labels) == pytest.approx(float(reference), abs=1e-6)
    summary = calibrate(overconfident, labels, [0.9])
    assert summary.val_ece < summary.val_ece_raw / 3 and summary.val_ece < 0.03


@pytest.mark.parametrize("coverage", [0.8, 0.9, 0.95])
def test_conformal_sets_cover_held_out_labels_at_the_stated_rate(coverage):
    logits, labels = sample(40_000, seed=2)
    probs = logits.softmax(-1)
    thresholds = conformal_thresholds(probs[:10_000], labels[:10_000], [coverage])
    sets = prediction_sets(probs[10_000:], thresholds[f"{coverage:g}"])
    covered = sets.gather(1, labels[10_000:, None]).float().mean()
    assert coverage - 0.01 <= float(covered) <= coverage + 0.02, float(covered)
    # Smaller sets for lower coverage, and the top language is always a member.
    assert bool(sets[torch.arange(len(sets)), probs[10_000:].argmax(-1)].all())


def test_sets_grow_with_coverage_and_never_come_back_empty():
    logits, labels = sample(4_000, seed=3)
    probs = logits.softmax(-1)
    thresholds = conformal_thresholds(probs, labels, [0.5, 0.9, 0.99])
    sizes = [float(prediction_sets(probs, thresholds[k]).sum(1).float().mean()) for k in ("0.5", "0.9", "0.99")]
    assert sizes == sorted(sizes) and sizes[0] >= 1
    assert bool(prediction_sets(torch.full((3, 4), 0.25), 0.99).any(1).all())


def test_the_calibration_config_rejects_impossible_levels():
    with pytest.raises(UserError, match="calibration.coverages: 1.5 must be a number between 0 and 1"):
        CalibrationConfig(coverages=[0.9, 1.5])


def test_reliability_bins_count_every_prediction():
    logits, labels = sample(1_000, seed=4)
    curve = reliability(logits.softmax(-1), labels, bins=10)
    assert sum(curve["count"]) == 1_000 and len(curve["accuracy"]) == 10
