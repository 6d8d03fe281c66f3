"""`nameorigin audit`: planted label errors are found, the suspects are written as a table, and `data.exclude`
leaves exactly those rows out of training while validation and test keep theirs."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import sys

import numpy as np
import pytest
from conftest import ROOT, write_corpus

from nameorigin.base.errors import UserError
from nameorigin.cli.app import main as nameorigin
from nameorigin.data.corpus import read_corpus

pytest.importorskip("cleanlab")


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A corpus whose languages end alike (-moto, -ovsky, -agh, -elli), with 12 names moved to another language's
    file: the errors a confident learner must find."""
    folder = write_corpus(tmp_path_factory.mktemp("audit") / "names", per_language=150)
    moved = []
    for source, target in (("Japanese", "Irish"), ("Russian", "Italian"), ("Italian", "Japanese")):
        lines = (folder / f"{source}.txt").read_text().splitlines()
        taken, kept = lines[20:24], lines[:20] + lines[24:]  # past the first five, which the file repeats
        (folder / f"{source}.txt").write_text("\n".join(kept) + "\n")
        with (folder / f"{target}.txt").open("a") as f:
            f.write("\n".join(taken) + "\n")
        moved += [(name, target) for name in taken]
    return folder, set(moved)


@pytest.fixture(scope="module")
def audited(planted, tmp_path_factory) -> tuple:
    """One audit of the planted corpus, to CSV: what it wrote and what it said."""
    folder, _ = planted
    out = tmp_path_factory.mktemp("suspects") / "suspects.csv"
    said = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(said):
        # A CSV is written through the format registry: without pyarrow, which the [audit] extra does not bring.
        patch.setitem(sys.modules, "pyarrow", None)
        # The default threshold is the real corpus' (18 labels); four labels and 600 names put the moved ones lower.
        assert nameorigin(["audit", str(folder), "--out", str(out), "--threshold", "0.2"]) == 0
    return out, said.getvalue()


def test_the_audit_finds_the_moved_names_and_writes_them_ranked(planted, audited):
    folder, moved = planted
    out, said = audited
    assert "look mislabelled" in said and f"wrote {out}" in said
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["row", "name", "given_label", "suggested_label", "given_label_probability"]
    found = {(row["name"], row["given_label"]) for row in rows}
    assert len(found & moved) >= 0.9 * len(moved) and len(found - moved) <= len(moved)
    probabilities = [float(row["given_label_probability"]) for row in rows]
    assert probabilities == sorted(probabilities)  # most doubtful first
    pairs = read_corpus(folder)[0]
    assert all(pairs[int(row["row"])] == (row["name"], row["given_label"]) for row in rows)


def test_excluded_rows_leave_training_only(planted, audited, tmp_path):
    from nameorigin.base.tables import write_table
    from nameorigin.data.names import NamesDataModule

    folder, _ = planted
    with open(audited[0], newline="") as f:  # the suspects again, as Parquet: any table format is read
        rows = [[int(r["row"]), r["name"], r["given_label"], r["suggested_label"], float(r["given_label_probability"])]
                for r in csv.DictReader(f)]
    out = tmp_path / "suspects.parquet"
    write_table(out, ["row", "name", "given_label", "suggested_label", "given_label_probability"],
                [int, str, str, str, float], rows, "--out")
    plain, without = NamesDataModule(root=str(folder)), NamesDataModule(root=str(folder), exclude=str(out))
    plain.setup()
    without.setup()
    assert without.splits["val"] == plain.splits["val"] and without.splits["test"] == plain.splits["test"]
    import pyarrow.parquet as pq

    listed = {(row["name"], row["given_label"]) for row in pq.read_table(out).to_pylist()}
    assert without.splits["train"] == [pair for pair in plain.splits["train"] if pair not in listed]
    left_out = len(plain.splits["train"]) - len(without.splits["train"])
    assert left_out > 0 and without.excluded == left_out and without.state_dict()["excluded"] == left_out


def test_refusals_are_one_line(tmp_path, monkeypatch, capsys):
    from nameorigin.data.surnames import SurnamesDataModule

    with pytest.raises(UserError, match="data.exclude leaves rows of a labelled table out of training"):
        SurnamesDataModule(exclude="suspects.csv")
    with pytest.raises(SystemExit) as refused:
        nameorigin(["audit", "--out", str(tmp_path / "suspects.xlsx")])
    assert refused.value.code == 2 and "unknown table suffix '.xlsx': end the name in .csv" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "cleanlab.filter", None)  # as if the [audit] extra were not installed
    with pytest.raises(SystemExit) as refused:
        nameorigin(["audit", "--out", str(tmp_path / "suspects.csv")])
    said = capsys.readouterr().err
    assert refused.value.code == 2 and "audit" in said and said.count("\n") == 1


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".parquet"])
def test_a_table_made_from_scratch_is_written_in_the_format_its_suffix_names(tmp_path, suffix):
    from nameorigin.base.tables import TableReader, write_table

    out = tmp_path / f"made{suffix}"
    write_table(out, ["row", "name", "p"], [int, str, float], [[0, "Nakamura", 0.25], [7, "O'Neill, Jr", None]],
                "--out")
    reader = TableReader(out, "--file")
    assert reader.header == ["row", "name", "p"]
    (chunk,) = list(reader.chunks())
    assert [str(cell) for cell in chunk.cells("name")] == ["Nakamura", "O'Neill, Jr"]
    if suffix == ".jsonl":  # typed: numbers stay numbers, an empty cell is null
        assert [json.loads(line) for line in out.read_text().splitlines()][1] == {"row": 7, "name": "O'Neill, Jr",
                                                                                 "p": None}


def test_every_cut_flags_the_moved_names_from_one_fit_and_an_unknown_cut_is_refused(planted, tmp_path, capsys):
    """The cuts that read how many rows to flag from the table itself (cleanlab's estimate and filters) flag moved
    names without a threshold picked for this corpus (fewer than the threshold finds: they count fewer issues on
    600 names); each returns the rows most doubtful first."""
    from nameorigin.analysis.audit import CUTS, audit

    folder, moved = planted
    pairs = read_corpus(folder)[0]
    found = audit(pairs)
    given = found.given()
    quality = found.probabilities[np.arange(len(pairs)), given]
    for cut in ("estimate", "noise_rate", "confident"):
        rows = CUTS[cut](given, found.probabilities, 0.0)
        flagged = {pairs[row] for row in rows.tolist()}
        assert len(flagged & moved) >= 0.8 * len(flagged) and len(rows) <= 0.1 * len(pairs), (cut, len(rows))
        assert quality[rows].tolist() == sorted(quality[rows].tolist())
        assert len(flagged & moved) >= 0.4 * len(moved), (cut, len(flagged & moved))  # 5 of 12 at the writing
    assert len(CUTS["threshold"](given, found.probabilities, 0.0)) == 0
    with pytest.raises(SystemExit) as refused:
        nameorigin(["audit", str(folder), "--cut", "nope", "--out", str(tmp_path / "s.csv")])
    assert refused.value.code == 2 and "nope" in capsys.readouterr().err


def test_the_mixture_reads_the_relabelling_rate_and_its_kind_from_the_probabilities_alone():
    """Rows answered by a model that puts 0.95 on the true label, 0.03 on its look-alike (label k+1) and the rest
    evenly on the other six: 10 % of them relabelled at random, or to the look-alike. The fit reads which kind it was
    (a temperature cannot move the look-alike's mass without moving the others'), and flags about as many rows as
    were relabelled, the relabelled ones among them; on the rows as they were it flags none."""
    from nameorigin.analysis.relabelling import relabelling

    rng = np.random.default_rng(0)
    rows, labels = 5000, 8
    true = rng.integers(labels, size=rows)
    probabilities = np.full((rows, labels), 0.02 / (labels - 2), dtype=np.float32)
    probabilities[np.arange(rows), true] = 0.95
    probabilities[np.arange(rows), (true + 1) % labels] = 0.03
    moved = rng.choice(rows, size=rows // 10, replace=False)
    for kind, relabelled in (("at_random", (true[moved] + rng.integers(1, labels, size=len(moved))) % labels),
                             ("confused", (true[moved] + 1) % labels)):
        given = true.copy()
        given[moved] = relabelled
        mixture = relabelling(given, probabilities)
        found = mixture.suspects()
        other = "confused" if kind == "at_random" else "at_random"
        assert getattr(mixture, kind) >= 0.04 and getattr(mixture, other) <= 0.01, (mixture.at_random, mixture.confused)
        assert len(set(found) & set(moved)) >= 0.9 * len(moved) and len(found) <= 1.2 * len(moved), (kind, len(found))
        assert np.all(np.diff(mixture.fixable[found]) <= 0)  # most doubtful first
    clean = relabelling(true, probabilities)
    assert clean.at_random + clean.confused < 0.01 and len(clean.suspects()) == 0


def test_the_default_cut_follows_the_table_and_says_what_it_read(tmp_path):
    """A tenth of 600 names moved to another language's file: the default (the mixture) flags moved names and no
    others, with no threshold picked for this corpus, and the summary names the model, the cut and the estimated
    share. It is cautious on so small a table: twenty -moto names among Irish ones teach the model that some are
    Irish, and at the planted fixture's 2 % its doubt on the moved names is the doubt it shows on its own mistakes
    (it reads no relabelling there)."""
    from nameorigin.analysis.audit import audit

    folder = write_corpus(tmp_path / "names", per_language=150)
    moved = set()
    for source, target in (("Japanese", "Irish"), ("Russian", "Italian"), ("Italian", "Japanese")):
        lines = (folder / f"{source}.txt").read_text().splitlines()
        taken, kept = lines[20:40], lines[:20] + lines[40:]
        (folder / f"{source}.txt").write_text("\n".join(kept) + "\n")
        with (folder / f"{target}.txt").open("a") as f:
            f.write("\n".join(taken) + "\n")
        moved |= {(name, target) for name in taken}
    pairs = read_corpus(folder)[0]
    found = audit(pairs, folds=3)  # three fits where five take longer and read the same
    flagged = {pairs[row] for row in found.suspects.tolist()}
    assert len(flagged & moved) >= 0.25 * len(moved) and len(flagged - moved) <= 2, (len(flagged & moved), len(flagged))
    summary = found.summary()
    assert "(model ngram, cut mixture, " in summary and "estimated relabelled" in summary


@pytest.mark.slow
def test_the_network_answers_out_of_sample_and_finds_the_moved_names(planted, tmp_path, capsys):
    """--model network: train.py's model trained on each fold's other rows (in process, logger=none) answers the
    held-out ones; the moved names are the most doubtful rows, and each fold says what it cost."""
    folder, moved = planted
    out = tmp_path / "suspects.csv"
    assert nameorigin(["audit", str(folder), "--out", str(out), "--model", "network", "--folds", "2",
                       "--threshold", "0.2", "--config-dir", str(ROOT / "conf"),
                       "--train-override", "transfer.use=never"]) == 0
    said = capsys.readouterr().err
    assert [line.split(":")[0] for line in said.splitlines() if line.startswith("fold ")] == ["fold 1/2", "fold 2/2"]
    with open(out, newline="") as f:
        found = {(row["name"], row["given_label"]) for row in csv.DictReader(f)}
    assert len(found & moved) >= 0.75 * len(moved) and len(found - moved) <= len(moved), (len(found & moved),
                                                                                          len(found))


def test_the_network_option_refuses_what_it_cannot_use_in_one_line(planted, tmp_path, capsys):
    folder, _ = planted
    out = tmp_path / "suspects.csv"
    for args, message in (
            (["--train-override", "trainer.max_epochs=1"], "apply to --model network only"),
            (["--model", "network", "--config-dir", str(tmp_path)], "train.yaml does not exist"),
            (["--model", "network", "--config-dir", str(ROOT / "conf"), "--train-override", "nosuch.key=1"],
             "--train-override")):
        with pytest.raises(SystemExit) as refused:
            nameorigin(["audit", str(folder), "--out", str(out), *args])
        said = capsys.readouterr().err
        assert refused.value.code == 2 and message in said and said.count("\n") == 1, said
    assert not out.exists()


@pytest.mark.slow
def test_the_planted_flips_benchmark_reads_any_table_at_every_seed_and_the_scale_benchmark_runs_the_command(
        tmp_path, capsys):
    from benchmarks import audit_check, audit_scale

    folder = write_corpus(tmp_path / "names", per_language=75)  # 300 names: each fit takes half the planted's time
    table = tmp_path / "table.csv"
    with table.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([("person", "origin"), *read_corpus(folder)[0]])
    assert audit_check.main(["--table", str(table), "--name-column", "person", "--label-column", "origin",
                             "--seed", "1", "2", "--kind", "uniform", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert [(r["seed"], r["kind"], r["model"]) for r in results] == [(1, "uniform", "ngram"), (2, "uniform", "ngram")]
    rows = len(read_corpus(folder)[0])
    for result in results:
        assert result["rows"] == rows and result["flipped"] == int(0.05 * rows)
        assert set(result["cuts"]) == {"mixture", "threshold", "estimate", "noise_rate", "confident", "planted_count"}
        assert result["cuts"]["estimate"]["recall"] >= 0.5  # four endings: flips are plain to see
        assert result["recipe"]["f1"] > 0.3 and result["recipe"]["flagged"] > 0  # the yardstick ran on these flips
    assert audit_scale.main(["--table", str(table), "--name-column", "person", "--label-column", "origin"]) == 0
    cost = json.loads(capsys.readouterr().out)
    assert cost["exit"] == 0 and cost["peak_rss_gb"] > 0 and "look mislabelled" in cost["said"]


def test_a_fold_trains_the_network_only_on_labels_it_can_split():
    from nameorigin.analysis.crossfit import MIN_NAMES, trainable

    rare = [(f"Rare{i}", "Mozambican") for i in range(MIN_NAMES - 2)] + [("O'Neill", "Mozambican"),
                                                                        ("Oneill", "Mozambican")]
    common = [(f"Name{i}", "Irish") for i in range(MIN_NAMES)]
    assert trainable(rare + common) == common  # O'Neill and Oneill are one name: MIN_NAMES - 1 in all
    assert trainable([*rare, ("Another", "Mozambican"), *common]) == [*rare, ("Another", "Mozambican"), *common]
