"""PredictOptions, the one statement of what a prediction takes: its own refusals name the option, the command's
flags and the server's request fields are read off it (so neither can drift from it), and keywords and the
dataclass give the same options."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from nameorigin.base.errors import UserError
from nameorigin.cli.flags import options_from
from nameorigin.cli.predict import parse_args
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
])
def test_each_refusal_names_the_option(settings, message):
    with pytest.raises(UserError, match=None) as refused:
        PredictOptions(**settings)
    assert message in str(refused.value) and "--" not in str(refused.value)


def test_options_are_frozen_and_say_what_they_change():
    options = PredictOptions(top_k=2, coverage=0.9)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.top_k = 5
    assert options.changed() == ["top_k", "coverage"] and PredictOptions().changed() == []
    assert TABLE_OPTIONS.top_k == 1


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
    assert set(PredictRequest.model_fields) == {"names", *fields}
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


def test_the_commands_flags_are_made_from_the_options():
    args = parse_args(["model.ckpt", "Nakamura", "--top-k", "2", "--coverage", "0.9", "--no-abstain",
                       "--max-set-size", "3", "--batch-size", "64"])
    assert options_from(args) == PredictOptions(top_k=2, coverage=0.9, abstain=False, max_set_size=3,
                                                batch_size=64)
    assert options_from(parse_args(["model.ckpt", "Nakamura"])) == PredictOptions()  # three labels for names
    assert options_from(parse_args(["model.ckpt", "Nakamura"]), top_k=1) == TABLE_OPTIONS


def test_every_option_has_a_flag_with_its_help(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    shown = "".join(capsys.readouterr().out.split())  # argparse wraps lines, at hyphens too
    for field in option_fields():
        flag = field.metadata["flag"] or "--" + field.name.replace("_", "-")
        assert flag in shown and "".join(field.metadata["help"].split()) in shown
