"""A model that reads each name both ways with two layers (model.directions=2 model.layers=2), end to end: its
gradient check for each of its four cells, its checkpoint behind the Predictor, its exports, and --explain's
one-line refusal; and the explanations of a stacked one-way model, which still add up."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import NAMEORIGIN, ROOT, TINY, run_dirs, run_in_process, train, write_corpus
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nameorigin.config import ModelConfig
from nameorigin.fit.module import NameClassifier
from nameorigin.model.charrnn import SHARED_WEIGHTS, batch_tokens, build_net
from nameorigin.model.explain import explain_batch
from nameorigin.serving.predict import Predictor

NAMES = ["Kanemoto", "Pavlovsky", "Ab", "Donagh", "Rinelli", "O'Kanemotoagh", "Zz", "Nakamura"]


@pytest.fixture(scope="module")
def two_way(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("two-way")
    corpus = write_corpus(work / "names")
    result = train(work, f"data.root={corpus}", *TINY, "model.directions=2", "model.layers=2", "model.impl=bptt")
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = run_dirs(work)
    return run


@pytest.mark.slow
def test_the_dashboard_checks_each_cell_of_a_two_way_two_layer_model(two_way):
    events = EventAccumulator(str(two_way / "tensorboard"), size_guidance={"scalars": 0}).Reload()
    tags = set(events.Tags()["scalars"])
    # The first layer's forward cell keeps a one-way model's panels; every other cell's are named.
    for prefix in ("", "cell_reverse/", "cell_l1/", "cell_l1_reverse/"):
        for weight in SHARED_WEIGHTS:
            residuals = [e.value for e in events.Scalars(f"grad_accum/{prefix}{weight}/residual")]
            assert len(residuals) >= 3 and max(residuals) < 1e-5, (prefix, weight, residuals)
        assert f"grad_accum/{prefix}weight_hh/horizon90" in tags


@pytest.mark.slow
def test_the_predictor_and_the_exports_agree_with_the_two_way_checkpoint(two_way, tmp_path):
    checkpoint = two_way / "checkpoints" / "refit.ckpt"
    saved = torch.load(checkpoint, weights_only=True)
    assert saved["hyper_parameters"]["config"]["directions"] == 2
    assert saved["hyper_parameters"]["config"]["layers"] == 2
    assert {"net.cell_reverse.weight_hh", "net.cell_l1.weight_ih", "net.cell_l1_reverse.bias_hh"} <= set(
        saved["state_dict"])
    model = NameClassifier(**saved["hyper_parameters"]).eval()
    model.load_state_dict(saved["state_dict"])
    ours = Predictor.from_checkpoint(checkpoint)
    encoded = [codes for codes, error in map(ours.encode, NAMES) if error is None]
    tokens, lengths = batch_tokens(encoded, torch.device("cpu"))
    # With gradients on, the training loop (bptt, both cells) runs, not the inference loop the Predictor uses.
    reference = model.net(tokens, lengths).softmax(-1).detach()
    torch.testing.assert_close(ours.probabilities(encoded), reference, atol=1e-5, rtol=0)
    stem = tmp_path / "model"
    result = run_in_process([NAMEORIGIN, "export", checkpoint, "--out", stem], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for fmt in ("pt2", "onnx"):
        served = Predictor.load(stem.with_suffix(f".{fmt}"))
        torch.testing.assert_close(served.probabilities(encoded), reference, atol=1e-5, rtol=0, msg=fmt)


def test_explain_says_in_one_line_that_a_two_way_model_has_no_reading_order_to_split(two_way, tmp_path):
    checkpoint = two_way / "checkpoints" / "refit.ckpt"
    result = run_in_process([ROOT / "scripts" / "predict.py", checkpoint, "Kanemoto", "--explain"], cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "model.directions=2" in result.stderr
    assert "model.directions=1" in result.stderr  # the fix


def test_the_explanations_of_a_stacked_one_way_model_add_up_to_its_score():
    torch.manual_seed(0)
    net = build_net(ModelConfig(hidden_size=16, embedding_dim=8, layers=2, ngram_buckets=64), 12, 4).eval()
    tokens = torch.randint(2, 12, (6, 7))
    lengths = torch.tensor([7, 3, 5, 1, 7, 2])
    tokens[torch.arange(7)[None, :] >= lengths[:, None]] = 0
    why = explain_batch(net, tokens, lengths)
    assert float(why.residual.abs().max()) < 1e-5
    assert float(why.characters.abs().sum()) > 0
