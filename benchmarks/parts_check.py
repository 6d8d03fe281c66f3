"""NaNa read as parts against NaNa as one string, on the same split: each full name split by nameparser into
[given, family] (data.split_full_name=true), then read with a boundary token between the parts
(data.join_parts=boundary) or glued back into "Given Family" (data.join_parts=space). The split is the parts'
in both runs, so the same test names are scored; each run beside its own margin's baseline, its hashed n-gram
linear part fitted alone on its own reading of the same split.

  nameorigin nana-table --fetch      # once
  python -m benchmarks.parts_check --json [--rows 150000] [-- overrides for both runs]

Rows: a seeded sample of NaNa's one-nationality rows, labels with fewer than MIN_ROWS rows in it dropped. Reports
the share of names nameparser left in one part or read as "Family, Given", P@1 and P@5 of each run and of its
baseline, and the parts' P@1 and P@5 differences over the one string with their paired 95 % intervals.
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

import torch

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "data/nana/nana.csv"
MIN_ROWS = 60
SETTINGS = ["experiment=nana", "data.split_full_name=true", "transfer.use=never", "callbacks.progress_bar=null"]


def sample(out: Path, rows: int, seed: int) -> Path:
    with SOURCE.open(newline="", encoding="utf-8") as f:
        kept = [row for row in csv.DictReader(f) if ";" not in row["nationality"]]
    chosen = random.Random(seed).sample(kept, min(rows, len(kept)))
    counts = Counter(row["nationality"] for row in chosen)
    chosen = [row for row in chosen if counts[row["nationality"]] >= MIN_ROWS]
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["name", "nationality"])
        writer.writeheader()
        writer.writerows(chosen)
    return out


def train(path: Path, join: str, overrides: list[str]) -> tuple[Path, float]:
    """One run in its own process: its folder and wall time."""
    start = time.perf_counter()
    command = [sys.executable, str(ROOT / "train.py"), *SETTINGS, f"data.path={path}", f"data.join_parts={join}",
               *overrides]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"error: the {join} run exited {done.returncode}: {done.stderr.strip()[-800:]}")
    return Path(re.search(r"tensorboard --logdir (\S+)\s*$", done.stdout).group(1)), time.perf_counter() - start


def checkpoint_of(folder: Path) -> Path:
    refit = folder / "checkpoints/refit.ckpt"
    return refit if refit.is_file() else folder / "checkpoints/best.ckpt"


def hits(ranks: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"p_at_1": ranks < 1, "p_at_5": ranks < 5}


def measure(folders: dict[str, Path], path: Path) -> dict:
    from nameorigin.analysis.evaluate import evaluate
    from nameorigin.evaluation.margin import paired
    from nameorigin.serving.predict import Predictor

    figures: dict = {}
    ranks = {}
    for join, folder in folders.items():
        ranks[join] = torch.as_tensor(evaluate(Predictor.load(checkpoint_of(folder)), path)["ranks"])
        results = json.loads((folder / "results.json").read_text())
        margin = results["margin"]  # the run's own baseline: its hashed n-gram linear part, fitted alone
        figures[join] = {"test_names": len(ranks[join]), "val_acc": results["metrics"].get("val/acc_best"),
                         "test_acc_run": results["metrics"].get("test/acc"),
                         **{key: float(hit.double().mean()) for key, hit in hits(ranks[join]).items()},
                         "baseline": margin["kind"], "baseline_p_at_1": margin["baseline_precision_at"]["1"],
                         "baseline_p_at_5": margin["baseline_precision_at"]["5"]}
    for key in ("p_at_1", "p_at_5"):
        parts, one = hits(ranks["boundary"])[key], hits(ranks["space"])[key]
        compared = paired(parts, one)
        figures[f"{key}_difference"] = float(parts.double().mean() - one.double().mean())
        figures[f"{key}_interval"] = compared["interval"]
    manifest = json.loads((folders["boundary"] / "split.json").read_text())
    counted = manifest.get("rows", {})
    distinct = max(counted.get("rows", 0) - counted.get("blank_name", 0), 1)
    figures["parse"] = {"rows": counted.get("rows"), "one_part_share": counted.get("split_one_part", 0) / distinct,
                        "comma_share": counted.get("split_comma", 0) / distinct}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=150_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for both runs, after --")
    args = parser.parse_args()
    if not SOURCE.is_file():
        sys.exit(f"error: {SOURCE.relative_to(ROOT)} is missing: run nameorigin nana-table --fetch first")
    path = sample(ROOT / f"outputs/parts_check/nana_{args.rows}_{args.seed}.csv", args.rows, args.seed)
    folders, seconds = {}, {}
    for join in ("boundary", "space"):
        folders[join], seconds[join] = train(path, join, args.overrides)
    figures = measure(folders, path)
    figures["rows"], figures["wall_s"] = args.rows, {join: round(s, 1) for join, s in seconds.items()}
    figures["runs"] = {join: str(folder.relative_to(ROOT)) if folder.is_relative_to(ROOT) else str(folder)
                       for join, folder in folders.items()}
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for join in ("boundary", "space"):
        f = figures[join]
        print(f"{join:8s} P@1 {f['p_at_1']:.4f} P@5 {f['p_at_5']:.4f}   hashed n-gram baseline P@1 "
              f"{f['baseline_p_at_1']:.4f} P@5 {f['baseline_p_at_5']:.4f}   ({f['test_names']} test names)")
    for key in ("p_at_1", "p_at_5"):
        low, high = figures[f"{key}_interval"]
        print(f"parts - one string {key}: {100 * figures[f'{key}_difference']:+.2f} points "
              f"[{100 * low:+.2f}, {100 * high:+.2f}]")


if __name__ == "__main__":
    main()
