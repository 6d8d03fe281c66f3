"""Is the margin's linear model a baseline a practitioner would accept? On a sample of a table, split as train.py
splits it, the run's linear part fitted alone (the settings the run's tier gives it) beside the tuned char 1-4-gram
TF-IDF logistic regression (`nameorigin evaluate --baseline lr`), both picked on validation and read on the same
test names.

    python -m benchmarks.baseline_strength --rows 150000 -- experiment=first_name_gender
    python -m benchmarks.baseline_strength --rows 200000 -- experiment=nana
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

from hydra import compose, initialize_config_dir

from benchmarks.small_tables import write_rows
from nameorigin.config import register
from nameorigin.evaluation import linear_fit
from nameorigin.evaluation.margin import fitted_baseline, scored_part
from nameorigin.fit.instantiate import build
from nameorigin.training.held_out import CONFIG_DIR
from nameorigin.training.sizing import rule

SEED = 0
RARE = 20


def sample(source: Path, out: Path, rows: int, label_column: str | None) -> Path:
    """`rows` rows of `source`, drawn with SEED; with a label column, less the rows of a label the sample holds
    fewer than RARE times (too few for three splits)."""
    with source.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header, every = reader.fieldnames, list(reader)
    chosen = random.Random(SEED).sample(every, min(rows, len(every)))
    if label_column:
        count = Counter(label for row in chosen for label in row[label_column].split(";"))
        chosen = [row for row in chosen if min(count[label] for label in row[label_column].split(";")) >= RARE]
    return write_rows(out, header, chosen)


def measure(rows: int, overrides: list[str], out: Path) -> dict:
    register()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides)
        labelled = None if cfg.data.get("share_columns") else cfg.data.get("label_column")  # shares: no rare label
        path = sample(Path(cfg.data.path), out / f"{Path(cfg.data.path).stem}_{rows}.csv", rows, labelled)
        cfg = compose(config_name="train", overrides=[*overrides, f"data.path={path}"])
    datamodule = build(cfg.data, "data")
    datamodule.setup("fit")
    soft = datamodule.table.shares is not None  # the run fits a share table's shares
    picks = {pick.key.rsplit(".", 1)[1]: pick.value
             for pick in rule(len(datamodule.splits["train"]), len(datamodule.labels), soft)}
    start = time.perf_counter()
    part = linear_fit.fit_alone(datamodule, picks["ngram_buckets"], picks["ngram_max"], soft)
    linear = scored_part(part, datamodule, picks["ngram_max"], refitted=False)
    linear_seconds = time.perf_counter() - start
    lr = fitted_baseline("lr", datamodule.splits, refit=False)
    both = {"linear_part": {"setting": linear["setting"], "val_acc": linear["val_acc"], "test_acc": linear["test_acc"],
                            "seconds": round(linear_seconds, 1), "buckets": picks["ngram_buckets"],
                            "ngram_max": picks["ngram_max"]},
            "lr": {"setting": lr["setting"], "val_acc": lr["val_acc"], "test_acc": lr["test_acc"],
                   "seconds": round(lr["seconds"], 1)}}
    return {"rows": rows, "overrides": overrides, "pairs": {s: len(p) for s, p in datamodule.splits.items()},
            "labels": len(datamodule.labels), **both,
            "test_gap": both["linear_part"]["test_acc"] - both["lr"]["test_acc"],
            "val_gap": both["linear_part"]["val_acc"] - both["lr"]["val_acc"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, required=True, help="rows sampled from the run's table")
    parser.add_argument("--out", default="outputs/baseline_strength", help="where the sample is written")
    parser.add_argument("overrides", nargs="*", help="train.py overrides naming the table (after --)")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.rows, args.overrides, Path(args.out)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
