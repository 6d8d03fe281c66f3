"""Pretraining on the names-dataset surnames, then the 18-language model fine-tuned from it at split seeds 0-2,
each beside the n-gram LR fitted on the same training names (its own margin step).

  python -m benchmarks.finetune --json                          # the pretraining (about 25 min), then 3 runs
  python -m benchmarks.finetune --json --pretrained <run>/checkpoints/best.ckpt   # fine-tuning runs only

Prints the country model's test top-1 and top-5 and, per split seed, the fine-tuned model's test accuracy and
macro-F1 with its margin over the baseline (in points, with the 95 % paired interval).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SPLIT_SEEDS = (0, 1, 2)


def run(*overrides: str) -> dict:
    """One train.py run in its own process; its results.json, with its folder."""
    command = [sys.executable, str(ROOT / "train.py"), "callbacks.progress_bar=null", *overrides]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"error: train.py {' '.join(overrides)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    folder = Path(re.search(r"tensorboard --logdir (\S+)\s*$", done.stdout).group(1))
    return {**json.loads((folder / "results.json").read_text()), "folder": str(folder)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pretrained", help="a pretraining's best.ckpt (default: run experiment=surnames_pretrain)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON (benchmarks.record reads it)")
    args = parser.parse_args(argv)
    figures: dict = {}
    start = args.pretrained
    if start is None:
        pretraining = run("experiment=surnames_pretrain")
        metrics = pretraining["metrics"]
        figures["country_model"] = {"top1": metrics["test/acc"], "top5": metrics["test/acc_top5"]}
        start = str(Path(pretraining["folder"]) / "checkpoints" / "best.ckpt")
    splits = []
    for split_seed in SPLIT_SEEDS:
        tuned = run("experiment=finetune", f"model.init_from={start}", f"data.split_seed={split_seed}")
        metrics, margin = tuned["metrics"], tuned["margin"]
        splits.append({"split_seed": split_seed, "test_acc": metrics["test/acc"],
                       "test_macro_f1": metrics["test/macro_f1"], "baseline_acc": margin["baseline_acc"],
                       "baseline_macro_f1": margin["baseline_macro_f1"], "margin": 100 * margin["margin"],
                       "interval": [100 * x for x in margin["interval"]]})
    keys = ("test_acc", "test_macro_f1", "baseline_acc", "baseline_macro_f1", "margin")
    figures |= {"splits": splits, "mean": {key: float(np.mean([s[key] for s in splits])) for key in keys}}
    if args.json:
        print(json.dumps(figures, indent=1))
        return 0
    for s in splits:
        print(f"split {s['split_seed']}: test {s['test_acc']:.4f} vs LR {s['baseline_acc']:.4f}, lead "
              f"{s['margin']:+.2f} [{s['interval'][0]:+.2f}, {s['interval'][1]:+.2f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
