"""The Makefile's own logic: `make help`, and which run `make dashboard` opens."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

VENV_BIN = Path(sys.executable).parent  # the environment running the tests holds tensorboard


def make_folder(tmp_path: Path) -> Path:
    """A copy of the Makefile whose .venv counts as installed and whose tensorboard is the real one."""
    for name in ("Makefile", "pyproject.toml", "constraints.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
        os.utime(tmp_path / name, (1_000_000_000, 1_000_000_000))  # older than .installed: make installs nothing
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / ".installed-core").touch()
    (bin_dir / ".installed").touch()
    (bin_dir / "tensorboard").symlink_to(VENV_BIN / "tensorboard")
    python = bin_dir / "python"  # a wrapper, not a link: a linked interpreter outside its venv loses the venv
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return tmp_path


def test_make_help_describes_every_target():
    phony = re.search(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), flags=re.M).group(1).split()
    result = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    described = {line.split()[1] for line in result.stdout.splitlines() if line.strip()}
    assert described == set(phony)


def test_make_train_installs_the_core_alone_make_pretrain_surnames_and_make_test_every_extra(tmp_path):
    for name in ("Makefile", "pyproject.toml", "constraints.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    planned = {target: subprocess.run(["make", "-n", target], cwd=tmp_path, capture_output=True, text=True,
                                      timeout=60).stdout for target in ("train", "pretrain", "test")}
    installs = {target: [line for line in text.splitlines() if "install" in line and "--editable" in line]
                for target, text in planned.items()}
    assert [line.split("--editable")[1].strip() for line in installs["train"]] == ["."]
    assert [line.split("--editable")[1].strip() for line in installs["pretrain"]] == [".", "'.[surnames]'"]
    assert "ray" in installs["test"][-1] and "serve" in installs["test"][-1] and "browser" in installs["test"][-1]


def test_make_dashboard_without_runs_is_one_line_and_exit_2(tmp_path):
    folder = make_folder(tmp_path)
    result = subprocess.run(["make", "-s", "dashboard"], cwd=folder, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "error: no run under outputs/" in result.stderr
    assert "Traceback" not in result.stderr and not result.stdout


def test_make_dashboard_opens_the_newest_run_or_sweep_by_date_and_time(tmp_path):
    folder = make_folder(tmp_path)
    older_sweep = folder / "outputs" / "multirun" / "2026-11-29" / "23-59-59.000001" / "0"
    newest_run = folder / "outputs" / "2026-11-30" / "00-00-01.000002"
    older_run = folder / "outputs" / "2026-11-30" / "00-00-00.999999"
    pretraining = folder / "outputs" / "2026-11-30" / "00-00-02.000000"  # newer, but it publishes a starting point
    for run in (older_sweep, newest_run, older_run, pretraining):
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra" / "config.yaml").write_text("transfer:\n  publish: null\n")
    (pretraining / ".hydra" / "config.yaml").write_text("transfer:\n  publish: data/pretrained/surnames.ckpt\n")
    # The name sort alone would pick the sweep ("multirun" > "2026-..."); the date and time must win.
    proc = subprocess.Popen(["make", "-s", "dashboard"], cwd=folder, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        first_line = proc.stdout.readline()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the real TensorBoard server started after that line
        proc.communicate(timeout=30)
    assert first_line.strip() == "tensorboard on outputs/2026-11-30/00-00-01.000002"
