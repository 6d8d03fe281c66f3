"""`data.rows=people`: a table with one row per person, counted into each name's label shares and people as it
streams, trains exactly like the same counts written out as a share-and-weight table."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY, last_scalars, run_dirs, train, train_refused

from nameorigin.base.errors import UserError
from nameorigin.config import TableDataConfig
from nameorigin.data.table import read_table


def write_rows(path: Path, header: list[str], rows: list[list]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])
    return path


def people(path: Path) -> Path:
    """Made-up surnames: -ez mostly A, -ov mostly B, -ka mostly C, each name carried by 1-9 people."""
    rows = []
    for i in range(90):
        stem = "".join("bdfgklmnprstv"[(i * 7 + k * 3) % 13] + "aeiou"[(i + k) % 5] for k in range(2 + i % 2))
        ending, main, other = [("ez", "A", "B"), ("ov", "B", "C"), ("ka", "C", "A")][i % 3]
        carriers = 1 + i % 9
        rows += [[stem.capitalize() + ending, other if k == 0 and carriers > 3 else main] for k in range(carriers)]
    rows += [["", "A"], ["Nolabel", ""], ["x" * 80, "A"], ["Both", "A;B"], ["Both", "A"]]
    return write_rows(path, ["surname", "origin"], rows)


def as_share_table(path: Path, table) -> Path:
    """The counts a people table pools into, written out as share columns (people per label) and a weight."""
    amounts = table.shares.astype(np.float64) * table.weights[:, None]
    rows = [[name, *(round(float(a), 6) for a in amount), round(float(w), 6)]
            for (name, _), amount, w in zip(table.pairs, amounts, table.weights, strict=True)]
    return write_rows(path, ["surname", *table.labels, "people"], rows)


def test_people_rows_pool_into_shares_and_weights_with_each_skip_counted(tmp_path):
    table = read_table(TableDataConfig(path=str(people(tmp_path / "people.csv")), name_column="surname",
                                       label_column="origin", rows="people"))
    assert table.counts == {"rows": 455, "blank_name": 1, "long_name": 1, "blank_label": 1, "distinct_names": 91}
    assert table.labels == ["A", "B", "C"] and table.weights.sum() == 452
    row = {name: k for k, (name, _) in enumerate(table.pairs)}
    # "Both": one person under A and B (half to each) and one under A alone.
    assert table.weights[row["Both"]] == 2 and table.shares[row["Both"]].tolist() == [0.75, 0.25, 0.0]
    assert dict(table.pairs)["Both"] == "A"
    nine = next(k for k, (name, _) in enumerate(table.pairs) if table.weights[k] == 9 and name.endswith("ka"))
    assert table.shares[nine].tolist() == pytest.approx([1 / 9, 0, 8 / 9]) and table.pairs[nine][1] == "C"
    # The same counts as a share-and-weight table: the same names, labels, shares and weights.
    shares = read_table(TableDataConfig(path=str(as_share_table(tmp_path / "shares.csv", table)),
                                        name_column="surname", share_columns=["A", "B", "C"],
                                        weight_column="people"))
    assert shares.pairs == table.pairs and shares.labels == table.labels
    np.testing.assert_allclose(shares.shares, table.shares, atol=1e-7)
    np.testing.assert_allclose(shares.weights, table.weights, rtol=1e-9)


def test_a_parquet_people_table_counts_like_the_csv(tmp_path):
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    source = people(tmp_path / "people.csv")
    with open(source, encoding="utf-8") as f:
        header, *rows = list(csv.reader(f))
    pq.write_table(pa.table({column: [row[k] or None for row in rows] for k, column in enumerate(header)}),
                   tmp_path / "people.parquet", row_group_size=100)
    read = [read_table(TableDataConfig(path=str(path), name_column="surname", label_column="origin",
                                       rows="people")) for path in (source, tmp_path / "people.parquet")]
    assert read[0].pairs == read[1].pairs and read[0].counts == read[1].counts
    assert np.array_equal(read[0].shares, read[1].shares) and np.array_equal(read[0].weights, read[1].weights)


@pytest.mark.parametrize(("settings", "message"), [
    ({"rows": "persons"}, "data.rows=persons is not a kind of row: pass data.rows=names"),
    ({"rows": "people", "weight_column": "n"}, "data.rows=people counts every row as one person: drop "
                                               "data.weight_column"),
    ({"rows": "people", "share_columns": ["F", "M"]}, "data.rows=people reads one person's label from "
                                                      "data.label_column, not shares: drop data.share_columns"),
])
def test_people_rows_with_settings_that_contradict_them_are_refused(tmp_path, settings, message):
    with pytest.raises(UserError, match="^" + message.replace(".", r"\.").replace("(", r"\(")):
        TableDataConfig(path="people.csv", **settings)
    refused = train_refused(tmp_path, "data=table", "data.path=people.csv",
                            *(f"data.{key}={json.dumps(value).replace(' ', '')}".replace('"', "")
                              for key, value in settings.items()))
    assert refused.returncode == 2 and refused.stderr.startswith("error: " + message.split(":")[0]), refused.stderr
    assert not (tmp_path / "outputs").exists() or not run_dirs(tmp_path)


@pytest.mark.slow
def test_people_rows_train_the_same_model_as_their_counts_as_a_share_table(tmp_path):
    """One epoch from the people rows and one from the counts written out: every weight equal to 1e-6, the card
    says what a row is, and the test split reports accuracy over people beside accuracy over names."""
    source = people(tmp_path / "people.csv")
    table = read_table(TableDataConfig(path=str(source), name_column="surname", label_column="origin",
                                       rows="people"))
    shares = as_share_table(tmp_path / "shares.csv", table)
    common = ["data=table", "data.name_column=surname", "refit.enabled=false", "calibration.enabled=false",
              *TINY, "trainer.max_epochs=1"]
    runs = {}
    for kind, settings in {"people": [f"data.path={source}", "data.label_column=origin", "data.rows=people"],
                           "shares": [f"data.path={shares}", "data.share_columns=[A,B,C]",
                                      "data.weight_column=people"]}.items():
        (tmp_path / kind).mkdir()
        result = train(tmp_path / kind, *common, *settings)
        assert result.returncode == 0, result.stderr[-3000:]
        (runs[kind],) = run_dirs(tmp_path / kind)
    weights = {kind: torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
               for kind, run in runs.items()}
    assert weights["people"].keys() == weights["shares"].keys()
    for key, value in weights["people"].items():
        torch.testing.assert_close(value, weights["shares"][key], atol=1e-6, rtol=0, msg=key)
    manifest = json.loads((runs["people"] / "split.json").read_text())
    assert manifest["rows"]["rows"] == 455 and manifest["rows"]["distinct_names"] == 91
    assert manifest["columns"]["rows"] == "people"
    scalars = last_scalars(runs["people"] / "tensorboard")
    assert "test/acc" in scalars and "test/acc_weighted" in scalars
    card = (runs["people"] / "MODEL_CARD.md").read_text()
    assert "a row per person" in card and "over people (each name counted once per row)" in card, card
