"""JSON Lines, the format added as one module of the registry (nameorigin.base.formats.jsonl): it trains like the
same rows as a CSV, scores to and from every other format with the same answers, keeps its values' types, streams,
and refuses a bad line in one line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import ROOT, run_in_process, write_corpus
from test_table_data import folder_as_table

from nameorigin.base.formats import format_of
from nameorigin.base.formats.jsonl import CHUNK_ROWS, JsonLines
from nameorigin.base.tables import TableReader
from nameorigin.data.table import TableDataModule

PREDICT = str(ROOT / "scripts" / "predict.py")


def csv_as_jsonl(source: Path, path: Path, extra: dict | None = None) -> Path:
    with source.open(encoding="utf-8", newline="") as f, path.open("w", encoding="utf-8") as out:
        for row in csv.DictReader(f):
            out.write(json.dumps({**row, **(extra or {})}, ensure_ascii=False) + "\n")
    return path


def test_the_suffix_picks_the_format_and_a_table_trains_as_its_csv_does(tmp_path):
    assert format_of("people.jsonl") is JsonLines and format_of("people.ndjson") is JsonLines
    folder = write_corpus(tmp_path / "names")
    table = folder_as_table(folder, tmp_path / "names.csv")
    lines = csv_as_jsonl(table, tmp_path / "names.jsonl")
    by_csv = TableDataModule(path=str(table), name_column="surname", label_column="origin")
    by_lines = TableDataModule(path=str(lines), name_column="surname", label_column="origin")
    for datamodule in (by_csv, by_lines):
        datamodule.setup()
    assert by_lines.splits == by_csv.splits and by_lines.labels == by_csv.labels and by_lines.vocab == by_csv.vocab


def test_lines_stream_a_chunk_at_a_time(tmp_path):
    path = tmp_path / "many.jsonl"
    path.write_text("".join(json.dumps({"name": f"N{i}", "n": i}) + "\n" for i in range(2 * CHUNK_ROWS + 5)))
    chunks = list(TableReader(path, "--file").chunks())
    assert [len(chunk) for chunk in chunks] == [CHUNK_ROWS, CHUNK_ROWS, 5]
    assert chunks[2].cells("n") == [str(2 * CHUNK_ROWS + i) for i in range(5)] and chunks[0].where(0) == "line 1"


@pytest.mark.slow
def test_scored_lines_equal_the_csvs_answers_in_every_format(trained, tmp_path):
    checkpoint = trained[0] / "checkpoints" / "refit.ckpt"
    names = [line for file in sorted(trained[1].glob("*.txt")) for line in file.read_text().splitlines()[:8]]
    source = tmp_path / "people.csv"
    with source.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["id", "surname"], *([str(i), name] for i, name in enumerate(names)), ["x", ""]])
    lines = csv_as_jsonl(source, tmp_path / "people.jsonl", {"age": 40, "vip": True})
    outs = {}
    for fmt in ("csv", "jsonl", "parquet"):
        for given in (source, lines):
            out = tmp_path / f"from_{given.suffix[1:]}.{fmt}"
            result = run_in_process([PREDICT, str(checkpoint), "--file", str(given), "--column", "surname",
                                     "--out", str(out), "--top-k", "2"], cwd=tmp_path)
            assert result.returncode == 0, result.stderr
            outs[given.suffix, fmt] = out
    expected = list(csv.DictReader(outs[".csv", "csv"].open(encoding="utf-8", newline="")))
    written = [json.loads(line) for line in outs[".jsonl", "jsonl"].read_text(encoding="utf-8").splitlines()]
    assert len(written) == len(expected) == len(names) + 1
    for row, mine in zip(expected, written, strict=True):
        assert mine["id"] == row["id"] and mine["age"] == 40 and mine["vip"] is True  # the input's own values
        assert mine["pred_language"] == (row["pred_language"] or None)
        assert mine["pred_probability"] == (float(row["pred_probability"]) if row["pred_probability"] else None)
        assert mine["pred_abstained"] is (row["pred_abstained"] == "true")
    from_lines = list(csv.DictReader(outs[".jsonl", "csv"].open(encoding="utf-8", newline="")))
    assert [{k: v for k, v in row.items() if k not in ("age", "vip")} for row in from_lines] == expected
    assert pq.read_table(outs[".jsonl", "parquet"]).column("pred_language").to_pylist() == \
        pq.read_table(outs[".csv", "parquet"]).column("pred_language").to_pylist()
    assert [json.loads(line) for line in outs[".csv", "jsonl"].read_text().splitlines()][0]["id"] == "0"


@pytest.mark.parametrize(("content", "message"), [
    ('{"surname": "Nakamura"}\n{"surname": \n', "line 2 is not JSON"),
    ('{"surname": "Nakamura"}\n["Rossi"]\n', "line 2 is a list, not an object"),
    ('{"surname": "Nakamura"}\n{"surname": "Rossi", "age": 3}\n', "line 2 has age, which the first line has not"),
    ("", "has no header row"),
])
def test_a_bad_line_is_one_line_exit_2_and_no_file(trained, tmp_path, content, message):
    source, out = tmp_path / "bad.jsonl", tmp_path / "out.jsonl"
    source.write_text(content, encoding="utf-8")
    result = run_in_process([PREDICT, str(trained[0] / "checkpoints" / "refit.ckpt"), "--file", str(source),
                             "--column", "surname", "--out", str(out)], cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists() and not list(tmp_path.glob(".out*"))
