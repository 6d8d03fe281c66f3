"""Out-of-sample probabilities from the project's own model, for `nameorigin audit --model network`: on each fold,
`python train.py`'s pipeline trains on the other folds' rows (its settings composed from the clone's conf/, as the
data sizes them) and the served checkpoint answers the held-out rows. One network per fold: the one transferred
from the surnames model when its starting point exists (`make pretrain`), the plain one otherwise; no refit, no
test, no margin, no logger. Cost: k trainings (docs/data-and-evaluation.md has the seconds)."""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from nameorigin.base.errors import UserError
from nameorigin.base.textnorm import variant_key

# What each fold's run changes: it is read once, on rows it never saw, so it needs no refit, test, margin or
# dashboard; 9 % of its rows pick its epoch and temperature (the 1 % test split is never read).
FOLD_SETTINGS = ("refit.enabled=false", "margin.enabled=false", "test=false", "logger=none",
                 "~callbacks.grad_accumulation", "~callbacks.dashboard", "~callbacks.progress_bar",
                 "+trainer.enable_progress_bar=false", "trainer.enable_model_summary=false",
                 "data.split_fractions=[0.9,0.09,0.01]")
# A label needs a name in each of the fold run's train, validation and test splits: one with fewer distinct names
# in the fold's training rows is left out of that run, and its held-out rows get probability 0 for it.
MIN_NAMES = 5
# Loggers whose lines describe a fold's run (its settings, its results block): the audit prints one line a fold.
RUN_LOGGERS = ("nameorigin", "pytorch_lightning", "lightning", "lightning_fabric")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """A fold's training without its run's lines: its results block (stdout) and its log records below errors."""
    levels = {name: logging.getLogger(name).level for name in RUN_LOGGERS}
    try:
        for name in RUN_LOGGERS:
            logging.getLogger(name).setLevel(logging.ERROR)
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def compose_fold(config_dir: Path, rows: Path, output_dir: Path, seed: int, overrides: Sequence[str]) -> DictConfig:
    """train.py's config for one fold: the fold's table, the run's folder, `overrides` last."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    from nameorigin.config import register

    if not (config_dir / "train.yaml").is_file():
        raise UserError(f"--model network trains with train.py's settings, and {config_dir}/train.yaml does not "
                        "exist: run it in the clone, or pass --config-dir <clone>/conf")
    register()
    settings = ["data=table", f"data.path={rows}", "data.name_column=name", "data.label_column=label",
                f"paths.output_dir={output_dir}", f"seed={seed}", *FOLD_SETTINGS]
    try:
        with initialize_config_dir(config_dir=str(config_dir.resolve()), version_base="1.3"):
            cfg = compose("train", overrides=[*settings, *overrides])
            if not any(setting.startswith("transfer.use=") for setting in overrides):
                starts = Path(cfg.transfer.starting_point).is_file()
                cfg = compose("train", overrides=[*settings, f"transfer.use={'always' if starts else 'never'}",
                                                  *overrides])
    except HydraException as error:
        raise UserError(f"--train-override: {' '.join(str(error).split())}") from None
    return cfg


def trainable(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The rows whose label has at least MIN_NAMES distinct names (spelling variants counted once)."""
    names: dict[str, set[str]] = defaultdict(set)
    for name, label in pairs:
        names[label].add(variant_key(name))
    return [(name, label) for name, label in pairs if len(names[label]) >= MIN_NAMES]


def network_probabilities(pairs: list[tuple[str, str]], labels: list[str],
                          splits: list[tuple[np.ndarray, np.ndarray]], seed: int,
                          overrides: Sequence[str] = (), config_dir: Path = Path("conf")) -> np.ndarray:
    """[rows, labels] float32: each held-out fold's rows answered by the model train.py fits on the others (a
    label its training rows lack, or hold too few names of, gets probability 0); a name the model cannot read keeps
    uniform probabilities."""
    import torch

    from nameorigin.serving.predict import Predictor
    from nameorigin.training.pipeline import train

    index = {label: i for i, label in enumerate(labels)}
    probabilities = np.full((len(pairs), len(labels)), 1 / len(labels), dtype=np.float32)
    with tempfile.TemporaryDirectory(prefix="nameorigin-audit-") as work:
        for fold, (rows, held) in enumerate(splits):
            started = time.perf_counter()
            table = Path(work, f"fold{fold}.csv")
            with table.open("w", newline="", encoding="utf-8") as f:
                writer = csv.writer(f)
                writer.writerow(["name", "label"])
                writer.writerows(trainable([pairs[row] for row in rows]))
            cfg = compose_fold(config_dir, table, Path(work, f"fold{fold}"), seed, overrides)
            with quiet():
                predictor = Predictor.load(train(cfg)["model_checkpoint"])
            tokens, lengths, errors = predictor.encode_many([pairs[row][0] for row in held])
            answered = np.array([error is None for error in errors])
            keep = torch.from_numpy(answered)
            found = predictor.probabilities((tokens[keep], lengths[keep])).numpy()
            columns = [index[label] for label in predictor.labels]
            block = np.zeros((int(answered.sum()), len(labels)), dtype=np.float32)
            block[:, columns] = found
            probabilities[held[answered]] = block
            print(f"fold {fold + 1}/{len(splits)}: the network trained on {len(rows):,} rows in "
                  f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return probabilities
