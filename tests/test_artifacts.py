"""What training hands to serving: checkpoints and exports written before the typed serving artifacts (no format
version in the checkpoint, dicts for calibration and abstention) still load, and answer exactly as they did.

tests/fixtures/format_before_meta/ holds a tiny model trained, exported (ONNX) and asked by that code, with its
answers in expected.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from nameorigin.serving.predict import Predictor

FIXTURES = Path(__file__).parent / "fixtures" / "format_before_meta"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())


def same_answers(ours: object, theirs: object) -> bool:
    """Equal answers, numbers within 2e-6: the stored ones are rounded to 6 decimals on one CPU, and another CPU's
    vector instructions can move the last float bit across a rounding boundary."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return ours.keys() == theirs.keys() and all(same_answers(ours[k], theirs[k]) for k in ours)
    if isinstance(ours, list) and isinstance(theirs, list):
        return len(ours) == len(theirs) and all(same_answers(a, b) for a, b in zip(ours, theirs, strict=True))
    if isinstance(ours, float) and isinstance(theirs, float):
        return abs(ours - theirs) <= 2e-6
    return ours == theirs


@pytest.mark.parametrize("file", ["model.ckpt", "model.onnx"])
def test_models_written_before_the_typed_artifacts_answer_as_before(file):
    names, expected = EXPECTED["names"], EXPECTED[file]
    predictor = Predictor.load(FIXTURES / file)
    assert same_answers([a.as_dict() for a in predictor.predict(names, top_k=3)], expected["plain"])
    assert same_answers([a.as_dict() for a in predictor.predict(names, top_k=4, coverage=0.9)], expected["sets"])
    uncalibrated = Predictor.load(FIXTURES / file, calibrated=False)
    assert same_answers([a.as_dict() for a in uncalibrated.predict(names, top_k=2, abstain=False)],
                        expected["uncalibrated"])
    if "explained" in expected:
        assert same_answers([a.as_dict() for a in predictor.predict(names[:4], top_k=1, explain=True)],
                            expected["explained"])
    assert not same_answers([{"p": 0.5}], [{"p": 0.50001}]) and not same_answers([1], [1, 2])


def test_the_old_checkpoint_has_no_format_version():
    checkpoint = torch.load(FIXTURES / "model.ckpt", weights_only=True)
    assert "format" not in checkpoint and isinstance(checkpoint["calibration"]["abstention"], dict)


@pytest.mark.slow
def test_new_checkpoints_and_exports_carry_their_format_and_typed_parts(trained, tmp_path):
    from nameorigin.model.artifacts import CHECKPOINT_FORMAT, EXPORT_FORMAT, AbstentionRule, Calibration, ServingMeta
    from nameorigin.serving.export import export_model

    run, _, _ = trained
    checkpoint = torch.load(run / "checkpoints" / "refit.ckpt", weights_only=True)
    assert checkpoint["format"] == CHECKPOINT_FORMAT
    meta = ServingMeta.from_checkpoint(checkpoint)
    assert isinstance(meta.calibration, Calibration) and isinstance(meta.calibration.abstention, AbstentionRule)
    assert meta.calibration.carried_from == "best.ckpt"
    assert ServingMeta.from_plain(json.loads(json.dumps(meta.plain()))) == meta  # plain types, JSON and back

    predictor = Predictor.load(run / "checkpoints" / "refit.ckpt")
    (sidecar,) = [p for p in export_model(predictor, tmp_path / "model", ("pt2",)) if p.suffix == ".json"]
    written = json.loads(sidecar.read_text())
    assert written["format"] == EXPORT_FORMAT and ServingMeta.from_plain(written) == meta
    names = ["Bokamoto", "Sakovsky", "", "Zzzz"]
    exported = Predictor.load(tmp_path / "model.pt2")
    for mine, theirs in zip(predictor.predict(names, top_k=3, coverage=0.9),
                            exported.predict(names, top_k=3, coverage=0.9), strict=True):
        assert mine.prediction_set == theirs.prediction_set
        assert mine.reason_code == theirs.reason_code


def test_the_predictor_is_built_from_the_network_and_its_meta():
    import inspect

    parameters = [p for p in inspect.signature(Predictor.__init__).parameters if p != "self"]
    assert parameters == ["net", "meta", "device"]
