"""Small tables of our own through the default path: 20k-row samples of the first name -> gender table (a share
table) and of NaNa (full names -> nationality, its 20 largest), each run as a new user would
(`python train.py data=table ...`, transfer.use=auto), beside the n-gram baseline on the same split.

  nameorigin first-names-table && nameorigin nana-table --fetch && make pretrain    # once
  python -m benchmarks.small_tables --json

No sampled name is one of the pretraining's names, so no test name was seen by the starting point. Per table:
which model validation kept, test accuracy and macro-F1 beside the baseline's, the margin with its 95 % paired
interval (on a share table also the like-for-like one), and the run's wall time.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROWS, LABELS, SEED = 20_000, 20, 0
TABLES = {
    "first_name_gender": ("data/first_names/gender.csv", ["data.name_column=name", "data.share_columns=[F,M]",
                                                          "data.label_name=gender"]),
    "nana": ("data/nana/nana.csv", ["data.name_column=name", "data.label_column=nationality",
                                    "data.label_name=nationality"]),
    # The same NaNa sample with its accents and other letters kept: the transferred candidate grows the
    # pretrained ASCII vocabulary by them.
    "nana_accents": ("data/nana/nana.csv", ["data.name_column=name", "data.label_column=nationality",
                                            "data.label_name=nationality", "data.normalize=none"]),
}
DEFAULT_TABLES = "first_name_gender,nana"


def sample(source: Path, out: Path, surnames: set[str], label_column: str | None) -> Path:
    """ROWS rows of `source` drawn with SEED, none whose name is one of the pretraining's names; with a label
    column, from the rows with one label, among its LABELS most common."""
    with source.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header, rows = reader.fieldnames, [row for row in reader if row["name"].lower() not in surnames]
    if label_column:
        rows = [row for row in rows if ";" not in row[label_column]]
        common = {label for label, _ in Counter(row[label_column] for row in rows).most_common(LABELS)}
        rows = [row for row in rows if row[label_column] in common]
    return write_rows(out, header, random.Random(SEED).sample(rows, min(ROWS, len(rows))))


def write_rows(out: Path, header: list[str], rows: list[dict]) -> Path:
    """The rows as a CSV table at `out`, under `header`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
    return out


def run_table(path: Path, settings: list[str]) -> dict:
    """The default path on one table, in its own process: its results.json and wall time."""
    start = time.perf_counter()
    command = [sys.executable, str(ROOT / "train.py"), "data=table", f"data.path={path}",
               "callbacks.progress_bar=null", *settings]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"error: the run on {path} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    folder = Path(re.search(r"tensorboard --logdir (\S+)\s*$", done.stdout).group(1))
    written = json.loads((folder / "results.json").read_text())
    from nameorigin.training.transfer import compared, tried_starting_point

    metrics, margin = written["metrics"], written["margin"]
    # The figure the run's objective compared the candidates on: share-weighted accuracy on a share table.
    objective, plain, transferred = compared(metrics) or (None, None, None)
    figures = {"rows": ROWS, "wall_s": round(time.perf_counter() - start, 1),
               "transferred": bool(metrics.get("transfer/chosen")),
               "starting_point": tried_starting_point(written), "objective": objective,
               "val_acc_plain": plain, "val_acc_transferred": transferred,
               "test_acc": metrics["test/acc"], "test_macro_f1": metrics["test/macro_f1"],
               "baseline_acc": margin["baseline_acc"], "baseline_macro_f1": margin["baseline_macro_f1"],
               "margin": 100 * margin["margin"], "interval": [100 * x for x in margin["interval"]],
               "macro_f1_margin": 100 * margin["macro_f1_margin"]}
    like = margin.get("like_for_like")
    if like:
        figures["like_for_like"] = {"margin": 100 * like["person_margin"],
                                    "interval": [100 * x for x in like["interval"]],
                                    "model": like["model_person_acc"], "baseline": like["baseline_person_acc"]}
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON (benchmarks.record reads it)")
    parser.add_argument("--surnames", default="data/surnames", help="the pretraining's surnames cache")
    parser.add_argument("--out", default="data/small_tables", help="where the samples are written")
    parser.add_argument("--tables", default=DEFAULT_TABLES,
                        help=f"which, comma-separated, of {', '.join(TABLES)} (default: {DEFAULT_TABLES})")
    args = parser.parse_args(argv)
    chosen = args.tables.split(",")
    if unknown := [table for table in chosen if table not in TABLES]:
        parser.error(f"--tables {','.join(unknown)}: choose from {', '.join(TABLES)}")
    from nameorigin.data.surnames import Surnames

    surnames = {name.lower() for name in Surnames(args.surnames, convert_if_missing=False).names}
    figures = {}
    for table in chosen:
        source, settings = TABLES[table]
        label = next((s.split("=")[1] for s in settings if s.startswith("data.label_column=")), None)
        path = sample(Path(source), Path(args.out) / f"{Path(source).stem}.csv", surnames, label)
        figures[table] = run_table(path, settings)
    keys = ("margin", "macro_f1_margin")
    figures["mean"] = {key: sum(f[key] for f in figures.values()) / len(chosen) for key in keys}
    print(json.dumps(figures, indent=1) if args.json else figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
