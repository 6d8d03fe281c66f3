"""How a large table reads: write a synthetic table of N rows (names built from the shipped tutorial corpus),
then, in a fresh process for each mode, read, split and encode it exactly as `data=table` does, and report rows/s
for each phase and the process's peak RSS.

  python -m benchmarks.table_scale --rows 1000000            # both modes: label column and share columns
  python -m benchmarks.table_scale --rows 200000 --mode shares
  python -m benchmarks.table_scale --rows 20000000 --mode people --out outputs/people.parquet   # data.rows=people

The people table is a row per person: names-dataset surnames (the converted cache of `experiment=surnames_pretrain`,
converted here if missing), each drawn with Zipf weights over a seeded random rank (the package keeps no rank
across countries), each person's country drawn from the name's country shares.
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

import numpy as np

from benchmarks import clone_env
from nameorigin.base.atomic import write_atomically
from nameorigin.base.errors import UserError, exits_2_on_user_error
from nameorigin.data.corpus import read_corpus, shipped_corpus

MODES = {"labels": {"label_column": "label", "weight_column": "count"},
         "shares": {"share_columns": ["F", "M"], "weight_column": "count"}}
PEOPLE = {"name_column": "name", "label_column": "country", "rows": "people"}
PEOPLE_CHUNK = 1 << 21


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


def write_people(path: Path, rows: int, cache: Path, seed: int = 0) -> Path:
    """`rows` rows of name,country, one per person, written a chunk at a time (CSV, or Parquet by suffix)."""
    from nameorigin.base.formats import format_of
    from nameorigin.base.formats.common import pyarrow_modules
    from nameorigin.base.formats.parquet import Parquet
    from nameorigin.data.surnames import Surnames

    pa, pq = pyarrow_modules(f"--out {path}")
    import pyarrow.csv as pcsv

    corpus = Surnames(cache)
    count = len(corpus.names)
    rng = np.random.default_rng(seed)
    popularity = 1.0 / (rng.permutation(count) + 1.0)  # Zipf over a random rank
    popularity /= popularity.sum()
    shares = corpus.top_share.numpy().astype(np.float64)
    cumulative = np.cumsum(shares, 1) / shares.sum(1, keepdims=True)
    # Name i's slots sit at i + cumulative share in one ascending array: one searchsorted draws every country.
    slots = (np.arange(count)[:, None] + cumulative).ravel()
    slot_country = corpus.top_index.numpy().ravel()
    names, countries = pa.array(corpus.names), pa.array(corpus.countries)

    def write(tmp: Path) -> None:
        schema = pa.schema([("name", pa.string()), ("country", pa.string())])
        writer = pq.ParquetWriter(tmp, schema) if format_of(path) is Parquet else pcsv.CSVWriter(tmp, schema)
        with writer:
            for start in range(0, rows, PEOPLE_CHUNK):
                drawn = rng.choice(count, size=min(PEOPLE_CHUNK, rows - start), p=popularity)
                country = slot_country[np.searchsorted(slots, drawn + rng.random(len(drawn)), side="right")]
                writer.write_table(pa.table({"name": names.take(pa.array(drawn)),
                                             "country": countries.take(pa.array(country.astype(np.int64)))}))

    return write_atomically(path, write)


def measure(settings: dict) -> dict:
    """Read, split and encode one table as train.py would (TableDataModule.setup); peak RSS of this process."""
    from nameorigin.data.table import TableDataModule

    data = TableDataModule(**settings)
    data.setup()
    rows = data.row_counts["rows"]
    seconds = data.setup_seconds
    return {"rows": rows, "distinct_names": data.row_counts.get("distinct_names"),
            "names": sum(len(split) for split in data.splits.values()),
            "seconds": seconds, "rows_per_second": {phase: rows / max(s, 1e-9) for phase, s in seconds.items()},
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the synthetic table (default 1M)")
    parser.add_argument("--out", default="outputs/table_scale.csv", help="where the synthetic table is written")
    parser.add_argument("--mode", choices=[*MODES, "both", "people"], default="both",
                        help="labels: a label column; shares: share columns F,M; both (default); each weighted by "
                        "the count column. people: a row per person from names-dataset surnames (data.rows=people)")
    parser.add_argument("--surnames-cache", default="data/surnames",
                        help="the converted names-dataset surnames for --mode people (default data/surnames)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # the child process: JSON settings of one mode
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(json.loads(args.measure))))
        return 0
    if args.rows < 10:
        raise UserError(f"--rows {args.rows}: pass at least 10 rows")
    if Path(args.out).is_dir():
        raise UserError(f"--out {args.out} is a folder: pass the path of the table to write")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    people = args.mode == "people"
    path = write_people(Path(args.out), args.rows, Path(args.surnames_cache)) if people else \
        write_synthetic(Path(args.out), args.rows)
    print(f"wrote {path}: {args.rows:,} rows")
    print(f"{'mode':<8} {'rows':>10} {'names':>10} {'read rows/s':>12} {'split rows/s':>13} "
          f"{'encode rows/s':>14} {'peak RSS':>9}")
    for mode in MODES if args.mode == "both" else [args.mode]:
        settings = {"path": str(path), **(PEOPLE if people else MODES[mode])}
        child = subprocess.run([sys.executable, "-m", "benchmarks.table_scale", "--measure",
                                json.dumps(settings)], capture_output=True, text=True, env=clone_env())
        if child.returncode:
            print(child.stderr.strip().splitlines()[-1] if child.stderr.strip() else "failed", file=sys.stderr)
            return child.returncode
        result = json.loads(child.stdout.strip().splitlines()[-1])
        speed = result["rows_per_second"]
        print(f"{mode:<8} {result['rows']:>10,} {result['names']:>10,} {speed['read']:>12,.0f} "
              f"{speed['split']:>13,.0f} {speed['encode']:>14,.0f} {result['peak_rss_gb']:>6.2f} GiB")
        if result["distinct_names"] is not None:
            print(f"counted {result['rows']:,} people into {result['distinct_names']:,} distinct names")
    return 0



if __name__ == "__main__":
    sys.exit(main())
