"""Tables at scale (data=table): share columns as soft targets, a weight column in the training loss, rows skipped
and counted or refused with their line, Parquet read like CSV, the vectorized encoder, the scale report and the
first-name -> gender conversion."""

from __future__ import annotations

import csv
import gzip
import json
import pickle
from pathlib import Path

import pytest
import torch
from conftest import NAMEORIGIN, ROOT, TINY, last_scalars, run_dirs, run_in_process, run_script, train
from hypothesis import given, settings
from hypothesis import strategies as st

from nameorigin.base.errors import UserError
from nameorigin.base.textnorm import build_vocab, encode, encode_names
from nameorigin.config import ModelConfig, TableDataConfig
from nameorigin.data.batching import Batch
from nameorigin.data.table import TableDataModule, read_table
from nameorigin.fit.module import NameClassifier
from nameorigin.model.calibration import fit_temperature


def write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])
    return path


def test_share_columns_are_pooled_normalized_and_scored_under_the_majority_label(tmp_path):
    path = write_csv(tmp_path / "people.csv", ["name", "M", "F", "count"], [
        ["Maria", 2, 98, 10],       # counts: any scale
        ["Jordan", 0.7, 0.3, 1],
        ["Jordan", 0.1, 0.9, 3],    # pooled with the row above, weighted: (0.7 + 3 * 0.1) / 4 = 0.25 M
        ["Alex", "", 1, 2],         # a blank share is 0
        ["Kim", 0.5, 0.5, 1],       # a tie goes to the first label in alphabetical order (F)
        ["Zero", 0, 0, 5],          # shares summing to 0: skipped and counted
        ["Nobody", 1, 0, 0],        # weight 0: skipped and counted
        ["", 1, 0, 1],              # blank name
    ])
    table = read_table(TableDataConfig(path=str(path), share_columns=["M", "F"], weight_column="count"))
    assert table.labels == ["F", "M"]
    assert table.pairs == [("Alex", "F"), ("Jordan", "F"), ("Kim", "F"), ("Maria", "F")]
    torch.testing.assert_close(torch.from_numpy(table.shares),
                               torch.tensor([[1.0, 0.0], [0.75, 0.25], [0.5, 0.5], [0.98, 0.02]]))
    assert table.weights.tolist() == [2, 4, 1, 10]
    assert table.counts == {"rows": 8, "blank_name": 1, "long_name": 0, "zero_shares": 1, "zero_weight": 1}
    unweighted = read_table(TableDataConfig(path=str(path), share_columns=["F", "M"]))
    assert unweighted.weights is None and unweighted.counts["rows"] == 8
    assert unweighted.shares[1].tolist() == pytest.approx([0.6, 0.4])  # Jordan's two rows averaged
    assert unweighted.digest != table.digest  # the settings that decide what was read are in the sha256


def test_a_weight_column_adds_up_over_the_rows_of_one_pair(tmp_path):
    path = write_csv(tmp_path / "people.csv", ["name", "label", "n"], [
        ["Garcia", "hispanic", 5], ["Garcia", "hispanic", 7], ["Garcia", "white", 1], ["Lee", "asian;white", 2]])
    table = read_table(TableDataConfig(path=str(path), weight_column="n"))
    assert table.pairs == [("Garcia", "hispanic"), ("Garcia", "white"), ("Lee", "asian"), ("Lee", "white")]
    assert table.weights.tolist() == [12, 1, 2, 2] and table.shares is None


@pytest.mark.parametrize(("cell", "column", "message"), [
    ("heavy", "F", "data.share_columns=['F', 'M']: F on line 3 of"),
    ("-0.5", "F", "data.share_columns=['F', 'M']: F on line 3 of"),
    ("inf", "M", "data.share_columns=['F', 'M']: M on line 3 of"),
    ("many", "count", "data.weight_column=count on line 3 of"),
    ("-2", "count", "data.weight_column=count on line 3 of"),
    ("", "count", "data.weight_column=count is blank on line 3 of"),
])
def test_a_share_or_weight_that_is_not_a_number_at_least_0_is_refused_with_its_line(tmp_path, cell, column, message):
    header = ["name", "F", "M", "count"]
    bad = ["Robin", "0.5", "0.5", "3"]
    bad[header.index(column)] = cell
    path = write_csv(tmp_path / "people.csv", header, [["Maria", 1, 0, 1], bad])
    with pytest.raises(UserError, match="^" + message.replace("[", r"\[").replace("]", r"\]")):
        read_table(TableDataConfig(path=str(path), share_columns=["F", "M"], weight_column="count"))


@pytest.mark.parametrize(("settings", "message"), [
    ({"share_columns": ["F"]}, "must name two or more distinct columns"),
    ({"share_columns": ["F", "F"]}, "must name two or more distinct columns"),
    ({"share_columns": ["name", "F"]}, "holds name, the name or weight column"),
    ({"share_columns": ["F", "M"], "weight_column": "M"}, "holds M, the name or weight column"),
])
def test_share_column_settings_that_cannot_work_are_refused_before_reading(tmp_path, settings, message):
    with pytest.raises(UserError, match=message):
        TableDataConfig(path=str(tmp_path / "never_read.csv"), **settings)


def test_a_weight_counts_a_name_that_many_times_in_the_training_loss():
    torch.manual_seed(0)
    module = NameClassifier(ModelConfig(hidden_size=8, embedding_dim=4, soft_targets=True, label_smoothing=0.0),
                            ["<pad>", "<unk>", "a"], ["F", "M"])
    logits, shares = torch.randn(3, 2), torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]])
    tokens, lengths = torch.ones(3, 1, dtype=torch.long), torch.ones(3, dtype=torch.long)
    weighted = module.loss(logits, Batch(tokens, lengths, shares.argmax(1), shares, torch.tensor([2.0, 1.0, 0.5])))
    rows = [0, 0, 0, 0, 1, 1, 2]  # weights 2, 1 and 0.5 as row counts: 4, 2 and 1, up to the factor 2
    repeated = module.loss(logits[rows], Batch(tokens[rows], lengths[rows], shares.argmax(1)[rows], shares[rows]))
    torch.testing.assert_close(weighted, repeated)
    expected = -(shares * logits.log_softmax(-1)).sum(1).mean()  # soft targets: cross-entropy against the shares
    torch.testing.assert_close(module.loss(logits, Batch(tokens, lengths, shares.argmax(1), shares)), expected)


def test_a_parquet_table_reads_like_the_same_csv(tmp_path):
    pa = pytest.importorskip("pyarrow")  # the [parquet] extra, which make install includes
    import pyarrow.parquet as pq

    rows = [["Maria", 98.0, 2.0, 10], ["Jordan", 0.3, 0.7, 1], ["Zero", 0.0, 0.0, 5], ["Alex", None, 1.0, 2]]
    csv_path = write_csv(tmp_path / "people.csv", ["name", "F", "M", "count"],
                         [["" if v is None else v for v in row] for row in rows])
    columns = {"other": ["x"] * 4, "count": [r[3] for r in rows], "M": [r[2] for r in rows],  # not the CSV's order
               "name": [r[0] for r in rows], "F": [r[1] for r in rows]}
    pq.write_table(pa.table(columns), tmp_path / "people.parquet")
    config = {"share_columns": ["F", "M"], "weight_column": "count"}
    from_csv = read_table(TableDataConfig(path=str(csv_path), **config))
    from_parquet = read_table(TableDataConfig(path=str(tmp_path / "people.parquet"), **config))
    assert from_parquet.pairs == from_csv.pairs and from_parquet.counts == from_csv.counts
    assert from_parquet.shares.tolist() == from_csv.shares.tolist()
    assert from_parquet.weights.tolist() == from_csv.weights.tolist()
    with pytest.raises(UserError, match="data.weight_column=weight is not a column of .*: its columns are other, "):
        read_table(TableDataConfig(path=str(tmp_path / "people.parquet"), share_columns=["F", "M"],
                                   weight_column="weight"))
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    with pytest.raises(UserError, match="is not a readable Parquet file"):
        read_table(TableDataConfig(path=str(tmp_path / "broken.parquet"), share_columns=["F", "M"]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="abcXYZ' -\u00e9\u65e5\x00", min_size=1, max_size=12), min_size=1, max_size=40),
       st.integers(1, 7))
def test_the_vectorized_encoder_equals_encoding_name_by_name(names, chunk):
    vocab = build_vocab(names[: max(1, len(names) // 2)])
    char_to_index = {c: i for i, c in enumerate(vocab)}
    tokens, lengths = encode_names(names, char_to_index, chunk=chunk)
    assert lengths.tolist() == [len(name) for name in names]
    for row, name in enumerate(names):
        assert tokens[row].tolist() == encode(name, char_to_index) + [0] * (tokens.shape[1] - len(name))


def gender_table(path: Path) -> Path:
    """Made-up first names: -a mostly women, -o mostly men, counts per row, and rows to skip."""
    rows = []
    for i in range(60):
        stem = "".join("bdfgklmnprstv"[(i * 5 + k * 3) % 13] + "aeiu"[(i + k) % 4] for k in range(2 + i % 2))
        share = 0.8 + 0.19 * (i % 5) / 4
        rows.append([stem.capitalize() + "a", share, round(1 - share, 3), 1 + i % 7])
        rows.append([stem.capitalize() + "o", round(1 - share, 3), share, 1 + i % 3])
    rows += [["Nobody", 0, 0, 4], ["Nocount", 0.5, 0.5, 0]]
    return write_csv(path, ["first", "F", "M", "people"], rows)


@pytest.mark.slow
def test_a_share_table_with_weights_trains_calibrates_on_the_shares_and_evaluates(tmp_path):
    table = gender_table(tmp_path / "first.csv")
    result = train(tmp_path, "data=table", f"data.path={table}", "data.name_column=first",
                   "data.share_columns=[F,M]", "data.weight_column=people", "data.label_name=gender",
                   "model.label_smoothing=0", "refit.enabled=false", *TINY, "trainer.max_epochs=3")
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = run_dirs(tmp_path)
    manifest = json.loads((run / "split.json").read_text())
    assert manifest["rows"] == {"rows": 122, "blank_name": 0, "long_name": 0, "zero_shares": 1, "zero_weight": 1}
    checkpoint = torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)
    assert checkpoint["hyper_parameters"]["config"]["soft_targets"] is True  # null resolved by the data
    assert checkpoint["data"]["share_columns"] == ["F", "M"] and checkpoint["data"]["weight_column"] == "people"
    scalars = last_scalars(run / "tensorboard")
    for key in ("test/acc", "test/acc_weighted", "test/ece", "test/ece_shares", "test/coverage_90", "test/loss"):
        assert key in scalars, sorted(scalars)
    # Validation picks by the share of people right, as the margin scores it: last.ckpt's answers on the
    # validation names give the last figure logged.
    from nameorigin.evaluation.baselines import person_weighted_accuracy
    from nameorigin.serving.predict import Predictor

    assert "objective=val/person_acc" in (run / "train.log").read_text()
    data = TableDataModule(path=str(table), name_column="first", share_columns=["F", "M"], weight_column="people")
    data.setup()
    last, val = Predictor.from_checkpoint(run / "checkpoints" / "last.ckpt"), data.splits["val"]
    rows = [data.row_of[pair] for pair in val]
    answered = last.probabilities(last.encode_many([name for name, _ in val])[:2]).argmax(1).numpy()
    assert scalars["val/person_acc"] == pytest.approx(
        person_weighted_accuracy(data.table.shares[rows], data.table.weights[rows], answered), abs=1e-5)
    # The temperature minimizes the validation cross-entropy against the shares, not the majority labels.
    model = NameClassifier(**checkpoint["hyper_parameters"])
    model.load_state_dict(checkpoint["state_dict"])
    model.net.temperature.fill_(1.0)
    logits, targets, shares = model.collect_logits(data.whole_split_loader("val"))
    assert checkpoint["calibration"]["temperature"] == pytest.approx(fit_temperature(logits, shares), rel=1e-4)
    assert fit_temperature(logits, shares) != pytest.approx(fit_temperature(logits, targets), rel=1e-3)
    # The margin's baseline fits the same shares and weights, and is read first on the run's own metric: the
    # people-weighted accuracy, computed here from the served model's answers and the table's own shares.
    like = json.loads((run / "results.json").read_text())["margin"]["like_for_like"]
    predictor, test = Predictor.from_checkpoint(run / "checkpoints" / "best.ckpt"), data.splits["test"]
    tokens, lengths, _ = predictor.encode_many([name for name, _ in test])
    answered = predictor.probabilities((tokens, lengths)).argmax(1).numpy()
    rows = [data.row_of[pair] for pair in test]
    people, shares = data.table.weights[rows], data.table.shares[rows]
    assert like["model_person_acc"] == pytest.approx(
        (people * shares[range(len(rows)), answered]).sum() / people.sum(), abs=1e-6)
    assert like["weighted"] and like["setting"].startswith("penalty=") and 0 < like["baseline_person_acc"] < 1
    log = (run / "train.log").read_text()
    assert log.index("people-weighted test accuracy over the n-gram baseline fitted to the same shares") \
        < log.index("per name, majority label")
    card = (run / "MODEL_CARD.md").read_text()
    assert "against each name's majority gender" in card and "weighted in the training loss by `people`" in card
    evaluated = run_in_process([NAMEORIGIN, "evaluate", str(run / "checkpoints" / "best.ckpt"),
                            str(table)], cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert f"accuracy  {scalars['test/acc']:.4f}" in evaluated.stdout, evaluated.stdout


@pytest.mark.slow
def test_the_scale_report_reads_splits_and_encodes_a_table(tmp_path):
    # A process of its own: the peak RSS it reports is the whole process's, which in pytest's would be every test's.
    result = run_script(["-m", "benchmarks.table_scale", "--rows", "3000", "--mode", "shares",
                         "--out", str(tmp_path / "big.csv")], cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-2000:]
    lines = {line.split()[0]: line.split() for line in result.stdout.splitlines()[2:]}
    assert set(lines) == {"shares"}, result.stdout
    for cells in lines.values():
        assert int(cells[1].replace(",", "")) == 3000 and float(cells[-2]) < 1.0, result.stdout  # 0.46 here
        assert all(float(cell.replace(",", "")) > 0 for cell in cells[3:6])
    refused = run_script(["-m", "benchmarks.table_scale", "--rows", "3"], cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})
    assert refused.returncode == 2 and refused.stderr.strip() == "error: --rows 3: pass at least 10 rows"


def test_the_first_names_conversion_keeps_its_decisions_and_counts(tmp_path):
    raw = {"Maria": {"gender": {"F": 0.99, "M": 0.01}}, "María": {"gender": {"F": 0.95, "M": 0.05}},
           "Jordan": {"gender": {"M": 0.7, "F": 0.3}}, "Иван": {"gender": {"M": 1.0}}, "R2D2": {"gender": {"M": 1}},
           "Kim": {"gender": {}}, "Sasha": {"gender": {"F": 1.0}}}
    source = tmp_path / "first_names.pkl.gz"
    with gzip.open(source, "wb") as f:
        pickle.dump(raw, f)
    from nameorigin.data.first_names import convert_first_names

    meta = convert_first_names(tmp_path / "out" / "gender.csv", source)
    assert meta["counts"] == {"raw_names": 7, "dropped_other_script": 1, "dropped_other_characters": 1,
                              "dropped_no_gender": 1, "kept": 3, "merged_spellings": 1, "majority_F": 2,
                              "majority_M": 1, "one_gender_only": 1}
    rows = list(csv.reader((tmp_path / "out" / "gender.csv").read_text().splitlines()))
    assert rows == [["name", "F", "M"], ["Jordan", "0.3", "0.7"], ["Maria", "0.97", "0.03"], ["Sasha", "1", "0"]]
    assert json.loads((tmp_path / "out" / "gender.json").read_text())["counts"] == meta["counts"]
    sampled = convert_first_names(tmp_path / "out" / "two.csv", source, sample=2)
    assert sampled["counts"]["kept"] == 2 and sampled["counts"]["left_out_by_sample"] == 1
    two = list(csv.reader((tmp_path / "out" / "two.csv").read_text().splitlines()))[1:]
    assert len(two) == 2 and all(row in rows for row in two)


@pytest.mark.slow
def test_a_refitted_share_table_run_states_the_like_for_like_margin_on_its_shares(tmp_path):
    table = gender_table(tmp_path / "first.csv")
    result = train(tmp_path, "data=table", f"data.path={table}", "data.name_column=first",
                   "data.share_columns=[F,M]", "data.label_name=gender", *TINY)
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = run_dirs(tmp_path)
    like = json.loads((run / "results.json").read_text())["margin"]["like_for_like"]
    data = TableDataModule(path=str(table), name_column="first", share_columns=["F", "M"])
    data.setup()
    from nameorigin.serving.predict import Predictor

    predictor, test = Predictor.from_checkpoint(run / "checkpoints" / "refit.ckpt"), data.splits["test"]
    tokens, lengths, _ = predictor.encode_many([name for name, _ in test])
    answered = predictor.probabilities((tokens, lengths)).argmax(1).numpy()
    shares = data.table.shares[[data.row_of[pair] for pair in test]]
    assert not like["weighted"] and "names' shares-weighted" in result.stdout
    assert like["model_person_acc"] == pytest.approx(float(shares[range(len(test)), answered].mean()), abs=1e-6)


@pytest.mark.parametrize("refit", [False, True])
def test_the_hashed_share_baseline_picks_its_penalty_by_the_people_on_validation(tmp_path, refit):
    """A table past the LR's reach gets the hashed n-gram softmax as its like-for-like baseline: its penalty is the
    ladder's best by person-weighted validation accuracy, and it answers each test name with a distribution."""
    import numpy as np

    from nameorigin.evaluation.baselines import fit_share_baseline, person_weighted_accuracy
    from nameorigin.evaluation.like_for_like import fitted_targets
    from nameorigin.model.ngram_linear import penalties_for

    data = TableDataModule(path=str(gender_table(tmp_path / "first.csv")), name_column="first",
                           share_columns=["F", "M"], weight_column="people")
    data.setup()
    names = {split: [name for name, _ in pairs] for split, pairs in data.splits.items()}
    targets, weights = {}, {}
    for split in names:
        targets[split], weights[split] = fitted_targets(data, split)
    result = fit_share_baseline(names, targets, weights, hashed=True, refit=refit)
    penalty = float(result["setting"].removeprefix("penalty="))
    assert penalty in penalties_for(len(names["train"]))
    probabilities = result["test_probabilities"]
    assert probabilities.shape == targets["test"].shape and np.allclose(probabilities.sum(1), 1)
    assert 0.5 < result["val_person_acc"] <= 1
    assert person_weighted_accuracy(targets["test"], weights["test"], probabilities.argmax(1)) > 0.5
