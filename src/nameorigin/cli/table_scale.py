"""How a large table reads: write a synthetic table of N rows (names built from the shipped tutorial corpus),
then, in a fresh process for each mode, read, split and encode it exactly as `data=table` does, and report rows/s
for each phase and the process's peak RSS.

  python scripts/table_scale.py --rows 1000000            # both modes: label column and share columns
  python scripts/table_scale.py --rows 200000 --mode shares
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import resource
import subprocess
import sys
from pathlib import Path

from nameorigin.base.atomic import write_atomically
from nameorigin.base.errors import UserError, exits_2_on_user_error
from nameorigin.data.names import read_corpus, shipped_corpus

MODES = {"labels": {"label_column": "label", "weight_column": "count"},
         "shares": {"share_columns": ["F", "M"], "weight_column": "count"}}


def write_synthetic(path: Path, rows: int, seed: int = 0) -> Path:
    """`rows` rows of name,label,count,F,M: a tutorial surname joined to another (over 400 million pairs, so
    nearly all distinct), the first one's language, a count and two shares."""
    pairs = read_corpus(shipped_corpus())[0]
    rng = random.Random(seed)

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["name", "label", "count", "F", "M"])
            for _ in range(rows):
                (first, language), (second, _) = rng.choice(pairs), rng.choice(pairs)
                share = round(rng.random(), 3)
                writer.writerow([first + second.lower(), language, rng.randint(1, 1000), share, 1 - share])

    return write_atomically(path, write)


def measure(settings: dict) -> dict:
    """Read, split and encode one table as train.py would (TableDataModule.setup); peak RSS of this process."""
    from nameorigin.data.table import TableDataModule

    data = TableDataModule(**settings)
    data.setup()
    rows = data.row_counts["rows"]
    seconds = data.setup_seconds
    return {"rows": rows, "names": sum(len(split) for split in data.splits.values()),
            "seconds": seconds, "rows_per_second": {phase: rows / max(s, 1e-9) for phase, s in seconds.items()},
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the synthetic table (default 1M)")
    parser.add_argument("--out", default="outputs/table_scale.csv", help="where the synthetic table is written")
    parser.add_argument("--mode", choices=[*MODES, "both"], default="both",
                        help="labels: a label column; shares: share columns F,M; both (default); each weighted by "
                        "the count column")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # the child process: JSON settings of one mode
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(json.loads(args.measure))))
        return 0
    if args.rows < 10:
        raise UserError(f"--rows {args.rows}: pass at least 10 rows")
    if Path(args.out).is_dir():
        raise UserError(f"--out {args.out} is a folder: pass the path of the CSV to write")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    path = write_synthetic(Path(args.out), args.rows)
    print(f"wrote {path}: {args.rows:,} rows")
    print(f"{'mode':<8} {'rows':>10} {'names':>10} {'read rows/s':>12} {'split rows/s':>13} "
          f"{'encode rows/s':>14} {'peak RSS':>9}")
    for mode in MODES if args.mode == "both" else [args.mode]:
        settings = {"path": str(path), **MODES[mode]}
        child = subprocess.run([sys.executable, "-m", "nameorigin.cli.table_scale", "--measure",
                                json.dumps(settings)], capture_output=True, text=True)
        if child.returncode:
            print(child.stderr.strip().splitlines()[-1] if child.stderr.strip() else "failed", file=sys.stderr)
            return child.returncode
        result = json.loads(child.stdout.strip().splitlines()[-1])
        speed = result["rows_per_second"]
        print(f"{mode:<8} {result['rows']:>10,} {result['names']:>10,} {speed['read']:>12,.0f} "
              f"{speed['split']:>13,.0f} {speed['encode']:>14,.0f} {result['peak_rss_gb']:>7.2f} GB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
