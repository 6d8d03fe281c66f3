"""scripts/predict.py --file TABLE --column C: every row back, in order, with its columns, whatever the cells hold."""

from __future__ import annotations

import csv
import io
import random
from pathlib import Path

import pytest
from conftest import ROOT, run_in_process

PREDICT = str(ROOT / "scripts" / "predict.py")


@pytest.fixture(scope="module")
def checkpoint(trained) -> Path:
    return trained[0] / "checkpoints" / "refit.ckpt"


def hostile_table(path: Path, rows: int = 10_000, seed: int = 0) -> list[list[str]]:
    """id, surname, note: 5 % of surnames blank, whitespace-only or 10,000 characters; notes with commas,
    quotes and newlines."""
    rng = random.Random(seed)
    bad = ["", "   ", "\t", "x" * 10_000]
    table = [["id", "surname", "note"]]
    for i in range(rows):
        surname = rng.choice(bad) if rng.random() < 0.05 else rng.choice(["Kanemoto", "Pavlovsky", "O'Donagh",
                                                                           "Rinelli, Jr.", 'Said "the" Name'])
        table.append([str(i), surname, rng.choice(["", "a, b", 'say "hi"', "two\nlines", "ünïcode"])])
    with open(path, "w", encoding="utf-8-sig", newline="") as f:  # a BOM, as Excel writes it
        csv.writer(f).writerows(table)
    return table


def test_ten_thousand_hostile_rows_come_back_in_order_with_every_column(checkpoint, tmp_path):
    source, out = tmp_path / "people.csv", tmp_path / "out.csv"
    table = hostile_table(source)
    result = run_in_process([PREDICT, str(checkpoint), "--file", str(source), "--column", "surname", "--out", str(out),
                         "--top-k", "2", "--coverage", "0.9"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    with open(out, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    assert header[:3] == ["id", "surname", "note"]
    assert header[3:] == ["pred_language", "pred_probability", "pred_language_2", "pred_probability_2",
                          "pred_set_90", "pred_abstained", "pred_reason_code", "pred_reason"]
    assert len(body) == 10_000
    assert [row[:3] for row in body] == table[1:]  # same order, original cells untouched
    for row in body:
        usable = row[1].strip() and len(row[1]) < 100
        assert bool(row[3]) == bool(usable), row[:2] + row[3:]
        if usable:  # answered, abstaining or not (a name out of the model's depth still gets its scores)
            assert row[7].split("|")[0] == row[3] and 0 < float(row[4]) <= 1
            assert (row[8] == "true") == bool(row[10]) and row[10].startswith(("", "unlike", "its prediction"))
        else:
            assert row[8] == "true" and row[9] == "unusable_input" and row[10], row[:2] + row[3:]
    reasons = {row[10] for row in body if row[10] and not row[3]}
    assert reasons == {"no usable character after normalization", "longer than 64 characters: not one name"}


def test_tsv_in_tsv_out_and_missing_markers_explained(checkpoint, tmp_path):
    source = tmp_path / "people.tsv"
    source.write_text("surname\tcity\nKanemoto\tOsaka\nNaN\tRome\n\tParis\nPavlovsky\n", encoding="utf-8")
    result = run_in_process([PREDICT, str(checkpoint), "--file", str(source), "--column", "surname"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = list(csv.reader(io.StringIO(result.stdout), delimiter="\t"))
    assert [row[:2] for row in rows] == [["surname", "city"], ["Kanemoto", "Osaka"], ["NaN", "Rome"], ["", "Paris"],
                                         ["Pavlovsky", ""]]  # the short last row is padded, not shifted
    assert rows[1][2] and rows[2][4:] == ["true", "unusable_input", "missing-value marker 'NaN'"] and rows[3][6]
    assert rows[4][2]


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["--column", "name"], "--column name is not a column of"),
    (["--column", "surname", "--coverage", "0.85"], "coverage 0.85 is not a level stored"),
])
def test_bad_table_requests_exit_2_and_write_no_file(checkpoint, tmp_path, args, message):
    source, out = tmp_path / "people.csv", tmp_path / "out.csv"
    source.write_text("surname\nKanemoto\n")
    result = run_in_process([PREDICT, str(checkpoint), "--file", str(source), "--out", str(out), *args], cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == [source]  # neither the output nor a temporary file is left


def test_non_utf8_table_is_one_line_error(checkpoint, tmp_path):
    source = tmp_path / "latin1.csv"
    source.write_bytes("surname\nM\xfcller\n".encode("latin-1"))
    result = run_in_process([PREDICT, str(checkpoint), "--file", str(source), "--column", "surname"], cwd=tmp_path)
    assert result.returncode == 2 and "is not UTF-8" in result.stderr and "Traceback" not in result.stderr
