"""The README's Python quick start runs exactly as printed, in a folder holding a trained run's outputs."""

from __future__ import annotations

import contextlib
import io
import re

import pytest
from conftest import ROOT

pytest.importorskip("pandas")


def quick_start() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"^```python\n(.*?)^```", readme, re.M | re.S)
    return block


def test_the_readme_quick_start_runs_as_printed(trained, monkeypatch):
    run, _, _ = trained
    monkeypatch.chdir(run.parent.parent.parent)  # the folder train.py ran in: outputs/<date>/<time>/ below it
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(quick_start(), "README.md", "exec"), {"__name__": "__quick_start__"})
    lines = printed.getvalue().splitlines()
    assert lines[0].startswith("Nakamura (") and lines[1].startswith("Dovesky (")
    assert "surname" in lines[2] and any("Schmidt" in line for line in lines[3:])
