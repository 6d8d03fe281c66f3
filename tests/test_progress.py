"""Progress on long work (nameorigin.serving.progress): a table scored with stderr on a terminal (a pseudo-terminal
here) draws a bar; with stderr a pipe, nothing but the summary line."""

from __future__ import annotations

import csv
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT


def people(path: Path, names: Path, rows: int = 20_000) -> Path:
    cells = [line for file in sorted(names.glob("*.txt")) for line in file.read_text().splitlines()]
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([["surname"], *([cells[i % len(cells)]] for i in range(rows))])
    return path


def score(trained, tmp_path: Path, stderr: int | None) -> subprocess.CompletedProcess:
    source = people(tmp_path / "people.csv", trained[1])
    env = {**os.environ, "NAMEORIGIN_PROGRESS_AFTER": "0", "COLUMNS": "100", "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "nameorigin", "predict", str(trained[0] / "checkpoints" /
                           "refit.ckpt"), "--file", str(source), "--column", "surname", "--out",
                           str(tmp_path / "out.csv")], stdout=subprocess.PIPE, stderr=stderr or subprocess.PIPE,
                          env=env, timeout=300)


@pytest.mark.slow
def test_a_terminal_sees_a_bar_and_a_pipe_only_the_summary(trained, tmp_path):
    primary, secondary = pty.openpty()
    try:
        shown = score(trained, tmp_path, secondary)
        os.close(secondary)
        drawn = b""
        while True:
            try:
                block = os.read(primary, 65536)
            except OSError:  # the terminal's other end is closed: all of it has been read
                break
            if not block:
                break
            drawn += block
    finally:
        os.close(primary)
    assert shown.returncode == 0
    text = drawn.decode(errors="replace")
    # The bar counts the rows as chunks are written (a CSV states no total: a spinner and the count), then clears
    # itself, and the summary line follows it.
    assert "rows scored" in text and "16,384" in text and "\x1b[?25l" in text  # drawn, the cursor hidden
    assert text.rstrip().endswith("-> " + str(tmp_path / "out.csv")) and "distinct names for 20,000 rows" in text

    piped = score(trained, tmp_path, None)
    assert piped.returncode == 0
    lines = piped.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("scored ") and "rows scored" not in piped.stderr.decode()
