"""Shared fixtures: a tiny synthetic corpus written to tmp_path, and the real corpus (the one shipped in the
package, or NAMES_DATA_DIR)."""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import random
import runpy
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAMEORIGIN = str(ROOT / "src" / "nameorigin" / "__main__.py")  # the `nameorigin` command, for run_in_process
if str(ROOT) not in sys.path:  # the measurement tools (benchmarks/) are run from the clone, not installed
    sys.path.insert(0, str(ROOT))


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, give each worker its share of the cores, for its own torch and for the train.py
    processes it starts (they read OMP_NUM_THREADS): workers that each take every core slow one another down.
    Triton's interpreter is chosen here, before anything imports triton (torch's export code can): its language
    functions are interpreted only if the variable is set when triton is first imported."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        threads = max(1, (os.cpu_count() or 1) // workers)
        # OpenBLAS (numpy's, scipy's: the baselines, the audit) starts a thread per core of its own, spinning while
        # it waits: two workers each with every core's threads slow one another down more than torch's do.
        os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
        import torch
        from threadpoolctl import threadpool_limits

        torch.set_num_threads(threads)
        threadpool_limits(threads)  # the BLAS libraries already loaded; those loaded later read the variables

# The longest files first (their summed test times, longest first): pytest-xdist hands out whole files (--dist
# loadfile, with --no-loadscope-reorder so that it keeps this order rather than putting the files of many tests
# first), so a long file drawn last keeps one worker busy after the other has finished. The two files that read
# the shared parts runs are apart, so that one worker does not wait on the other's lock.
LONGEST_FIRST = ("test_real_corpus.py", "test_surnames.py", "test_audit.py", "test_config.py", "test_reliability.py",
                 "test_name_parts.py", "test_train.py", "test_predict.py", "test_directions.py", "test_scripts.py",
                 "test_ensemble.py", "test_serve.py", "test_search.py", "test_ray_data.py", "test_full_disk.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    # stable: each file keeps its own order
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


# Each language gets a recognisable ending so a tiny model learns it in a few epochs.
ENDINGS = {"Japanese": "moto", "Russian": "ovsky", "Irish": "agh", "Italian": "elli"}


def write_corpus(folder: Path, per_language: int = 40, seed: int = 0) -> Path:
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for language, ending in ENDINGS.items():
        names = set()
        while len(names) < per_language:
            stem = "".join(rng.choice("bcdfgklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(1, 3)))
            names.add(stem.capitalize() + ending)
        lines = sorted(names)
        lines += lines[:5]  # duplicate lines, as in the real Arabic.txt
        (folder / f"{language}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    # One name under two languages, as the real corpus has.
    with (folder / "Irish.txt").open("a") as f:
        f.write("Sharedname\n")
    with (folder / "Italian.txt").open("a") as f:
        f.write("Sharedname\n")
    return folder


def write_confusable_corpus(folder, per_language: int = 60, borrowed: float = 0.3, seed: int = 0):
    """Four languages whose endings are borrowed by the others' names 30 % of the time: a model that errs, so
    its confusion is far from the identity and a refit could learn its validation names' answers."""
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    endings = list(ENDINGS.values())
    for language, ending in ENDINGS.items():
        names = set()
        while len(names) < per_language:
            stem = "".join(rng.choice("bcdfgklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(1, 3)))
            names.add(stem.capitalize() + (rng.choice(endings) if rng.random() < borrowed else ending))
        (folder / f"{language}.txt").write_text("\n".join(sorted(names)) + "\n", encoding="utf-8")
    return folder


@pytest.fixture
def tiny_corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "names")


@pytest.fixture(scope="session")
def real_corpus() -> Path:
    from nameorigin.data.corpus import shipped_corpus

    folder = os.environ.get("NAMES_DATA_DIR") or str(shipped_corpus())
    if not Path(folder).is_dir():
        pytest.fail(f"NAMES_DATA_DIR={folder} is not a folder")
    return Path(folder)


# Small, fast training settings shared by the end-to-end tests.
TINY = [
    "model.hidden_size=32", "model.embedding_dim=16", "data.batch_size=16", "trainer.max_epochs=2",
    "trainer.accelerator=cpu", "callbacks.grad_accumulation.every_n_steps=3", "callbacks.progress_bar=null",
    "trainer.enable_model_summary=false",
]


def run_script(args: list[str], cwd: Path, timeout: int = 300, **kwargs) -> subprocess.CompletedProcess:
    """Run a project script (train.py, scripts/*.py) in a subprocess, as a user would: the warnings a user would
    see are not hidden."""
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", **kwargs.pop("env", {})}
    env.pop("PYTHONWARNINGS", None)
    kwargs.setdefault("text", True)
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, timeout=timeout, env=env, **kwargs)


def train(cwd: Path, *overrides: str, timeout: int = 300, fresh: bool = False) -> subprocess.CompletedProcess:
    """train.py in this process (run_in_process: each run skips a Python start and the imports of torch and
    Lightning, several seconds), or with `fresh` in its own process: for what only a fresh process shows (the
    warnings a user sees, DDP's launched processes, a timeout)."""
    if fresh:
        return run_script([str(ROOT / "train.py"), *overrides], cwd=cwd, timeout=timeout)
    return run_in_process([str(ROOT / "train.py"), *overrides], cwd)


def run_in_process(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """A script run as `__main__` inside this process, answered like run_script: for the refusals, which stop
    before training, so each case skips a Python start and the imports of torch and Lightning. Its own exit code,
    stdout and stderr are returned; an exception that is not SystemExit (a bug) propagates. Warnings go to pytest
    here, not to stderr, so each script keeps refusals tested as a subprocess too."""
    out, err = io.StringIO(), io.StringIO()
    saved_argv, saved_cwd, saved_env = sys.argv, os.getcwd(), os.environ.copy()
    saved_logging = [(logger, logger.handlers[:], logger.level, logger.propagate)
                     for logger in [logging.root, *map(logging.getLogger, list(logging.root.manager.loggerDict))]]
    code = 0
    try:
        os.chdir(cwd)
        sys.argv = [str(arg) for arg in args]
        os.environ["HYDRA_FULL_ERROR"] = "0"
        with redirect_stdout(out), redirect_stderr(err):
            try:
                runpy.run_path(sys.argv[0], run_name="__main__")
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        for logger, handlers, level, propagate in saved_logging:  # Hydra's job logging wrote to `out`
            logger.handlers[:], logger.level, logger.propagate = handlers, level, propagate
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def train_refused(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    """train.py run in this process (run_in_process), for the runs that stop before training."""
    return run_in_process([str(ROOT / "train.py"), *overrides], cwd)


def run_dirs(cwd: Path) -> list[Path]:
    return sorted(p for p in (cwd / "outputs").glob("*/*") if p.is_dir() and p.name != "multirun"
                  and p.parent.name != "mlflow")


def score_in_one_process(checkpoint: Path, datamodule) -> dict[str, float]:
    """The test metrics of a checkpoint tested by one process, the reference a distributed test must equal."""
    import pytorch_lightning as pl
    import torch

    from nameorigin.fit.module import NameClassifier

    model = NameClassifier(**torch.load(checkpoint, weights_only=True)["hyper_parameters"])
    trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False)
    trainer.test(model, datamodule=datamodule, ckpt_path=str(checkpoint), verbose=False)
    return {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("test")}


def last_scalars(folder: Path) -> dict[str, float]:
    """The last value of every scalar in a run's TensorBoard events."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0}).Reload()
    return {tag: events.Scalars(tag)[-1].value for tag in events.Tags()["scalars"]}


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """One tiny training run shared by the artifact and prediction tests, and by the pytest-xdist workers: the
    first to ask trains it under a file lock in their common temporary folder, the others read it back. The tests
    only read it."""
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # pytest-of-<user>/pytest-<n>/, above each worker's own folder
    work, record = shared / "trained-run", shared / "trained-run.json"
    with FileLock(str(shared / "trained-run.lock")):
        if not record.exists():
            corpus = write_corpus(work / "names")
            result = train(work, f"data.root={corpus}", *TINY)
            assert result.returncode == 0, result.stderr[-3000:]
            record.write_text(json.dumps([result.args, result.returncode, result.stdout, result.stderr]))
    args, returncode, stdout, stderr = json.loads(record.read_text())
    (run,) = run_dirs(work)
    return run, work / "names", subprocess.CompletedProcess(args, returncode, stdout, stderr)


@pytest.fixture(scope="session")
def real_run(tmp_path_factory, real_corpus) -> Path:
    """The default model on the real corpus without its refit (best.ckpt), trained once for the whole suite as
    `trained` is: the real-corpus test reads its scores."""
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    work = shared / "real-run"
    with FileLock(str(shared / "real-run.lock")):
        if not (work.exists() and run_dirs(work)):
            chosen = [f"data.root={os.environ['NAMES_DATA_DIR']}"] if os.environ.get("NAMES_DATA_DIR") else []
            work.mkdir(exist_ok=True)
            # No refit and no margin: each would add most of a minute, and each is tested on the tiny corpus.
            result = train(work, *chosen, "callbacks.progress_bar=null", "refit.enabled=false", "margin.enabled=false",
                           timeout=900)
            assert result.returncode == 0, result.stderr[-3000:]
    (run,) = run_dirs(work)
    return run


PARTS = ["data=table", "data.name_columns=[given,family]", "data.label_column=origin", "data.label_name=origin"]


def stem(rng: random.Random) -> str:
    return "".join(rng.choice("bcdfgklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(1, 2)))


def write_parts_table(path: Path, per_label: int = 70, seed: int = 0) -> Path:
    """given, family, origin: the origin is the given name's ending; the family name ends with any origin's."""
    rng, endings, rows = random.Random(seed), list(ENDINGS.values()), {}
    for origin, ending in ENDINGS.items():
        while sum(1 for row in rows.values() if row[2] == origin) < per_label:
            given, family = (stem(rng) + ending).capitalize(), (stem(rng) + rng.choice(endings)).capitalize()
            rows[given, family] = (given, family, origin)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["given", "family", "origin"], *rows.values()])
    return path


@pytest.fixture(scope="session")
def parts_runs(tmp_path_factory) -> dict[str, Path]:
    """The tiny parts table trained twice, read as parts (boundary) and glued into one string (space), on one
    split; shared by the pytest-xdist workers as conftest's `trained` is."""
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    work = shared / "parts-runs"
    with FileLock(str(shared / "parts-runs.lock")):
        table = work / "people.csv"
        if not table.exists():
            write_parts_table(table)
            # The glued string is read for its validation accuracy alone: no refit, test or margin.
            for join, steps in (("boundary", []), ("space", ["refit.enabled=false", "test=false",
                                                              "margin.enabled=false"])):
                (work / join).mkdir()
                result = train(work / join, *PARTS, f"data.path={table}", f"data.join_parts={join}", *TINY,
                               "trainer.max_epochs=8", "model.ngram_buckets=4096", *steps)
                assert result.returncode == 0, result.stderr[-3000:]
    runs = {join: run_dirs(work / join)[0] for join in ("boundary", "space")}
    return {**runs, "table": work / "people.csv"}


@pytest.fixture(scope="session")
def parts_model(parts_runs) -> Path:
    return parts_runs["boundary"] / "checkpoints" / "refit.ckpt"
