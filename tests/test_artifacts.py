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


@pytest.mark.parametrize("file", ["model.ckpt", "model.onnx"])
def test_models_written_before_the_typed_artifacts_answer_as_before(file):
    names, expected = EXPECTED["names"], EXPECTED[file]
    predictor = Predictor.load(FIXTURES / file)
    assert [a.as_dict() for a in predictor.predict(names, top_k=3)] == expected["plain"]
    assert [a.as_dict() for a in predictor.predict(names, top_k=4, coverage=0.9)] == expected["sets"]
    uncalibrated = Predictor.load(FIXTURES / file, calibrated=False)
    assert [a.as_dict() for a in uncalibrated.predict(names, top_k=2, abstain=False)] == expected["uncalibrated"]
    if "explained" in expected:
        assert [a.as_dict() for a in predictor.predict(names[:4], top_k=1, explain=True)] == expected["explained"]


def test_the_old_checkpoint_has_no_format_version():
    checkpoint = torch.load(FIXTURES / "model.ckpt", weights_only=True)
    assert "format" not in checkpoint and isinstance(checkpoint["calibration"]["abstention"], dict)
