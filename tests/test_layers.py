"""The import contract (pyproject.toml [tool.importlinter]): imports run one way, bottom to top, the fit never
reads its evaluation, and serving reads only artifacts. lint-imports checks the real package, and a copy with
imports against the grain fails."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from importlib import resources
from pathlib import Path

import pytest
from conftest import ROOT

LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def lint(tree: Path) -> subprocess.CompletedProcess:
    """lint-imports on the package under tree/src, with the project's contract."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    return subprocess.run([LINT_IMPORTS, "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=tree,
                          capture_output=True, text=True, env=env, timeout=120)


def test_the_package_keeps_its_import_contract():
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout


def test_an_import_against_the_grain_breaks_the_contract(tmp_path):
    shutil.copytree(ROOT / "src" / "nameorigin", tmp_path / "src" / "nameorigin",
                    ignore=shutil.ignore_patterns("__pycache__", "tutorial_names"))
    serving = tmp_path / "src" / "nameorigin" / "serving" / "predict.py"
    serving.write_text(serving.read_text() + "\nfrom nameorigin.fit.module import NameClassifier  # noqa\n")
    model = tmp_path / "src" / "nameorigin" / "model" / "charrnn.py"
    model.write_text(model.read_text() + "\nimport nameorigin.data.names  # noqa\n")
    fit = tmp_path / "src" / "nameorigin" / "fit" / "module.py"
    fit.write_text(fit.read_text() + "\nimport nameorigin.evaluation.margin  # noqa\n")
    result = lint(tmp_path)
    assert result.returncode != 0
    assert "nameorigin.serving.predict -> nameorigin.fit.module" in result.stdout, result.stdout
    assert "nameorigin.model.charrnn -> nameorigin.data.names" in result.stdout, result.stdout
    assert "nameorigin.fit.module -> nameorigin.evaluation.margin" in result.stdout, result.stdout


def test_the_shipped_corpus_is_found_through_the_package_and_matches_its_checksums():
    folder = resources.files("nameorigin.data") / "tutorial_names"
    sums = dict(line.split()[::-1] for line in (folder / "SHA256SUMS").read_text().splitlines())
    assert len(sums) == 18 and {"README.md", "LICENSE"} <= {p.name for p in folder.iterdir()}
    for name, digest in sums.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
    from nameorigin.data.corpus import label_files, shipped_corpus

    assert [p.name for p in label_files(shipped_corpus())] == sorted(sums)  # README, LICENSE, SHA256SUMS: no labels


# The measurement tools: in benchmarks/ at the root, never in the wheel.
TOOLS = {"benchmark", "reuse_demo", "table_scale", "score_scale", "serve_load", "composition_check", "prior_check",
         "ood", "fast_path", "speed"}


@pytest.mark.slow
def test_the_wheel_carries_the_corpus_and_the_commands_and_no_measurement_tool(tmp_path):
    """pip wheel . on a copy of the clone, listed: no benchmark, load, scale or demo module; then the wheel
    installed and used from outside the checkout: the corpus through importlib.resources, and
    nameorigin --help."""
    source, target, dist = tmp_path / "source", tmp_path / "site", tmp_path / "dist"  # pip builds in its tree
    for folder in ("src", "benchmarks", "scripts"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                            "--wheel-dir", str(dist), str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = dist.glob("nameorigin-*.whl")
    listed = zipfile.ZipFile(wheel).namelist()
    assert "nameorigin/serving/predict.py" in listed
    assert [name for name in listed if name.startswith("benchmarks/") or Path(name).stem in TOOLS] == []
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                              str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": str(target)}
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    probe = ("from importlib import resources; import nameorigin; "
             "folder = resources.files('nameorigin.data') / 'tutorial_names'; "
             "print(nameorigin.__file__); print(len([p for p in folder.iterdir() if p.name.endswith('.txt')]))")
    found = subprocess.run([sys.executable, "-c", probe], cwd=outside, env=env, capture_output=True, text=True)
    where, files = found.stdout.split()
    assert where.startswith(str(target)) and files == "18", found.stdout + found.stderr
    helped = subprocess.run([str(target / "bin" / "nameorigin"), "--help"], cwd=outside, env=env,
                            capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and "predict" in helped.stdout, helped.stderr[-2000:]
    assert sorted(p.name for p in (target / "bin").iterdir()) == ["nameorigin"]  # the one command


def test_serving_imports_neither_hydra_nor_lightning():
    """A prediction needs the checkpoint and torch: the serving modules and the predict command load no training
    framework (config.py registers its schemas with Hydra only when train.py asks)."""
    code = ("import sys; import nameorigin.cli.predict, nameorigin.serving.table, nameorigin.serving.frame, "
            "nameorigin.serving.export; print(sorted({m.split('.')[0] for m in sys.modules}))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0, loaded.stderr
    top = set(eval(loaded.stdout))  # noqa: S307  (our own print of a list of module names)
    assert "torch" in top and "nameorigin" in top
    assert not top & {"hydra", "omegaconf", "pytorch_lightning", "lightning", "lightning_fabric"}, top
