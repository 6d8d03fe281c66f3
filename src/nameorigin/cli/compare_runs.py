"""List the runs under a folder (a sweep, or all of outputs/) with their scores, best first.

  python scripts/compare_runs.py outputs/multirun/2026-11-30/10-00-00.123456
  python scripts/compare_runs.py outputs --metric hp/test_macro_f1
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

METRICS = ("hp/val_acc_best", "hp/test_acc", "hp/test_macro_f1")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="a sweep folder or outputs/: every run folder below it is listed")
    parser.add_argument("--metric", default="hp/val_acc_best", choices=METRICS,
                        help="sort key (default hp/val_acc_best)")
    return parser.parse_args(argv)


def run_scores(run: Path) -> dict[str, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0}).Reload()
    tags = set(events.Tags()["scalars"])
    return {m: events.Scalars(m)[-1].value for m in METRICS if m in tags}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    folder = Path(args.folder)
    if not folder.is_dir():
        print(f"error: {folder} is not a folder: pass a sweep folder or outputs/", file=sys.stderr)
        return 2
    runs = sorted(p.parent for p in folder.glob("**/tensorboard")
                  if (p.parent / ".hydra" / "overrides.yaml").is_file())
    if not runs:
        print(f"error: no run folders (tensorboard/ beside .hydra/overrides.yaml) under {folder}", file=sys.stderr)
        return 2
    rows = []
    for run in runs:
        overrides = (run / ".hydra" / "overrides.yaml").read_text().strip().splitlines()
        rows.append((run_scores(run), " ".join(o.lstrip("- ").strip() for o in overrides), run))
    rows.sort(key=lambda row: row[0].get(args.metric, float("-inf")), reverse=True)
    print(f"{'val_acc_best':>12} {'test_acc':>9} {'test_f1':>8}  overrides / run")
    for scores, overrides, run in rows:
        cells = [f"{scores[m]:.4f}" if m in scores else "-" for m in METRICS]
        print(f"{cells[0]:>12} {cells[1]:>9} {cells[2]:>8}  {overrides or '(defaults)'}\n{'':>32}{run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
