"""Population tables (nameorigin.serving.table, nameorigin.base.tables): Parquet in and out, each distinct name
scored once with the same answers as scoring every row, the count-weighted prior estimate, one reader for
training and serving, and one-line refusals that leave no file."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ROOT

from nameorigin.base.errors import UserError
from nameorigin.base.formats.delimited import delimiter_for
from nameorigin.base.tables import TableReader
from nameorigin.cli.predict import main as predict_main
from nameorigin.serving.predict import Predictor
from nameorigin.serving.table import predict_table


@pytest.fixture(scope="module")
def checkpoint(trained) -> Path:
    return trained[0] / "checkpoints" / "refit.ckpt"


def zipf_people(corpus: Path, rows: int, seed: int = 0) -> list[str | None]:
    """`rows` surnames drawn by Zipf weights from the tiny corpus and made-up spellings, as a population table
    holds them: most rows share a few names; some cells blank, null, a marker, padded or too long."""
    rng = np.random.default_rng(seed)
    known = sorted({line for path in corpus.glob("*.txt") for line in path.read_text().splitlines()})
    pool = known + [name + suffix for name in known for suffix in ("ski", "ez", "a")] + \
        ["", "  ", "NaN", "NULL", " Kanemoto ", "Kanémoto", "x" * 80, "12", "Zzqx"]
    weights = np.arange(1, len(pool) + 1, dtype=float) ** -1.1
    picks = rng.choice(len(pool), size=rows, p=weights / weights.sum())
    cells: list[str | None] = [pool[i] for i in picks]
    for i in rng.choice(rows, size=rows // 500, replace=False):
        cells[i] = None
    return cells


def write_parquet(path: Path, cells: list, **extra) -> Path:
    pq.write_table(pa.table({"id": np.arange(len(cells)), "surname": pa.array(cells, pa.string()), **extra}),
                   path, row_group_size=50_000)
    return path


def test_a_columns_keys_made_by_pyarrow_are_the_keys_of_each_cell():
    """The vectorized keying (ASCII trimmed by pyarrow, the rest by normalize_name) gives cell_key of every cell:
    white space Python strips that pyarrow's default would not, markers only as written, nulls, accents."""
    from nameorigin.serving.distinct import cell_key, tagged_keys, untag

    cells = ["Smith", " Smith ", "\x1cSmith\x1f", "\tO'Neill\n", "NaN", " NaN", "nan", "NULL", None, "", "  ",
             "Kanémoto", " Kanémoto\u00a0", "\ufeffBom", "李", "Ünal", "Zzqx", "x" * 80]
    for normalize in ("ascii", "none"):
        for markers in (True, False):
            keys = untag(tagged_keys(pa.array(cells, pa.string()), normalize, markers).to_pylist())
            assert keys == [cell_key(cell, normalize, markers) for cell in cells], (normalize, markers)


@pytest.mark.slow
def test_each_distinct_name_scored_once_gives_every_rows_answers(checkpoint, trained, tmp_path):
    """200,000 rows, Parquet in and out: labels, sets and abstentions equal, probabilities within 1e-6."""
    cells = zipf_people(trained[1], 200_000)
    source = write_parquet(tmp_path / "people.parquet", cells)
    predictor = Predictor.load(checkpoint)
    outs = {}
    for distinct in (True, False):
        outs[distinct] = tmp_path / f"scored_{distinct}.parquet"
        summary = predict_table(predictor, source, "surname", outs[distinct], top_k=2, coverage=0.9,
                                distinct=distinct)
        assert summary.rows == 200_000
        if distinct:
            assert 0 < summary.names < 1000 and summary.unusable > 400  # blanks, nulls, markers, too long
    grouped, every = (pq.read_table(outs[d]) for d in (True, False))
    assert grouped.schema == every.schema and grouped.num_rows == 200_000
    assert grouped.column("id").to_pylist() == list(range(200_000))  # every row, in order
    assert grouped.column("surname").to_pylist() == cells  # untouched, nulls too
    for name in grouped.column_names[2:]:
        ours, theirs = grouped.column(name).to_numpy(zero_copy_only=False), every.column(name).to_numpy(
            zero_copy_only=False)
        if name.startswith("pred_probability"):
            np.testing.assert_allclose(ours, theirs, atol=1.000001e-6, rtol=0)
        else:
            assert (ours == theirs).all(), name
    assert grouped.schema.field("pred_probability").type == pa.float64()
    assert grouped.schema.field("pred_abstained").type == pa.bool_()
    # The Parquet answers are the CSV's, typed; a marker and a null keep their rows with the unusable reason.
    text = tmp_path / "scored.csv"
    predict_table(predictor, source, "surname", text, top_k=2, coverage=0.9)
    with open(text, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    table = grouped.to_pylist()
    for i in [*range(0, 200_000, 9973), cells.index("NaN"), cells.index(None)]:
        assert rows[i]["pred_language"] == (table[i]["pred_language"] or "")
        assert rows[i]["pred_abstained"] == str(table[i]["pred_abstained"]).lower()
        assert rows[i]["pred_reason"] == table[i]["pred_reason"]
    assert table[cells.index("NaN")]["pred_reason"] == "missing-value marker 'NaN'"
    assert table[cells.index(None)]["pred_reason_code"] == "unusable_input"


def test_estimated_prior_weighs_each_name_by_its_rows(checkpoint, trained, tmp_path):
    cells = zipf_people(trained[1], 20_000, seed=1)
    source = write_parquet(tmp_path / "people.parquet", cells)
    priors = {}
    for distinct in (True, False):
        summary = predict_table(Predictor.load(checkpoint), source, "surname", tmp_path / f"out_{distinct}.csv",
                                distinct=distinct, prior="estimate", abstain=False)
        priors[distinct] = summary.estimated_prior
    np.testing.assert_allclose(priors[True].numpy(), priors[False].numpy(), atol=1e-6)
    # Not the mix of the distinct names counted once each: the weights matter on a Zipf table.
    once_each = Predictor.load(checkpoint).estimate_prior(sorted({c.strip() for c in cells if c and c.strip()
                                                                  and len(c) < 64}))
    assert np.abs(once_each.numpy() - priors[True].numpy()).max() > 0.01


def test_command_reads_parquet_writes_tsv_and_says_how_many_names_it_scored(checkpoint, tmp_path, capsys):
    source = write_parquet(tmp_path / "people.parquet", ["Kanemoto", "Kanemoto", None, "Pavlovsky", "NaN"],
                           city=pa.array(["Osaka", "Kobe", "Rome", "Kyiv", None]))
    out = tmp_path / "scored.tsv"
    assert predict_main([str(checkpoint), "--file", str(source), "--column", "surname", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"scored 2 distinct names for 5 rows (2 rows without a usable name) -> {out}"), err
    rows = list(csv.reader(io.StringIO(out.read_text(encoding="utf-8")), delimiter="\t"))
    assert [row[:3] for row in rows] == [["id", "surname", "city"], ["0", "Kanemoto", "Osaka"],
                                         ["1", "Kanemoto", "Kobe"], ["2", "", "Rome"], ["3", "Pavlovsky", "Kyiv"],
                                         ["4", "NaN", ""]]
    assert rows[1][3:] == rows[2][3:] and rows[1][3] and not rows[3][3] and rows[5][-1] == "missing-value marker 'NaN'"


def test_an_empty_parquet_table_is_written_with_its_columns(checkpoint, tmp_path):
    source = write_parquet(tmp_path / "empty.parquet", [])
    summary = predict_table(Predictor.load(checkpoint), source, "surname", tmp_path / "out.parquet")
    written = pq.read_table(tmp_path / "out.parquet")
    assert summary.rows == 0 and written.num_rows == 0
    assert written.column_names == ["id", "surname", "pred_language", "pred_probability", "pred_abstained",
                                    "pred_reason_code", "pred_reason"]


@pytest.mark.parametrize("make, args, message", [
    (lambda d: write_parquet(d / "people.parquet", [], surname_id=pa.array([], pa.int64())),
     ["--column", "surname_id", "--out", "out.parquet"], "--column surname_id in people.parquet holds int64, not text"),
    (lambda d: write_parquet(d / "people.parquet", ["Kanemoto"]), ["--column", "surname", "--out", "people.parquet"],
     "--out people.parquet is the input table"),
    (lambda d: write_parquet(d / "people.parquet", ["Kanemoto"]), ["--column", "surname", "--out", "out.xlsx"],
     "--out out.xlsx: unknown table suffix '.xlsx'"),
    (lambda d: (d / "people.parquet").write_bytes(b"PAR1 not really"), ["--column", "surname", "--out", "o.csv"],
     "is not a readable Parquet file"),
])
def test_bad_table_output_is_one_line_exit_2_and_no_file(checkpoint, tmp_path, monkeypatch, capsys, make, args,
                                                         message):
    make(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.iterdir())
    with pytest.raises(SystemExit) as stop:
        predict_main([str(checkpoint), "--file", "people.parquet", *args])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert sorted(tmp_path.iterdir()) == before  # nothing half-written, the input untouched


def test_one_reader_one_delimiter_rule_and_one_name_length():
    assert delimiter_for("a.tsv") == delimiter_for("a.csv", "tab") == delimiter_for("a.csv", "\\t") == "\t"
    assert delimiter_for("a.TAB") == "\t" and delimiter_for("a.csv") == "," and delimiter_for("a.tsv", ";") == ";"
    pattern = re.compile(r"^ *[A-Z_]*(LENGTH|STEPS) *= *[0-9]")
    found = [f"{path.relative_to(ROOT)}:{line}" for path in sorted((ROOT / "src").rglob("*.py"))
             for line in path.read_text().splitlines() if pattern.match(line)]
    assert found == ["src/nameorigin/base/textnorm.py:MAX_NAME_LENGTH = 64"]


def test_reader_streams_text_in_chunks_with_line_numbers(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('\ufeffname,note\nA,"two\nlines"\nB\n' + "".join(f"N{i},x\n" for i in range(10)), encoding="utf-8")
    reader = TableReader(path, "--file")
    chunks = list(reader.chunks(rows=4))
    assert reader.header == ["name", "note"] and [len(c) for c in chunks] == [4, 4, 4]
    assert chunks[0].cells("note")[:2] == ["two\nlines", ""]  # the short row padded
    assert [chunks[0].where(k) for k in range(3)] == ["line 3", "line 4", "line 5"]
    with pytest.raises(UserError, match="--file .*t.csv has no header row"):
        (tmp_path / "t.csv").write_text("")
        TableReader(path, "--file")
