"""PredictOptions, the one statement of what a prediction takes: its own refusals name the option, the command's
flags and the server's request fields are read off it (so neither can drift from it), and keywords and the
dataclass give the same options."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from pydantic import ValidationError

from nameorigin.base.errors import UserError
from nameorigin.cli.app import main as nameorigin
from nameorigin.serving.options import TABLE_OPTIONS, PredictOptions, option_fields, options_of


@pytest.mark.parametrize(("settings", "message"), [
    ({"top_k": 0}, "top_k 0 must be a whole number, at least 1"),
    ({"top_k": True}, "top_k True must be a whole number"),
    ({"batch_size": 0}, "batch_size 0 must be a whole number, at least 1"),
    ({"coverage": 1.5}, "coverage 1.5 must be a level between 0 and 1"),
    ({"max_set_size": 2}, "max_set_size abstains on large prediction sets: use it with coverage"),
    ({"coverage": 0.9, "max_set_size": 0}, "max_set_size 0 must be a whole number, at least 1"),
    ({"coverage": 0.9, "prior": "uniform"}, "prior replaces: drop one of them"),
    ({"prior": 3}, "prior must be 'uniform', 'estimate', a JSON file or label -> share, not int"),
    ({"precision": "fp16"}, "precision 'fp16' is not one of float32, bf16"),
])
def test_each_refusal_names_the_option(settings, message):
    with pytest.raises(UserError, match=None) as refused:
        PredictOptions(**settings)
    assert message in str(refused.value) and "--" not in str(refused.value)


# What a request may set: every prediction option but the command's batching and precision.
REQUEST_OPTIONS = ("top_k", "coverage", "explain", "abstain", "max_set_size", "prior", "labels", "full_names")


def test_options_are_frozen():
    options = PredictOptions(top_k=2, coverage=0.9)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.top_k = 5
    assert TABLE_OPTIONS.top_k == 1 and PredictOptions().top_k == 3


def test_keywords_and_the_dataclass_are_the_same_options():
    assert options_of(None, {"top_k": 2, "abstain": False}) == PredictOptions(top_k=2, abstain=False)
    assert options_of(None, {}, TABLE_OPTIONS) == TABLE_OPTIONS
    with pytest.raises(TypeError, match="topk: not a prediction option"):
        options_of(None, {"topk": 2})
    with pytest.raises(TypeError, match="not both"):
        options_of(PredictOptions(), {"top_k": 2})


def test_the_servers_request_is_made_from_the_options():
    from nameorigin.serving.server import PredictRequest

    fields = {f.name: f for f in option_fields(request_only=True)}
    # Written out, not read off the options: a dropped option must fail here.
    assert set(PredictRequest.model_fields) == {"names", *REQUEST_OPTIONS} == {"names", *fields}
    assert "batch_size" not in PredictRequest.model_fields  # the server's own batching decides
    for name, field in fields.items():
        assert PredictRequest.model_fields[name].default == field.default
        assert PredictRequest.model_fields[name].description == field.metadata["help"]
    request = PredictRequest(names=["Nakamura"], top_k=2, coverage=0.9)
    assert request.options() == PredictOptions(top_k=2, coverage=0.9)
    # The options' own refusals reach a request unchanged, worded for the field.
    with pytest.raises(ValidationError, match="max_set_size abstains on large prediction sets: use it with coverage"):
        PredictRequest(names=["Nakamura"], max_set_size=2)
    with pytest.raises(ValidationError):  # a request names no file for the server to read
        PredictRequest(names=["Nakamura"], prior="/etc/passwd")


def test_the_commands_flags_are_made_from_the_options(monkeypatch):
    """`nameorigin predict`'s flags come back as one PredictOptions (the command's code replaced by a probe that
    keeps what it was given)."""
    import nameorigin.cli.predict as command
    from nameorigin.cli.app import predict_options

    given = []
    monkeypatch.setattr(command.Predictor, "load", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("probe")))
    monkeypatch.setattr(command, "predict_options", lambda settings, top_k: given.append(
        predict_options(settings, top_k)) or given[-1])
    for args in (["--top-k", "2", "--coverage", "0.9", "--no-abstain", "--max-set-size", "3", "--batch-size", "64"],
                 [], ["--file", "people.csv", "--column", "surname"]):
        with pytest.raises(RuntimeError, match="probe"):
            nameorigin(["predict", "model.ckpt", "Nakamura", *args])
    assert given == [PredictOptions(top_k=2, coverage=0.9, abstain=False, max_set_size=3, batch_size=64),
                     PredictOptions(), TABLE_OPTIONS]  # three labels for names, one for a table's rows


def test_every_option_has_a_flag_with_its_help(capsys):
    assert nameorigin(["predict", "--help"]) == 0
    shown = "".join(capsys.readouterr().out.split())  # the help wraps lines, at hyphens too
    assert [field.name for field in option_fields()] == [*REQUEST_OPTIONS, "batch_size", "precision"]
    for field in option_fields():
        flag = "--no-abstain" if field.name == "abstain" else "--" + field.name.replace("_", "-")
        assert flag in shown and "".join(field.metadata["help"].split()) in shown


@pytest.fixture(scope="module")
def restricted(trained):
    """The tiny run's model, two of its labels, and names with their answers among every label."""
    from nameorigin.serving.predict import Predictor

    path = trained[0] / "checkpoints" / "refit.ckpt"
    predictor = Predictor.load(path)
    names = [line for file in sorted(trained[1].glob("*.txt"))[:4] for line in file.read_text().splitlines()[:5]]
    full = predictor.predict(names, top_k=len(predictor.labels), abstain=False)
    return path, predictor, list(predictor.labels[:2]), names, full


def test_options_are_bound_to_a_model_once_and_answers_carry_the_prior_they_estimated(restricted, tmp_path):
    import json

    from nameorigin.serving.options import BoundOptions

    _, predictor, labels, names, _ = restricted
    prior_file = tmp_path / "prior.json"
    prior_file.write_text(json.dumps({label: 1 / len(predictor.labels) for label in predictor.labels}))
    bound = PredictOptions(top_k=2, prior=str(prior_file)).for_model(predictor)
    assert isinstance(bound, BoundOptions) and isinstance(bound.prior, torch.Tensor) and bound.threshold is None
    prior_file.unlink()  # bound: the file is never read again
    assert bound.for_model(predictor) is bound
    assert predictor.predict(names, bound) == predictor.predict(names, top_k=2, prior="uniform")
    with_sets = PredictOptions(coverage=0.9).for_model(predictor)
    assert with_sets.threshold == predictor.threshold_for(0.9)
    estimated = predictor.answer(names * 6, PredictOptions(prior="estimate"))  # EM takes 100 names at least
    assert estimated.estimated_prior.shape == (len(predictor.labels),)
    assert float(estimated.estimated_prior.sum()) == pytest.approx(1.0, abs=1e-5)
    assert predictor.answer(names, PredictOptions()).estimated_prior is None


def within(answers: list[dict], labels: list[str], full, key: str) -> None:
    """Each answer ranks only `labels`, with the full answer's probabilities renormalized over them."""
    for answer, everything in zip(answers, full, strict=True):
        probability = dict(everything.predictions)
        total = sum(probability[label] for label in labels)
        got = [(entry[key], entry["probability"]) for entry in answer["predictions"]]
        assert {label for label, _ in got} == set(labels)
        assert all(abs(p - probability[label] / total) < 2e-6 for label, p in got)


@pytest.mark.slow
def test_the_labels_option_reaches_the_command_tables_frames_and_ray(restricted, tmp_path):
    import json

    import pandas as pd
    import pyarrow as pa
    from conftest import ROOT, run_in_process

    from nameorigin.serving.frame import predict_frame
    from nameorigin.serving.ray_data import NameScorer
    from nameorigin.serving.table import predict_table

    path, predictor, labels, names, full = restricted
    key = predictor.label_name
    command = run_in_process([str(ROOT / "scripts" / "predict.py"), str(path), *names,
                              "--labels", ",".join(labels), "--no-abstain", "--format", "json"], cwd=tmp_path)
    assert command.returncode == 0, command.stderr
    within(json.loads(command.stdout), labels, full, key)  # top-k 3 asked, two labels allowed: two ranked

    table = tmp_path / "people.csv"
    pd.DataFrame({"surname": names}).to_csv(table, index=False)
    predict_table(predictor, table, "surname", tmp_path / "out.csv", top_k=2, labels=labels, abstain=False)
    frame = predict_frame(pd.DataFrame({"surname": names}), "surname", predictor,
                          PredictOptions(top_k=2, labels=tuple(labels), abstain=False))
    batch = NameScorer(str(path), "surname", top_k=2, labels=labels, abstain=False)(
        pa.table({"surname": names}))
    for scored in (pd.read_csv(tmp_path / "out.csv"), frame, batch.to_pandas()):
        rows = [{"predictions": [{key: row[f"pred_{key}"], "probability": row["pred_probability"]},
                                 {key: row[f"pred_{key}_2"], "probability": row["pred_probability_2"]}]}
                for _, row in scored.iterrows()]
        within(rows, labels, full, key)


def test_the_labels_option_refuses_what_it_cannot_answer():
    assert PredictOptions(labels="Japanese, Korean").labels == ("Japanese", "Korean")
    for settings, message in [({"labels": " , "}, "labels is empty"),
                              ({"labels": ["Japanese"], "coverage": 0.9}, "drop one of them"),
                              ({"labels": [3]}, "labels must be a list of the model's labels")]:
        with pytest.raises(UserError, match=message):
            PredictOptions(**settings)


def test_precision_bf16_keeps_the_answers_and_only_a_checkpoints_loop_takes_it(restricted, tmp_path):
    """bf16 takes the recurrent products in bfloat16: the probabilities move (it ran), by little, the labels stay;
    an exported program cannot carry it and says so in one line."""
    import torch

    from nameorigin.cli.export import export
    from nameorigin.serving.predict import Predictor

    path, predictor, _, names, full = restricted
    low = predictor.predict(names, top_k=len(predictor.labels), abstain=False, precision="bf16")
    gaps = [abs(p - dict(b.predictions)[label]) for a, b in zip(low, full, strict=True) for label, p in a.predictions]
    assert 0 < max(gaps) < 0.01
    assert [a.predictions[0][0] for a in low] == [b.predictions[0][0] for b in full]
    assert predictor.net.product_dtype is None  # set for the call only
    encoded = predictor.encode_many(names)[:2]
    assert torch.equal(predictor.probabilities(encoded), predictor.probabilities(encoded, precision="float32"))
    export(path, out=tmp_path / "model", formats="onnx")
    exported = Predictor.load(tmp_path / "model.onnx")
    with pytest.raises(UserError, match="precision bf16 runs in the checkpoint's own single-layer loop"):
        exported.predict(names[:2], precision="bf16")
