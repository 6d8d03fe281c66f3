"""Given and family names as parts: tables with two name columns (data.name_columns), full names split by
nameparser (data.split_full_name), a model that reads a boundary between the parts, and every entry point taking a
name as its parts. The trained models come from a tiny table whose label is decided by the given name while the
family name comes last, drawn with every label's ending, so the final characters carry no signal."""

from __future__ import annotations

import csv
import json
import random

import pytest
import torch
from conftest import NAMEORIGIN, last_scalars, run_in_process, stem, train_refused, write_parts_table

from nameorigin.base.errors import UserError
from nameorigin.base.parts import BOUNDARY, join_parts, parse_full_name, parts_of
from nameorigin.base.textnorm import variant_key
from nameorigin.data.corpus import split_by_name
from nameorigin.model.ngram import ngram_ids
from nameorigin.serving.predict import Predictor


def test_parts_join_split_and_refuse_the_wrong_count():
    assert join_parts([" Mary  Ann ", "O|Neill"]) == "Mary Ann|O Neill"
    assert join_parts(["", " "]) == "" and join_parts(["", "Madonna"]) == "|Madonna"
    assert parts_of("Ana|Silva", ["given", "family"]) == ["Ana", "Silva"]
    assert parts_of("Silva, Ana", ["given", "family"], full_names=True) == ["Ana", "Silva"]
    assert parts_of("Nakamura", None) is None
    for value, expected, message in [(["a", "b"], None, "reads a name as one string"),
                                     (["a", "b", "c"], ["given", "family"], "has 3 parts, but this model reads 2"),
                                     ("Ana Silva", ["first", "middle", "last"], "is one string"),
                                     ("Silva", ["given", "family"], "say it is a full name")]:
        with pytest.raises(UserError, match=message):
            parts_of(value, expected)
    parsed = parse_full_name("Dr. María José García López Jr.")
    assert (parsed.given, parsed.family, parsed.unsplit) == ("María José García", "López", False)
    assert parse_full_name("Madonna").unsplit and parse_full_name("Lincoln, Abraham").comma


def test_a_persons_parts_in_either_order_fall_in_one_split_and_different_people_stay_apart():
    assert variant_key("John|Smith") == variant_key("Smith|John") == variant_key("john|SMITH")
    assert variant_key("John|Smith") != variant_key("John|Smyth") != variant_key("JohnSmith")
    rng = random.Random(1)
    people = [(f"{stem(rng).capitalize()}x", f"{stem(rng).capitalize()}y") for _ in range(300)]
    pairs = sorted({(f"{given}{BOUNDARY}{family}", str(k % 3)) for k, (given, family) in enumerate(people)} |
                   {(f"{family}{BOUNDARY}{given}", str(k % 3)) for k, (given, family) in enumerate(people)})
    splits = split_by_name(pairs, [0.8, 0.1, 0.1], seed=0)
    where = {name: split for split, held in splits.items() for name, _ in held}
    assert all(where[f"{g}|{f}"] == where[f"{f}|{g}"] for g, f in people)
    assert len({split for split in where.values()}) == 3  # not all merged into one


def test_no_ngram_crosses_the_boundary_and_one_part_hashes_as_before():
    vocab = {c: i for i, c in enumerate(["<pad>", "<unk>", BOUNDARY, *"abcdef"])}
    tokens = torch.tensor([[vocab[c] for c in "abc|def"], [vocab[c] for c in "abcdef"] + [0]])
    lengths = torch.tensor([7, 6])
    ids, real = ngram_ids(tokens, lengths, len(vocab), 4, 1 << 20, tokens == vocab[BOUNDARY])
    plain_ids, plain_real = ngram_ids(tokens, lengths, len(vocab), 4, 1 << 20)
    framed = ["^", *"abc|def", "$", "", "", "", ""]
    windows = tokens.shape[1] + 2
    grams = [("".join(framed[start : start + n]), n) for n in range(1, 5) for start in range(windows)]
    kept = [gram for (gram, n), ok in zip(grams, real[0].tolist(), strict=True) if ok]
    assert "abc|" in kept and "|def" in kept and "c|" in kept
    assert not [gram for gram in kept if BOUNDARY in gram[1:-1]], kept  # a boundary only at a window's edge
    assert torch.equal(ids[1], plain_ids[1]) and torch.equal(real[1], plain_real[1])  # no boundary: as before
    given_c = grams.index(("c", 1))
    family_d = grams.index(("d", 1))
    assert ids[0, given_c] == plain_ids[0, given_c] and ids[0, family_d] != plain_ids[0, family_d]


def test_the_known_name_lookup_reads_the_family_part():
    from nameorigin.config import TransferShape
    from nameorigin.model.transfer_layers import TransferLayers

    vocab = ["<pad>", "<unk>", BOUNDARY, *"JSaehimnot"]
    index = {c: i for i, c in enumerate(vocab)}
    parts = TransferLayers(TransferShape(known_names=1, known_countries=3), len(vocab), 8, 4, 4)
    parts.known.fill(vocab, ["Smith"], torch.tensor([[1] + [255] * 9]), torch.tensor([[1.0] + [0.0] * 9]))

    def evidence(name: str, boundaries: bool) -> torch.Tensor:
        tokens = torch.tensor([[index[c] for c in name]])
        return parts.evidence(tokens, torch.tensor([len(name)]), tokens == index[BOUNDARY] if boundaries else None)

    assert torch.equal(evidence("John|Smith", True), evidence("Smith", False))
    assert not torch.equal(evidence("John|Smith", False), evidence("Smith", False))  # the whole string: not found


def test_name_parts_settings_that_cannot_work_are_one_line_exit_2(tmp_path):
    table = write_parts_table(tmp_path / "people.csv", per_label=5)
    for settings, message in [(["data.name_columns=[given]"], "must name two or more distinct columns"),
                              (["data.name_columns=[given,family]", "data.split_full_name=true"],
                               "splits the one column data.name_column"),
                              (["data.name_columns=[given,family]", "data.join_parts=glue"], "data.join_parts=glue"),
                              (["data.name_columns=[given,surname]"], "data.name_columns=['given', 'surname']: "
                                                                      "surname")]:
        refused = train_refused(tmp_path, "data=table", f"data.path={table}", "data.label_column=origin", *settings)
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr[-600:]
        assert "Traceback" not in refused.stderr


def test_full_names_are_split_by_nameparser_and_its_misreadings_counted(tmp_path):
    from nameorigin.config import TableDataConfig
    from nameorigin.data.table import read_table

    path = tmp_path / "full.csv"
    path.write_text("name,label\nAna Silva,pt\n\"Silva, Ana\",pt\nDr. Jan van der Berg Jr.,nl\nMadonna,us\n",
                    encoding="utf-8")
    table = read_table(TableDataConfig(path=str(path), split_full_name=True))
    assert [name for name, _ in table.pairs] == ["Ana|Silva", "Jan|van der Berg", "Madonna|"]
    assert table.counts["split_one_part"] == 1 and table.counts["split_comma"] == 1


@pytest.mark.slow
def test_parts_model_learns_the_given_part_as_well_as_the_glued_string_and_explains_by_part(parts_runs,
                                                                                          parts_model):
    accuracy = {join: json.loads((parts_runs[join] / "results.json").read_text())["metrics"]["val/acc_best"]
                for join in ("boundary", "space")}
    assert accuracy["boundary"] >= accuracy["space"] and accuracy["boundary"] >= 0.9, accuracy
    split = json.loads((parts_runs["boundary"] / "split.json").read_text())
    assert split["splits"] == json.loads((parts_runs["space"] / "split.json").read_text())["splits"]  # one split
    checkpoint = torch.load(parts_model, weights_only=True)
    assert checkpoint["hyper_parameters"]["config"]["name_parts"] == {"names": ["given", "family"],
                                                                      "join": "boundary"}
    residuals = {tag: value for tag, value in last_scalars(parts_runs["boundary"] / "tensorboard").items()
                 if tag.endswith("/residual")}
    assert residuals and max(residuals.values()) < 1e-5, residuals  # the gradient check, on names of parts
    predictor = Predictor.load(parts_model)
    test = [name.split(BOUNDARY) for name, _ in split["splits"]["test"]]
    explained = [p.explanation for p in predictor.predict(test, explain=True)]
    given_first = [why.by_name_part[0] > why.by_name_part[1] for why in explained]
    assert sum(given_first) >= 0.8 * len(given_first), [why.by_name_part for why in explained]
    assert explained[0].as_dict()["explanation_by_name_part"].keys() == {"given", "family"}


@pytest.mark.slow
def test_two_columns_a_full_name_and_family_first_give_the_same_answers(parts_model, parts_runs, tmp_path):
    from nameorigin.serving.table import predict_table

    predictor = Predictor.load(parts_model)
    with parts_runs["table"].open(encoding="utf-8") as f:
        rows = [row for row in csv.DictReader(f)][:60]
    kept = [row for row in rows if [parse_full_name(f"{row['given']} {row['family']}").given,
                                    parse_full_name(f"{row['given']} {row['family']}").family]
            == [row["given"], row["family"]]]
    assert len(kept) >= 50
    forms = [[[row["given"], row["family"]] for row in kept], [f"{row['given']} {row['family']}" for row in kept],
             [f"{row['family']}, {row['given']}" for row in kept]]
    answers = [predictor.answer(form, top_k=4, full_names=True).top_probability for form in forms]
    for other in answers[1:]:
        assert abs(other - answers[0]).max() < 1e-6
    two, one = tmp_path / "two.csv", tmp_path / "one.csv"
    with two.open("w", newline="") as f:
        csv.writer(f).writerows([["given", "family"], *[[row["given"], row["family"]] for row in kept]])
    with one.open("w", newline="") as f:
        csv.writer(f).writerows([["full"], *[[f"{row['family']}, {row['given']}"] for row in kept]])
    predict_table(predictor, two, ["given", "family"], tmp_path / "two_out.csv")
    with pytest.raises(UserError, match="--column full: this model reads a name as 2 parts .* --full-names"):
        predict_table(predictor, one, "full", tmp_path / "refused.csv")  # surnames alone would be misread
    assert not (tmp_path / "refused.csv").exists()
    predict_table(predictor, one, "full", tmp_path / "one_out.csv", full_names=True)
    read = [list(csv.DictReader((tmp_path / name).open())) for name in ("two_out.csv", "one_out.csv")]
    assert [abs(float(a["pred_probability"]) - float(b["pred_probability"])) < 1e-6
            for a, b in zip(*read, strict=True)] == [True] * len(kept)


@pytest.mark.slow
def test_every_entry_point_takes_parts_and_refuses_the_wrong_count(parts_model, parts_runs, trained, tmp_path):
    import pandas as pd

    from nameorigin.analysis.composition import frame_composition, table_composition
    from nameorigin.serving.frame import predict_frame
    from nameorigin.serving.ray_data import NameScorer

    table = parts_runs["table"]
    frame = pd.read_csv(table).head(40)
    predictor = Predictor.load(parts_model)
    reference = predictor.answer(frame[["given", "family"]].values.tolist()).top_probability[:, 0]
    framed = predict_frame(frame, ["given", "family"], predictor)
    assert abs(framed["pred_probability"].to_numpy() - reference).max() < 1e-6
    import pyarrow as pa

    scored = NameScorer(str(parts_model), ["given", "family"])(pa.Table.from_pandas(frame, preserve_index=False))
    assert abs(scored.column("pred_probability").to_numpy() - reference).max() < 1e-6
    found = table_composition(predictor, str(table), ["given", "family"]).as_dict()
    assert found["rows"] == 280 and found["unusable"] == 0 and abs(sum(found["estimates"]["mean"]) - 1) < 1e-6
    assert frame_composition(frame, ["given", "family"], predictor).as_dict()["rows"] == 40
    with pytest.raises(UserError, match="--column family: this model reads a name as 2 parts"):
        table_composition(predictor, str(table), "family")  # surnames alone, unless the caller says full names
    read = table_composition(predictor, str(table), "family", full_names=True).as_dict()
    assert read["rows"] + read["abstained"] + read["unusable"] == 280
    subset = tmp_path / "people.csv"
    frame.to_csv(subset, index=False)
    out = tmp_path / "scored.csv"
    done = run_in_process([NAMEORIGIN, "predict", str(parts_model), "--file", str(subset), "--column", "given",
                           "--column", "family", "--out", str(out)], tmp_path)
    assert done.returncode == 0, done.stderr[-800:]
    assert abs(pd.read_csv(out)["pred_probability"].to_numpy() - reference).max() < 1e-6
    one_string = str(trained[0] / "checkpoints" / "refit.ckpt")
    for model, columns, message in [(str(parts_model), ["given", "family", "origin"], "reads a name as 2 parts"),
                                    (one_string, ["given", "family"], "reads a name as one string")]:
        refused = run_in_process([NAMEORIGIN, "predict", model, "--file", str(subset),
                                  *[flag for column in columns for flag in ("--column", column)]], tmp_path)
        assert refused.returncode == 2 and message in refused.stderr and len(refused.stderr.splitlines()) == 1, \
            refused.stderr
    refused = run_in_process([NAMEORIGIN, "predict", str(parts_model), "a|b|c"], tmp_path)
    assert refused.returncode == 2 and "has 3 parts" in refused.stderr
    # One column of a two-part model is a column of full names only when the caller says so.
    for flags, code in [([], 2), (["--full-names"], 0)]:
        done = run_in_process([NAMEORIGIN, "predict", str(parts_model), "--file", str(subset), "--column", "family",
                               "--out", str(tmp_path / "family.csv"), *flags], tmp_path)
        assert done.returncode == code, done.stderr
        assert code == 0 or (len(done.stderr.splitlines()) == 1 and "--full-names" in done.stderr)
    refused = run_in_process([NAMEORIGIN, "predict", str(parts_model), "Kambo"], tmp_path)
    assert refused.returncode == 2 and "'Kambo' is one string" in refused.stderr


@pytest.mark.slow
def test_an_onnx_export_of_a_parts_model_answers_as_its_checkpoint(parts_model, tmp_path):
    pytest.importorskip("onnxruntime")
    from nameorigin.serving.export import export_model

    predictor = Predictor.load(parts_model)
    export_model(predictor, tmp_path / "model", ("onnx",))
    exported = Predictor.load(tmp_path / "model.onnx")
    assert exported.part_names == ["given", "family"]
    names = [["Tamoto", "Bazelli"], "Ravsky Kagh", ["", "Bomoto"]]
    assert abs(exported.answer(names, top_k=3, full_names=True).top_probability
               - predictor.answer(names, top_k=3, full_names=True).top_probability).max() < 1e-5


@pytest.mark.slow
def test_the_server_takes_parts_and_its_openapi_document_types_them(parts_model):
    pytest.importorskip("litserve")
    from test_serve import get, post

    from benchmarks.serve_load import free_port, start_server, stop_server

    port = free_port()
    server = start_server(str(parts_model), port, [])
    try:
        base = f"http://127.0.0.1:{port}"
        status, refused = post(base, {"names": [["Tamoto", "Bazelli"], "Tamoto Bazelli"]}, None)
        assert status == 422 and "full_names" in refused["detail"]
        status, answer = post(base, {"names": [["Tamoto", "Bazelli"], "Tamoto Bazelli", "Bazelli, Tamoto"],
                                     "full_names": True}, None)
        assert status == 200, answer
        first, *others = [a["predictions"][0]["probability"] for a in answer["predictions"]]
        assert all(abs(first - other) < 1e-6 for other in others)
        status, refused = post(base, {"names": [["a", "b", "c"]]}, None)
        assert status == 422 and "has 3 parts" in refused["detail"]
        _, text, _ = get(base, "/openapi.json")
        items = json.loads(text)["components"]["schemas"]["PredictRequest"]["properties"]["names"]["items"]
        listed = [kind for kind in items["anyOf"] if kind["type"] == "array"][0]
        assert [part["title"] for part in listed["prefixItems"]] == ["given", "family"]
        _, text, _ = get(base, "/info")
        assert json.loads(text)["model"]["name_parts"] == ["given", "family"]
    finally:
        stop_server(server)
