"""Training on a table of labelled names (data=table): the same corpus as the folder reader, one-line refusals
of bad tables, and a table of its own trained end to end and evaluated beside the n-gram baseline."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from conftest import NAMEORIGIN, ROOT, TINY, run_dirs, run_in_process, train, train_refused, write_corpus

from nameorigin.data.corpus import label_files
from nameorigin.data.names import NamesDataModule
from nameorigin.data.table import TableDataModule


def folder_as_table(folder: Path, path: Path) -> Path:
    """The folder corpus as one CSV, a row per file line (duplicates and all), name then language."""
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["surname", "origin"])
        for file in label_files(folder):
            writer.writerows([line, file.stem] for line in file.read_text(encoding="utf-8").splitlines())
    return path


def test_a_table_gives_the_folder_readers_corpus_split_vocabulary_and_batches(tmp_path):
    folder = write_corpus(tmp_path / "names")
    table = folder_as_table(folder, tmp_path / "names.csv")
    by_folder = NamesDataModule(root=str(folder), download=False)
    by_table = TableDataModule(path=str(table), name_column="surname", label_column="origin")
    for datamodule in (by_folder, by_table):
        datamodule.setup()
    assert by_table.splits == by_folder.splits and by_table.labels == by_folder.labels
    assert by_table.vocab == by_folder.vocab
    for ours, theirs in zip(by_table.train_dataloader(), by_folder.train_dataloader(), strict=True):
        assert ours.weights is None and theirs.weights is None
        assert all(torch.equal(a, b) for a, b in zip(ours[:4], theirs[:4], strict=True))
    assert by_table.row_counts["rows"] == sum(len(p.read_text().splitlines()) for p in label_files(folder))


def write_rows(path: Path, rows: list[list[str]], header: tuple[str, str] = ("name", "label")) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([list(header), *rows])
    return path


def own_table(path: Path) -> Path:
    """Not the tutorial corpus: made-up first names whose label is their ending's family, with full names,
    a BOM, quoting, several labels in one cell and rows to skip."""
    rows = []
    for label, ending in (("north", "sson"), ("south", "ez"), ("east", "enko")):
        for i in range(40):
            stem = "".join("bdfgklmnprstv"[(i * 7 + k * 3) % 13] + "aeiou"[(i + k) % 5] for k in range(2 + i % 2))
            rows.append([f"Ana {stem.capitalize()}{ending}", label])
    rows += [["Mixed Name", "north;south"], ["", "north"], ["Blank Label", ""], ["x" * 80, "east"]]
    with path.open("w", newline="", encoding="utf-8-sig") as f:
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows([["name", "label"], *rows])
    return path


@pytest.mark.slow
def test_a_table_of_its_own_trains_end_to_end_and_evaluates_beside_the_baseline(tmp_path):
    table = own_table(tmp_path / "people.csv")
    result = train(tmp_path, "data=table", f"data.path={table}", "data.label_name=origin", *TINY,
                   "trainer.max_epochs=4")
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = run_dirs(tmp_path)
    manifest = json.loads((run / "split.json").read_text())
    assert manifest["rows"] == {"rows": 124, "blank_name": 1, "long_name": 1, "blank_label": 1}
    assert manifest["labels"] == ["east", "north", "south"] and manifest["names_with_several_languages"] == 1
    checkpoint = torch.load(run / "checkpoints" / "refit.ckpt", weights_only=True)
    assert checkpoint["data"]["label_column"] == "label" and checkpoint["data"]["trained_on"] == "train+val"
    evaluated = run_in_process([NAMEORIGIN, "evaluate", str(run / "checkpoints" / "refit.ckpt"),
                                str(table), "--baseline", "lr"], cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert "test split:" in evaluated.stdout and "baseline" in evaluated.stdout.lower()
    # What a label is called follows data.label_name: the JSON key, the table column and the card.
    refit = str(run / "checkpoints" / "refit.ckpt")
    answered = run_in_process([str(ROOT / "scripts" / "predict.py"), refit, "Ana Bisson", "--format", "json"],
                              cwd=tmp_path)
    assert set(json.loads(answered.stdout)[0]["predictions"][0]) == {"origin", "probability"}, answered.stdout
    tabled = run_in_process([str(ROOT / "scripts" / "predict.py"), refit, "--file", str(table), "--column", "name"],
                        cwd=tmp_path)
    assert tabled.stdout.splitlines()[0].split(",")[2:4] == ["pred_origin", "pred_probability"], tabled.stdout[:300]
    card = (run / "MODEL_CARD.md").read_text()
    assert "name classifier (origin)" in card and "| origin | test names | precision | recall | F1 |" in card
    assert "tutorial" not in card.split("## Intended use")[1]
    other = write_rows(tmp_path / "other.csv", [["Ana Bob", "north"], ["Ana Eve", "south"]])
    refused = run_in_process([NAMEORIGIN, "evaluate", str(run / "checkpoints" / "refit.ckpt"),
                          str(other)], cwd=tmp_path)
    assert refused.returncode == 2 and "sha256 differs" in refused.stderr


def bad_tables(folder: Path) -> dict[str, tuple[Path, list[str], str]]:
    good = own_table(folder / "good.csv")
    bad_byte = folder / "bytes.csv"
    bad_byte.write_bytes(good.read_bytes().replace(b"Ana ", b"An\xff ", 1))
    one = write_rows(folder / "one.csv", [[f"Name{i}x", "north"] for i in range(30)])
    small = write_rows(folder / "small.csv", [*csv.reader(good.read_text(encoding="utf-8-sig").splitlines()[1:]),
                                              ["Lonely Name", "west"]])
    blank = write_rows(folder / "blank.csv", [["Ana", ""], ["Bob", " "]])
    shares = write_rows(folder / "shares.csv", [["Ana", "0.9", "0.1"], ["Bob", "most", "0.2"]], ("name", "F", "M"))
    return {
        "missing": (folder / "nope.csv", [], "data.path="),
        "column": (good, ["data.name_column=surname"], "data.name_column=surname is not a column of"),
        "blank": (blank, [], "data.label_column=label is blank on every row of"),
        "bytes": (bad_byte, [], "line 2 is not UTF-8"),
        "one label": (one, [], "holds one label (north): a classifier needs at least two"),
        "small": (small, [], "too few names to split label west (1 names)"),
        "shares": (shares, ["data.share_columns=[F,M]"], "data.share_columns=['F', 'M']: F on line 3 of"),
    }


@pytest.mark.slow
@pytest.mark.parametrize("case", ["missing", "column", "blank", "bytes", "one label", "small", "shares"])
def test_a_bad_table_is_one_line_exit_2_before_training(tmp_path, case):
    path, overrides, message = bad_tables(tmp_path)[case]
    result = train_refused(tmp_path, "data=table", f"data.path={path}", *TINY, *overrides)
    assert result.returncode == 2, result.stderr[-2000:]
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and not (tmp_path / "outputs").exists()
    if case == "column":
        assert "its columns are name, label" in result.stderr
