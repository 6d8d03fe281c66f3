"""The docs' measured figures are generated from docs/results (cog, benchmarks.figures): a changed result file
changes every page that quotes it, a hand-edited figure fails `cog --check` (what `make lint` runs), and no
quantity appears with two figures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import ROOT

cogapp = pytest.importorskip("cogapp")


def pages(root: Path) -> list[str]:
    return [str(root / "README.md"), *sorted(str(page) for page in (root / "docs").glob("*.md"))]


def cog(root: Path, *flags: str) -> int:
    return cogapp.Cog().main(["cog", *flags, "-I", str(root), *pages(root)])


def copy_of_the_docs(tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copytree(ROOT / "benchmarks", copy / "benchmarks", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "README.md", copy / "README.md")
    return copy


def test_the_generated_text_is_current():
    assert cog(ROOT, "--check") == 0


def test_a_changed_result_changes_every_page_that_quotes_it_and_an_edited_figure_fails(tmp_path, monkeypatch):
    copy = copy_of_the_docs(tmp_path)
    monkeypatch.syspath_prepend(str(copy))  # the copy's benchmarks.figures reads the copy's results
    for module in [name for name in list(__import__("sys").modules) if name.startswith("benchmarks")]:
        monkeypatch.delitem(__import__("sys").modules, module)
    seeds = copy / "docs" / "results" / "seeds.json"
    result = json.loads(seeds.read_text())
    result["figures"]["mean"]["test_acc"] = 0.9123
    seeds.write_text(json.dumps(result))
    before = {page: Path(page).read_text() for page in pages(copy)}
    assert cog(copy, "--check") != 0
    assert cog(copy, "-r") == 0
    changed = sorted(Path(page).name for page in pages(copy) if Path(page).read_text() != before[page])
    assert changed == ["README.md", "data-and-evaluation.md"]
    assert all("**0.9123**" in Path(page).read_text() for page in pages(copy) if Path(page).name in changed)
    assert cog(copy, "--check") == 0
    readme = copy / "README.md"
    readme.write_text(readme.read_text().replace("**0.9123**", "**0.9200**", 1))
    assert cog(copy, "--check") != 0


def test_no_quantity_with_two_figures():
    text = "\n".join(Path(page).read_text() for page in pages(ROOT))
    # The figures the docs once quoted two ways: each now has one.
    for stale in ("0.8888", "0.6742", "+0.22 points", "0.8425 and", "14,395", "29,103", "about 27 s", "25.6 s",
                  "27.1 s", "29.7 s", "0.8167"):
        assert stale not in text, stale


def test_a_run_writes_the_figures_it_prints_and_the_recorder_reads_them(trained, monkeypatch):
    from benchmarks.record import figures_of

    run, _, result = trained
    written = json.loads((run / "results.json").read_text())
    printed = dict(line.split() for line in result.stdout.split("results:\n")[1].splitlines()
                   if line.strip().startswith(("test/", "val/acc_best")))
    assert printed and all(f"{written['metrics'][key]:.4f}" == value for key, value in printed.items())
    monkeypatch.chdir(run.parent.parent.parent)  # the run folder the results block names is relative to here
    # the model's path from the run folder on, as outputs/<run>/...: no machine's path in a published file
    published = {**written, "model": str("outputs/<run>" / Path(written["model"]).resolve().relative_to(run.resolve()))}
    assert figures_of(result.stdout) == published
    # the logs may go on after the results block (the outputs are written after it is printed)
    assert figures_of(result.stdout + "[2026-12-04][timing][INFO] - writing the outputs took 0.1 s\n") == published


NOT_RERUN = {"h200"}


def test_every_result_file_was_written_by_its_command():
    """Each file in docs/results names its command, the commit it ran at, the machine and the date, and was written
    by benchmarks.record; the exceptions (NOT_RERUN: hardware the project's machines lack, and runs too long to
    repeat yet) say that they were not rerun."""
    from benchmarks.record import steps_of

    files = sorted((ROOT / "docs" / "results").glob("*.json"))
    assert len(files) >= 10
    for path in files:
        found = json.loads(path.read_text())
        assert {"command", "source", "commit", "machine", "date", "figures"} <= found.keys(), path.name
        assert "copied" not in path.read_text(), path.name
        if path.stem in NOT_RERUN:
            assert "not rerun" in found["source"], path.name
            continue
        assert found["source"] == "written by benchmarks.record from the command's output", path.name
        assert found["seconds"] > 0 and not found["commit"].endswith("+changes"), path.name
    assert steps_of(["a", "x", "--then", "b"]) == [["a", "x"], ["b"]]


def test_an_output_of_the_default_model_goes_stale_when_a_default_it_depends_on_changes(tmp_path, monkeypatch):
    """A result recorded with --defaults fails `cog --check` once a default of the run or of the pretraining
    changes (transfer.pretrained_lr_scale, conf/transfer/default.yaml), and stays current for a setting added
    after it was recorded."""
    from benchmarks import defaults

    copy = copy_of_the_docs(tmp_path)
    shutil.copytree(ROOT / "conf", copy / "conf")
    monkeypatch.syspath_prepend(str(copy))
    for module in [name for name in list(__import__("sys").modules) if name.startswith("benchmarks")]:
        monkeypatch.delitem(__import__("sys").modules, module)
    stale = [path.stem for path in (copy / "docs" / "results").glob("*.json") if "defaults" in json.loads(
        path.read_text())]
    assert {"default_run", "predict_example", "explain_example", "composition"} <= set(stale)
    assert cog(copy, "--check") == 0
    transfer = copy / "conf" / "transfer" / "default.yaml"
    transfer.write_text(transfer.read_text() + "pretrained_lr_scale: 0.5\n")
    assert cog(copy, "--check") != 0
    recorded = json.loads((copy / "docs" / "results" / "predict_example.json").read_text())
    with pytest.raises(defaults.StaleResult, match=r"transfer.pretrained_lr_scale 0.3 -> 0.5.*record it again"):
        defaults.check("predict_example", recorded, copy / "conf")
    for settings in recorded["defaults"].values():  # as if recorded before the setting existed
        settings.pop("transfer.pretrained_lr_scale")
    defaults.check("predict_example", recorded, copy / "conf")


# Records of runs that tried the starting point before a run's results named it (StartingPoint.record): recording
# one again adds the name, and it then has to leave this set.
UNNAMED_STARTING_POINT = {"nana"}


def starting_points(value: object) -> list[dict]:
    """Every starting point a record names, at any depth (a run's results, or each of a benchmark's runs)."""
    if isinstance(value, dict):
        found = [value["starting_point"]] if isinstance(value.get("starting_point"), dict) else []
        return found + [point for item in value.values() for point in starting_points(item)]
    if isinstance(value, list):
        return [point for item in value for point in starting_points(item)]
    return []


def test_every_record_read_from_the_starting_point_names_the_one_the_pretraining_record_published():
    """A figure from a run that tried the starting point is only as current as that starting point: every such
    record names the corpus its starting point learnt from, and it is the one docs/results/pretrain.json published
    (a pretraining that leaves out other names, such as NaNa's held-out ones once its table is there, learns from
    another corpus, and every record read from it has to be made again with it)."""
    records = {path.stem: json.loads(path.read_text()) for path in (ROOT / "docs" / "results").glob("*.json")}
    published = records["pretrain"]["figures"]["published_corpus_sha256"]
    assert len(published) == 64
    named = {stem: starting_points(record["figures"]) for stem, record in records.items()}
    chose_it = {stem for stem, record in records.items()
                if "transfer/chosen" in json.dumps(record) or '"transferred": true' in json.dumps(record)}
    assert {stem for stem in chose_it if not named[stem]} == UNNAMED_STARTING_POINT
    for stem, points in named.items():
        assert all(point["corpus_sha256"] == published for point in points), (
            f"docs/results/{stem}.json was read from a starting point that learnt from another corpus than "
            "docs/results/pretrain.json's: record both from one `make pretrain`")
    assert starting_points({"runs": [{"starting_point": {"corpus_sha256": "a"}}, {"starting_point": None}]}) == [
        {"corpus_sha256": "a"}]
