"""The NaNa converter (nameorigin.data.nana): a small wheel of our own, built like name2nat's, converted, trained
on with experiment=nana; and every refusal, a hostile pickle first."""

from __future__ import annotations

import csv
import json
import os
import pickle
import zipfile
from pathlib import Path

import pytest
from conftest import NAMEORIGIN, TINY, run_in_process, run_script, train_refused

from nameorigin.cli.app import main as nameorigin
from nameorigin.data.nana import MEMBER, WHEEL

STEMS = ("Nakamura", "Tanaka", "Suzuki", "Rossi", "Bianchi", "Esposito", "Muller", "Schmidt", "Dubois", "Moreau")


def small_name2nats() -> dict[str, list[str]]:
    """Names under four nationalities, one under two, one repeated, one too long, one rare, one non-ASCII."""
    endings = {"Japanese": "moto", "Italian": "elli", "German": "mann", "French": "eau"}
    table = {f"{first} {stem}{ending}": [nationality] for nationality, ending in endings.items()
             for first in ("Anna", "Karl", "Jean", "Yuki", "Luca", "Maria") for stem in STEMS}
    table["Aiko Rossi"] = ["Japanese", "Italian"]
    table["Karl Dubimann"] = ["German", "German"]
    table["X" * 65] = ["French"]
    table["Tobago Person"] = ["Tobagonian"]
    table["José Müllerelli"] = ["Italian"]
    return table


def write_wheel(path: Path, payload: bytes, member: str = MEMBER) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(member, payload)
        archive.writestr("name2nat/__init__.py", "")
    return path


class RunsACommand:
    """What a hostile pickle looks like: loading it would call os.system."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.slow
def test_converts_the_wheel_and_trains_on_it(tmp_path, capsys):
    wheel = write_wheel(tmp_path / WHEEL, pickle.dumps(small_name2nats(), protocol=3))
    out = tmp_path / "nana" / "nana.csv"
    assert nameorigin(["nana-table", "--wheel", str(wheel), "--out", str(out)]) == 0
    assert f"wrote {out} (243 names, 4 nationalities)" in capsys.readouterr().out
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    cells = {row["name"]: row["nationality"] for row in rows}
    assert cells["Aiko Rossi"] == "Japanese;Italian"  # both, in name2nat's order
    assert cells["Karl Dubimann"] == "German"  # a repeated nationality once
    assert cells["José Müllerelli"] == "Italian"  # names as written
    assert "X" * 65 not in cells and "Tobago Person" not in cells
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["counts"] == {"raw_names": 245, "raw_pairs": 247, "repeated_nationality": 1, "skipped_long_name": 1,
                              "skipped_rare_nationality_only": 1, "names": 243, "pairs": 244,
                              "nationalities": 4, "names_with_several": 1, "names_not_ascii": 1}
    assert meta["dropped_nationalities"] == {"Tobagonian": 1}
    result = train_refused(tmp_path, "experiment=nana", f"data.path={out}", *TINY, "model.ngram_buckets=64",
                           "trainer.max_epochs=1", "card.enabled=false")
    assert result.returncode == 0, result.stderr[-2000:]
    (split,) = (tmp_path / "outputs").glob("*/*/split.json")
    manifest = json.loads(split.read_text())
    assert manifest["labels"] == ["French", "German", "Italian", "Japanese"] and manifest["normalize"] == "none"
    held_out = {name for s in ("val", "test") for name, _ in manifest["splits"][s]}
    assert not held_out & {name for name, _ in manifest["splits"]["train"]}


def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path, capsys):
    marker = tmp_path / "ran"
    payload = pickle.dumps({"Anna Rossi": ["Italian"], "evil": RunsACommand(marker)}, protocol=3)
    out = tmp_path / "nana.csv"
    with pytest.raises(SystemExit) as exit_:
        nameorigin(["nana-table", "--wheel", str(write_wheel(tmp_path / WHEEL, payload)), "--out", str(out)])
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and error.count("\n") == 1
    assert "asks for posix.system" in error and "nothing in it was run" in error
    assert not marker.exists() and not out.exists() and not out.with_suffix(".json").exists()


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "absent.whl", "absent.whl' does not exist"),
    (lambda d: d, "is a directory"),
    (lambda d: (d / "x.whl").write_text("not a zip") and d / "x.whl", "is not a wheel (not a zip archive)"),
    (lambda d: write_wheel(d / "other.whl", b"", member="other/data.pkl"), "holds no name2nat/name2nats.pkl: it is"),
    (lambda d: write_wheel(d / WHEEL, pickle.dumps(["Anna Rossi", "Italian"])), "is not a dict of names to lists"),
    (lambda d: write_wheel(d / WHEEL, pickle.dumps({"Anna Rossi": "Italian"})), "is not a dict of names to lists"),
    (lambda d: write_wheel(d / WHEEL, pickle.dumps({"A B": ["x"]})[:-5]), "is not a readable pickle"),
    (lambda d: write_wheel(d / WHEEL, pickle.dumps({"A B": ["It;aly"]})), "holds ';', the label separator"),
])
def test_a_missing_foreign_or_misshapen_wheel_is_refused_in_one_line(tmp_path, capsys, make, message):
    wheel = make(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        nameorigin(["nana-table", "--wheel", str(wheel), "--out", str(tmp_path / "out.csv")])
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and message in error and error.count("\n") == 1, error
    assert not (tmp_path / "out.csv").exists()


@pytest.mark.slow
def test_fetch_without_an_index_and_usage_errors_are_one_line(tmp_path):
    """As a user sees it, a subprocess: pip with no index to reach fails at once, and says so in one line (the
    usage errors run in this process)."""
    result = run_script(["-m", "nameorigin", "nana-table", "--fetch", "--out", str(tmp_path / "n.csv")], cwd=tmp_path,
                        env={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""})
    assert result.returncode == 2 and "pip could not download name2nat==0.5.1" in result.stderr
    assert result.stderr.count("\n") == 1 and not (tmp_path / "n.csv").exists()
    result = run_in_process([NAMEORIGIN, "nana-table"], cwd=tmp_path)
    assert result.returncode == 2 and "pass --fetch to download it, or --wheel FILE" in result.stderr
    wheel = tmp_path / "w.whl"
    wheel.write_bytes(b"")
    result = run_in_process([NAMEORIGIN, "nana-table", "--wheel", str(wheel), "--out", str(tmp_path)], cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.startswith("error: Invalid value for '--out'") and \
        "is a directory" in result.stderr and result.stderr.count("\n") == 1


def test_the_card_names_labels_in_the_plural():
    from nameorigin.training.card_sections import plural

    assert [plural(w) for w in ("nationality", "language", "day", "label")] == \
        ["nationalities", "languages", "days", "labels"]
