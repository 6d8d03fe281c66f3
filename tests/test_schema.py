"""One prediction schema (nameorigin.serving.schema): text, JSON, the names CSV, tables and frames carry every field,
with the same values; a field added to the schema reaches all of them with no other change."""

from __future__ import annotations

import csv
import io
import json

import pandas as pd
import pytest

from nameorigin.cli.predict import main as predict_main
from nameorigin.serving import schema
from nameorigin.serving.frame import predict_frame
from nameorigin.serving.predict import Predictor
from nameorigin.serving.schema import FIELDS, OutputField, OutputOptions, fields_for
from nameorigin.serving.table import predict_table

NAMES = ["Bokamoto", "Sakovsky", "Zzqx", "12"]


def every_output(checkpoint, tmp_path, capsys, *options: str, top_k: int = 2, coverage: float | None = 0.9,
                 explain: bool = True) -> dict:
    """The same names through each output path; each answer keyed by name."""
    flags = ["--top-k", str(top_k), *(["--coverage", str(coverage)] if coverage else []),
             *(["--explain"] if explain else []), *options]
    names = tmp_path / "names.txt"
    names.write_text("\n".join(NAMES) + "\n")
    outputs = {}
    for fmt in ("json", "csv", "text"):
        assert predict_main([str(checkpoint), *NAMES, "--format", fmt, *flags]) == 0
        outputs[fmt] = capsys.readouterr().out
    table = tmp_path / "people.csv"
    table.write_text("surname\n" + "\n".join(NAMES) + "\n")
    written = io.StringIO()
    predictor = Predictor.load(checkpoint)
    predict_table(predictor, table, "surname", written, top_k=top_k, coverage=coverage, explain=explain)
    outputs["table"] = list(csv.DictReader(io.StringIO(written.getvalue())))
    outputs["frame"] = predict_frame(pd.DataFrame({"surname": NAMES}), "surname", predictor, top_k=top_k,
                                     coverage=coverage, explain=explain)
    return outputs


def check_every_field(outputs: dict, shape: OutputOptions, answers: list) -> None:
    as_json = {row["name"]: row for row in json.loads(outputs["json"])}
    as_csv = {row["name"]: row for row in csv.DictReader(io.StringIO(outputs["csv"]))}
    for answer, row, (_, frame_row) in zip(answers, outputs["table"], outputs["frame"].iterrows(), strict=True):
        for field in fields_for(shape):
            value = field.read(answer)
            cell = "" if value is None else field.cell(value)
            column = field.column_name(shape)
            assert row[column] == cell, (field.key, answer.name)
            assert as_csv[answer.name][field.key] == cell, (field.key, answer.name)
            expected = value if field.kind is not str else cell
            if field.kind is float:
                assert frame_row[column] == pytest.approx(float(value)), field.key
            elif field.kind is bool:
                assert frame_row[column] == value, field.key
            else:
                assert frame_row[column] == cell, field.key
            if value is None:
                assert field.key not in as_json[answer.name], field.key
            else:
                assert set(field.json(value)) <= set(as_json[answer.name]), field.key
                if field.as_json is None:
                    assert as_json[answer.name][field.key] == expected, field.key
            text = field.text(field, value, answer, shape)
            if text is not None and answer.error is None:
                assert all(line.strip() in outputs["text"] for line in text.splitlines()), field.key


def test_every_output_carries_every_field_with_the_same_values(trained, tmp_path, capsys):
    run, _, _ = trained
    checkpoint = run / "checkpoints" / "refit.ckpt"
    outputs = every_output(checkpoint, tmp_path, capsys)
    predictor = Predictor.load(checkpoint)
    shape = OutputOptions(2, 0.9, True, predictor.label_name, predictor.normalize)
    answers = predictor.predict(NAMES, top_k=2, coverage=0.9, explain=True)
    assert {field.key for field in fields_for(shape)} == {field.key for field in FIELDS}  # all asked for
    assert any(a.abstained for a in answers) and any(not a.abstained for a in answers)
    check_every_field(outputs, shape, answers)


def test_a_field_added_to_the_schema_reaches_every_output(trained, tmp_path, capsys, monkeypatch):
    run, _, _ = trained
    checkpoint = run / "checkpoints" / "refit.ckpt"
    added = OutputField("name_length", float, lambda p: float(len(p.name)))
    monkeypatch.setattr(schema, "FIELDS", [*FIELDS, added])
    outputs = every_output(checkpoint, tmp_path, capsys, coverage=None, explain=False)
    assert [row["name_length"] for row in json.loads(outputs["json"])] == [8.0, 8.0, 4.0, 2.0]
    assert [row["pred_name_length"] for row in outputs["table"]] == ["8.0", "8.0", "4.0", "2.0"]
    assert outputs["frame"]["pred_name_length"].tolist() == [8.0, 8.0, 4.0, 2.0]
    assert {row["name_length"] for row in csv.DictReader(io.StringIO(outputs["csv"]))} == {"8.0", "4.0", "2.0"}
    assert "name_length: 8.0" in outputs["text"]
    predictor = Predictor.load(checkpoint)
    shape = OutputOptions(2, None, False, predictor.label_name, predictor.normalize)
    check_every_field(outputs, shape, predictor.predict(NAMES, top_k=2))
