"""ensemble.members: networks from consecutive seeds, validation picking how many are served, as one checkpoint
that every serving path takes (calibration and sets, --explain, exports, Ray, the server)."""

from __future__ import annotations

import json
import os

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import TINY, run_dirs, train, train_refused, write_corpus

from nameorigin.config import ModelConfig, from_plain
from nameorigin.model.charrnn import build_net
from nameorigin.serving.export import export_model
from nameorigin.serving.predict import Predictor
from nameorigin.training.ensemble import pick_size

MEMBERS = 3


@pytest.fixture(scope="module")
def ensemble_run(tmp_path_factory):
    """A tiny run that serves all of its three networks (min_gain=-1 keeps every one)."""
    work = tmp_path_factory.mktemp("ensemble")
    corpus = write_corpus(work / "names")
    result = train(work, f"data.root={corpus}", *TINY, f"ensemble.members={MEMBERS}", "ensemble.min_gain=-1")
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = run_dirs(work)
    return run, corpus, result


def test_the_size_kept_is_the_one_each_more_network_pays_for():
    targets = torch.tensor([0, 1, 2, 0])
    one = torch.tensor([[1.0, 0, 0], [0, 0, 1], [0, 0, 1], [0, 1, 0]])  # right on 2 of 4
    two = torch.tensor([[1.0, 0, 0], [0, 3, 0], [0, 0, 1], [0, 0, 0.5]])  # the mean of two: right on 3
    three = torch.tensor([[0.0, 1, 0], [0, 0, 0], [0, 0, 1], [0, 0, 0]])  # the mean of three: right on 3
    kept, accuracy = pick_size([one, two, three], targets, 0.002)
    assert accuracy == [0.5, 0.75, 0.75] and kept == 2  # the third adds nothing: not kept
    assert pick_size([one, two, three], targets, 0.3)[0] == 1  # a gain of 0.25 does not pay 0.3
    assert pick_size([one, two, three], targets, -1.0)[0] == 3


@pytest.mark.slow
def test_an_ensemble_is_its_networks_mean_logits_in_one_calibrated_checkpoint(ensemble_run):
    run, corpus, result = ensemble_run
    metrics = json.loads((run / "results.json").read_text())["metrics"]
    assert metrics["ensemble/members"] == MEMBERS and all(f"ensemble/val_acc_{k}" in metrics for k in (1, 2, 3))
    assert "  ensemble         3 of 3 served as one model" in result.stdout
    assert "Ensemble of networks trained from consecutive seeds" in (run / "MODEL_CARD.md").read_text()
    # One model in the run folder: no refit (validation picked the size), no member checkpoints left behind.
    assert not (run / "checkpoints" / "refit.ckpt").exists()
    assert all(not (run / "members" / str(k) / "checkpoints").exists() for k in (1, 2))
    checkpoint = torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)
    hp, state = checkpoint["hyper_parameters"], checkpoint["state_dict"]
    assert hp["members"] == MEMBERS and "optimizer_states" not in checkpoint
    weights = [state[f"net.members.{k}.cell.weight_hh"] for k in range(MEMBERS)]
    assert not torch.equal(weights[0], weights[1]) and not torch.equal(weights[1], weights[2])  # their own seeds
    # The served probabilities: each network rebuilt alone, their raw logits averaged, then the ensemble's
    # decision layer, whose temperature is the calibration's.
    config = from_plain(ModelConfig, hp["config"])
    nets = []
    for k in range(MEMBERS):
        net = build_net(config, len(hp["vocab"]), len(hp["labels"])).eval()
        prefix = f"net.members.{k}."
        net.load_state_dict({key[len(prefix):]: value for key, value in state.items() if key.startswith(prefix)})
        nets.append(net)
    assert float(state["net.temperature"]) == pytest.approx(checkpoint["calibration"]["temperature"])
    predictor = Predictor.load(run / "checkpoints" / "best.ckpt")
    names = (corpus / "Japanese.txt").read_text().split()[:5] + (corpus / "Irish.txt").read_text().split()[:5]
    tokens, lengths, _ = predictor.encode_many(names)
    with torch.no_grad():
        raw = torch.stack([net.raw_logits(tokens.long(), lengths) for net in nets]).mean(0)
        expected = ((raw + state["net.logit_offset"]) / state["net.temperature"]).softmax(-1)
    torch.testing.assert_close(predictor.probabilities((tokens, lengths)), expected, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_every_serving_path_takes_the_ensemble(ensemble_run, tmp_path, capsys):
    from benchmarks.serve_load import free_port, start_server, stop_server
    from nameorigin.cli.predict import main as predict_main
    from nameorigin.serving.frame import predict_frame
    from nameorigin.serving.ray_data import NameScorer

    run, corpus, _ = ensemble_run
    model = run / "checkpoints" / "best.ckpt"
    names = (corpus / "Russian.txt").read_text().split()[:6] + ["Zzyzx"]
    predictor = Predictor.load(model)
    # --explain: the members' parts averaged add up to the ensemble's served score.
    for answer in predictor.explain(names):
        why = answer.explanation
        assert abs(why.residual) <= 1e-4 * max(abs(why.score), 1.0), (answer.name, why.residual, why.score)
    # Exports: one program holding every network, agreeing with the checkpoint.
    encoded = [predictor.encode(name)[0] for name in names]
    for written in export_model(predictor, tmp_path / "export" / "model"):
        if written.suffix != ".json":
            torch.testing.assert_close(Predictor.load(written).probabilities(encoded), predictor.probabilities(
                encoded), atol=1e-5, rtol=0)
    # Sets at a stored coverage, from the command.
    capsys.readouterr()
    assert predict_main([str(model), *names, "--coverage", "0.9", "--format", "json"]) == 0
    answers = json.loads(capsys.readouterr().out)
    assert all(answer["prediction_set"] for answer in answers if answer["predictions"])
    # The server answers as the command does.
    port = free_port()
    server = start_server(str(model), port, [], env=dict(os.environ))
    try:
        import urllib.request

        request = urllib.request.Request(f"http://127.0.0.1:{port}/predict", data=json.dumps(
            {"names": names, "coverage": 0.9}).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as reply:
            assert json.loads(reply.read())["predictions"] == answers
    finally:
        stop_server(server)
    # Ray Data's scorer, as an actor runs it (the model shipped as the checkpoint's bytes), answers a batch as
    # predict_frame does; tests/test_ray_data.py runs the scorer on a real cluster.
    people = tmp_path / "people.parquet"
    pq.write_table(pa.table({"surname": pa.array(names * 20, pa.string())}), people)
    scorer = NameScorer(model.read_bytes(), "surname", top_k=2)
    pq.write_table(scorer(pq.read_table(people)), tmp_path / "scored.parquet")
    ours = pd.read_parquet(tmp_path / "scored.parquet")
    theirs = predict_frame(pd.read_parquet(people), "surname", predictor, top_k=2, markers=True)
    probabilities = [c for c in theirs.columns if c.startswith("pred_probability")]
    assert (ours[probabilities] - theirs[probabilities]).abs().max().max() <= 1e-6
    assert ours.drop(columns=probabilities).equals(theirs.drop(columns=probabilities))


@pytest.mark.parametrize(("overrides", "message"), [
    (["ensemble.members=0"], "ensemble.members=0"),
    (["ensemble.members=2", "ckpt_path=last"], "ensemble.members with ckpt_path"),
    (["ensemble.members=2", "trainer=ddp_cpu"], "ensemble.members assembles its networks in one process"),
])
def test_an_ensemble_refuses_what_it_cannot_be_part_of(tmp_path, overrides, message):
    corpus = write_corpus(tmp_path / "names")
    result = train_refused(tmp_path, f"data.root={corpus}", *TINY, *overrides)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not run_dirs(tmp_path)
