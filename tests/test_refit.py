"""The refit (nameorigin.training.refit): after validation picks best.ckpt, a fresh model trains on train +
validation and is the model tested, carded and served; the n-gram baseline it is compared with is refitted the
same way."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY, train_refused
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nameorigin.evaluation.baselines import fit_tfidf_baseline
from nameorigin.serving.predict import Predictor


def recomputed_test_loss(checkpoint, pairs: list[list[str]]) -> float:
    """The test loss train.py logs (label-smoothed cross-entropy of the calibrated decision), recomputed."""
    predictor = Predictor.from_checkpoint(checkpoint)
    probs = predictor.probabilities([predictor.encode(name)[0] for name, _ in pairs])
    targets = torch.tensor([predictor.labels.index(language) for _, language in pairs])
    smoothing = torch.load(checkpoint, weights_only=True)["hyper_parameters"]["config"]["label_smoothing"]
    return float(F.cross_entropy(probs.log(), targets, label_smoothing=smoothing))


def test_the_refit_trains_on_train_and_validation_and_is_the_model_tested(trained):
    run, _, _ = trained
    load = {name: torch.load(run / "checkpoints" / f"{name}.ckpt", weights_only=True) for name in
            ("best", "last", "refit")}
    refit, best = load["refit"], load["best"]
    assert refit["data"]["trained_on"] == "train+val" and "trained_on" not in best["data"]
    # The same model, but its prior is the shares of what it trained on: train + validation (for --prior).
    assert {**refit["hyper_parameters"], "class_prior": None} == {**best["hyper_parameters"], "class_prior": None}
    # Same epochs, more names per epoch: more optimizer steps than the first training's last.ckpt.
    assert refit["global_step"] > load["last"]["global_step"] > 0
    manifest = json.loads((run / "split.json").read_text())
    labels = refit["hyper_parameters"]["labels"]
    seen = [label for split in ("train", "val") for _, label in manifest["splits"][split]]
    assert refit["hyper_parameters"]["class_prior"] == pytest.approx([seen.count(k) / len(seen) for k in labels])
    assert manifest["trained_on"] == "train+val" and set(manifest["splits"]) == {"train", "val", "test"}
    # best.ckpt's temperature and thresholds, fitted on validation, are carried over.
    assert refit["calibration"] == {**best["calibration"], "carried_from": "best.ckpt"}
    assert float(refit["state_dict"]["net.temperature"]) == float(best["state_dict"]["net.temperature"])
    # The test pass scored refit.ckpt: its logged loss is the refit's, not best.ckpt's.
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0}).Reload()
    logged = events.Scalars("test/loss")[-1].value
    test_pairs = manifest["splits"]["test"]
    assert logged == pytest.approx(recomputed_test_loss(run / "checkpoints" / "refit.ckpt", test_pairs), abs=1e-4)
    assert abs(logged - recomputed_test_loss(run / "checkpoints" / "best.ckpt", test_pairs)) > 1e-3
    # Its training curves and the gradient-accumulation check are a run of their own in the dashboard.
    curves = EventAccumulator(str(run / "tensorboard" / "refit"), size_guidance={"scalars": 0}).Reload()
    assert max(e.value for e in curves.Scalars("grad_accum/weight_hh/residual")) < 1e-5
    assert "train/loss_epoch" in curves.Tags()["scalars"] and "val/acc" not in curves.Tags()["scalars"]
    card = (run / "MODEL_CARD.md").read_text()
    sizes = manifest["sizes"]
    assert f"Trained on train + validation ({sizes['train'] + sizes['val']} pairs)" in card
    assert "fitted on validation for best.ckpt and carried over" in card
    assert "| validation (fitted for best.ckpt) |" in card


def test_a_refit_checkpoint_is_not_a_state_to_resume(trained, tmp_path):
    run, corpus, _ = trained
    result = train_refused(tmp_path, f"data.root={corpus}", *TINY, f"ckpt_path={run / 'checkpoints' / 'refit.ckpt'}")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (f"error: ckpt_path={run / 'checkpoints' / 'refit.ckpt'} is a refit model "
                                     "(trained on train + validation), not a training state: resume from the run's "
                                     "last.ckpt or ckpt_path=last")


def test_the_baseline_refit_learns_from_the_validation_names():
    # Irish appears only in validation and test: fitted on train alone, the baseline cannot answer it.
    splits = {"train": [(n, "Japanese") for n in ("Tanaka", "Suzuki", "Kanemoto", "Nakamura", "Yamada")]
              + [(n, "Russian") for n in ("Pavlov", "Ivanov", "Smirnov", "Petrov", "Sokolov")],
              "val": [(n, "Irish") for n in ("Oneill", "Murphy", "Donagh", "Brennan")],
              "test": [(n, "Irish") for n in ("Oconnell", "Donnell", "Murray")]}
    alone, refit = fit_tfidf_baseline(splits), fit_tfidf_baseline(splits, refit=True)
    assert alone["trained_on"] == "train" and alone["test_acc"] == 0.0
    assert refit["trained_on"] == "train+val" and refit["test_acc"] > 0.5 and refit["C"] == alone["C"]


def test_the_surnames_pretraining_refuses_a_refit(tmp_path):
    result = train_refused(tmp_path, "experiment=surnames_pretrain", "refit.enabled=true")
    assert result.returncode == 2 and result.stderr.strip() == (
        "error: refit.enabled=true is for the names corpus: the surnames pretraining has no refit; pass "
        "refit.enabled=false")
    assert not (tmp_path / "outputs").exists()
