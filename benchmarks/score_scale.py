"""How fast a population table is scored: write a person-level table of N rows, surnames drawn from names-dataset
by Zipf weights (exponent 1.1 over the names ordered by their best rank in any country), then, each in a fresh
process, score it as `nameorigin predict --file --column` does, Parquet in and out and CSV in and out, beside
scoring every row of its first rows on their own (the reference); report rows/s, distinct names and peak RSS,
and check that grouping gives the reference's answers on a sample. With --ray N, the Parquet table is also scored
through Ray Data on a local cluster of this machine's cores (N actors), and its output compared with the
single-process Parquet output row by row. With --composition, `--composition` is timed on the Parquet table. With
--bf16, the Parquet table is also scored with precision=bf16 and compared with float32 row by row. --repeat N runs
every contender N times, interleaved, and reports each one's median round. "outside forward" is the share of the
wall time not spent in the model's forward passes.

  python -m benchmarks.score_scale refit.ckpt                   # 10M rows, a 1M-row reference slice, 200k checked
  python -m benchmarks.score_scale refit.ckpt --rows 1000000 --slice 100000 --check 20000 --ray 2 --composition
  python -m benchmarks.score_scale refit.ckpt --bf16 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import clone_env
from nameorigin.base.errors import UserError, exits_2_on_user_error

ZIPF_EXPONENT = 1.1
CONTENDERS = ("parquet", "csv", "every_row")


def surnames_by_best_rank() -> list[str]:
    """Every names-dataset surname (as the package spells it), most common first: by its best rank in any country,
    then by name; names the package ranks nowhere come last."""
    import gzip
    import pickle

    from nameorigin.data.surnames import package_pickle

    with gzip.open(package_pickle(), "rb") as f:
        raw = pickle.load(f)  # noqa: S301  (the installed package's own file, never a user's path)
    best = {name: min(info["rank"].values()) if info.get("rank") else float("inf") for name, info in raw.items()}
    return sorted(best, key=lambda name: (best[name], name))


def write_people(folder: Path, rows: int, reference_rows: int, seed: int) -> dict[str, Path]:
    """people.parquet and people.csv (person_id, surname), and the first `reference_rows` rows as slice.parquet;
    reused when already written for these settings."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from nameorigin.base.atomic import write_atomically

    stem = folder / f"people_{rows}_seed{seed}"
    paths = {"parquet": stem.with_suffix(".parquet"), "csv": stem.with_suffix(".csv"),
             "slice": folder / f"people_{rows}_seed{seed}_first{reference_rows}.parquet"}
    if all(path.is_file() for path in paths.values()):
        return paths
    names = surnames_by_best_rank()
    weights = np.arange(1, len(names) + 1, dtype=np.float64) ** -ZIPF_EXPONENT
    picks = np.random.default_rng(seed).choice(len(names), size=rows, p=weights / weights.sum())
    table = pa.table({"person_id": np.arange(rows, dtype=np.int64),
                      "surname": pa.array(names, pa.string()).take(pa.array(picks))})
    write_atomically(paths["parquet"], lambda tmp: pq.write_table(table, tmp, row_group_size=1 << 20))
    write_atomically(paths["csv"], lambda tmp: pacsv.write_csv(table, tmp))
    write_atomically(paths["slice"], lambda tmp: pq.write_table(table.slice(0, reference_rows), tmp))
    return paths


def measure(spec: dict) -> dict:
    """One contender, in this process: score `source` into `out`; seconds, rows and peak RSS."""
    if spec.get("ray"):
        return measure_ray(spec)
    if spec.get("composition"):
        return measure_composition(spec)
    from nameorigin.serving.predict import Predictor
    from nameorigin.serving.table import predict_table

    predictor = Predictor.load(spec["checkpoint"])
    forward = timed(predictor)
    start = time.perf_counter()
    summary = predict_table(predictor, spec["source"], "surname", spec["out"], distinct=spec["distinct"],
                            precision=spec.get("precision", "float32"))
    seconds = time.perf_counter() - start
    return {"rows": summary.rows, "names": summary.names, "seconds": seconds, "forward_seconds": forward[0],
            "peak_rss_gb": peak_rss_gb()}


def timed(predictor: Any) -> list[float]:
    """Seconds spent in the model's forward passes (Predictor.probabilities) from now on, in a one-item list."""
    spent, forward = [0.0], predictor.probabilities

    def probabilities(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return forward(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start

    predictor.probabilities = probabilities
    return spent


def measure_composition(spec: dict) -> dict:
    """--composition on the Parquet table: each label's share with its intervals, the reference included (the
    checkpoint's own, or the shipped corpus' validation names for an older best.ckpt)."""
    from nameorigin.analysis.composition import checkpoint_reference, table_composition
    from nameorigin.serving.predict import Predictor

    predictor = Predictor.load(spec["checkpoint"])
    start = time.perf_counter()
    found = table_composition(predictor, spec["source"], "surname",
                              reference=checkpoint_reference(predictor, None)[0])
    seconds = time.perf_counter() - start
    return {"rows": found.rows + found.abstained + found.unusable, "names": None, "seconds": seconds,
            "peak_rss_gb": peak_rss_gb(), "methods": list(found.estimates)}


def measure_ray(spec: dict) -> dict:
    """The Ray contender: a local cluster of this machine's cores, `spec["ray"]` actors of one thread each. The
    seconds count the scoring job; starting the cluster is reported apart (a running cluster pays it once)."""
    import shutil

    import pyarrow.parquet as pq
    import ray

    from nameorigin.serving.ray_data import ActorPool, score_dataset

    start = time.perf_counter()
    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    started = time.perf_counter()
    shutil.rmtree(spec["out"], ignore_errors=True)
    try:
        score_dataset(spec["checkpoint"], spec["source"], spec["out"], "surname",
                      ActorPool(concurrency=spec["ray"], threads=1))
        seconds = time.perf_counter() - started
    finally:
        ray.shutdown()
    rows = sum(pq.ParquetFile(path).metadata.num_rows for path in Path(spec["out"]).glob("*.parquet"))
    return {"rows": rows, "names": None, "seconds": seconds, "cluster_start_seconds": started - start,
            "peak_rss_gb": peak_rss_gb()}


def same_as_single_process(ray_out: Path, single: Path) -> dict:
    """Ray's output (a folder of Parquet files, put in person_id order) or another scored file against the
    single-process Parquet output: every column equal but the probabilities, which may differ by float rounding
    (up to 1e-6), and how often the best label agrees."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(ray_out.glob("*.parquet")) if ray_out.is_dir() else [ray_out]
    ours = pa.concat_tables([pq.read_table(path) for path in files]).sort_by("person_id")
    theirs = pq.read_table(single)
    label = theirs.column_names[2]
    agreement = float(np.mean(ours.column(label).to_numpy(zero_copy_only=False)
                              == theirs.column(label).to_numpy(zero_copy_only=False)))
    gap, differing = 0.0, [] if ours.num_rows == theirs.num_rows else ["rows"]
    for name in theirs.column_names if not differing else []:
        a, b = (t.column(name).to_numpy(zero_copy_only=False) for t in (ours, theirs))
        if name.startswith("pred_probability"):
            gap = max(gap, float(np.nanmax(np.abs(a.astype(float) - b.astype(float)), initial=0.0)))
        elif not (a == b).all():
            differing.append(name)
    return {"rows": theirs.num_rows, "max_probability_gap": gap, "differing_columns": differing,
            "label_agreement": agreement}


def peak_rss_gb() -> float:
    """This process' peak resident memory. Linux's VmHWM starts afresh at exec; ru_maxrss would carry the
    parent's peak (the names-dataset pickle) into a child."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def same_answers(checkpoint: str, source: Path, rows: int, folder: Path) -> dict:
    """The first `rows` rows scored both ways: labels, sets and abstentions equal, the largest probability gap."""
    import pyarrow.parquet as pq

    from nameorigin.serving.predict import Predictor
    from nameorigin.serving.table import predict_table

    sample = folder / f"check_{rows}.parquet"
    pq.write_table(pq.read_table(source).slice(0, rows), sample)
    outs = {}
    for distinct in (True, False):
        outs[distinct] = folder / f"check_{rows}_{'grouped' if distinct else 'every_row'}.parquet"
        predict_table(Predictor.load(checkpoint), sample, "surname", outs[distinct], top_k=3, coverage=0.9,
                      distinct=distinct)
    grouped, every = (pq.read_table(outs[d]) for d in (True, False))
    gap, differing = 0.0, []
    for name in grouped.column_names[2:]:
        ours, theirs = (t.column(name).to_numpy(zero_copy_only=False) for t in (grouped, every))
        if name.startswith("pred_probability"):
            gap = max(gap, float(np.nanmax(np.abs(ours.astype(float) - theirs.astype(float)), initial=0.0)))
        elif not (ours == theirs).all():
            differing.append(name)
    return {"rows": rows, "max_probability_gap": gap, "differing_columns": differing}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", nargs="?", help="the model to score with: a .ckpt, .pt2 or .onnx")
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows of the person-level table (default 10M)")
    parser.add_argument("--slice", type=int, default=1_000_000,
                        help="rows scored one by one, the reference (default 1M, the table's first rows)")
    parser.add_argument("--check", type=int, default=200_000,
                        help="rows scored both ways and compared answer by answer (default 200k)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the Zipf draw (default 0)")
    parser.add_argument("--folder", default="outputs/score_scale", help="where the tables and outputs are written")
    parser.add_argument("--ray", type=int, default=0, metavar="ACTORS",
                        help="also score the Parquet table through Ray Data with this many actors (needs the [ray] "
                        "extra; default 0: not at all)")
    parser.add_argument("--composition", action="store_true",
                        help="also time --composition (each label's share with intervals) on the Parquet table")
    parser.add_argument("--bf16", action="store_true",
                        help="also score the Parquet table with precision=bf16 (the recurrent products in bfloat16)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of every contender, interleaved; each figure is its median (default 1)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # the child process: JSON of one contender
    args = parser.parse_args(argv)
    if args.measure:
        return args
    if not args.checkpoint:
        parser.error("pass the checkpoint to score with, e.g. outputs/<run>/checkpoints/refit.ckpt")
    if not 1 <= args.check <= args.rows or not 1 <= args.slice <= args.rows:
        parser.error(f"--slice {args.slice} and --check {args.check} must be between 1 and --rows {args.rows}")
    if Path(args.folder).is_file():
        parser.error(f"--folder {args.folder} is a file: pass a folder for the tables")
    return args


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.measure:
        print(json.dumps(measure(json.loads(args.measure))))
        return 0
    if not Path(args.checkpoint).is_file():
        raise UserError(f"checkpoint {args.checkpoint} does not exist: pass a .ckpt written by train.py")
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = write_people(folder, args.rows, args.slice, args.seed)
    specs = {"parquet": (paths["parquet"], folder / "scored.parquet", True),
             "parquet_bf16": (paths["parquet"], folder / "scored_bf16.parquet", True),
             "csv": (paths["csv"], folder / "scored.csv", True),
             "every_row": (paths["slice"], folder / "scored_every_row.parquet", False)}
    rounds: dict[str, list[dict]] = {}
    contenders = [*CONTENDERS, *(["parquet_bf16"] if args.bf16 else []), *(["ray"] if args.ray else []),
                  *(["composition"] if args.composition else [])]
    specs["composition"] = (paths["parquet"], folder / "unused", True)
    specs["ray"] = (paths["parquet"], folder / "scored_ray", True)
    for contender in [contender for _ in range(args.repeat) for contender in contenders]:
        source, out, distinct = specs[contender]
        spec = {"checkpoint": args.checkpoint, "source": str(source), "out": str(out), "distinct": distinct,
                "ray": args.ray if contender == "ray" else 0, "composition": contender == "composition",
                "precision": "bf16" if contender == "parquet_bf16" else "float32"}
        child = subprocess.run([sys.executable, "-m", "benchmarks.score_scale", "--measure", json.dumps(spec)],
                               capture_output=True, text=True, env=clone_env())
        if child.returncode:
            print(child.stderr.strip().splitlines()[-1] if child.stderr.strip() else "failed", file=sys.stderr)
            return child.returncode
        rounds.setdefault(contender, []).append(json.loads(child.stdout.strip().splitlines()[-1]))
    results = {contender: sorted(runs, key=lambda run: run["seconds"])[len(runs) // 2] for contender, runs in
               rounds.items()}  # the median round
    check = same_answers(args.checkpoint, paths["parquet"], args.check, folder)
    ray_check = same_as_single_process(specs["ray"][1], specs["parquet"][1]) if args.ray else None
    if args.json:
        print(json.dumps({"results": results, "check": check, "ray_check": ray_check}, indent=1))
        return 0
    reference = results["every_row"]["rows"] / results["every_row"]["seconds"]
    print(f"{'contender':<28} {'rows':>11} {'names scored':>13} {'seconds':>8} {'rows/s':>10} {'× every row':>12} "
          f"{'peak RSS':>9} {'outside forward':>16}")
    labels = {"parquet": "Parquet in and out", "parquet_bf16": "Parquet, precision=bf16", "csv": "CSV in and out",
              "every_row": "every row (Parquet slice)",
              "ray": f"Ray Data, {args.ray} actors", "composition": "--composition (Parquet)"}
    for contender, result in results.items():
        speed = result["rows"] / result["seconds"]
        names = "-" if result["names"] is None else f"{result['names']:,}"
        outside = "-" if "forward_seconds" not in result else f"{1 - result['forward_seconds'] / result['seconds']:.0%}"
        print(f"{labels[contender]:<28} {result['rows']:>11,} {names:>13} {result['seconds']:>8.1f} "
              f"{speed:>10,.0f} {speed / reference:>11.1f}× {result['peak_rss_gb']:>7.2f} GB {outside:>16}")
    if args.composition:
        print(f"--composition: {results['composition']['seconds'] / results['parquet']['seconds']:.2f}× the "
              f"Parquet scoring time ({', '.join(results['composition']['methods'])})")
    if ray_check:
        single = results["parquet"]["seconds"]
        differing = ray_check["differing_columns"]
        same = "same" if not differing else f"DIFFERENT in {', '.join(differing)}"
        print(f"Ray Data: {results['ray']['seconds'] / single:.2f}× the single-process Parquet time (its cluster "
              f"started in {results['ray']['cluster_start_seconds']:.1f} s more, in the driver's peak RSS above); "
              f"every row {same} as the single-process output, largest probability gap "
              f"{ray_check['max_probability_gap']:.1e}")
    same = "same" if not check["differing_columns"] else f"DIFFERENT in {', '.join(check['differing_columns'])}"
    print(f"first {check['rows']:,} rows scored both ways: labels, sets and abstentions {same}; largest "
          f"probability gap {check['max_probability_gap']:.1e}")
    if args.bf16:
        low = same_as_single_process(specs["parquet_bf16"][1], specs["parquet"][1])
        print(f"precision=bf16 against float32 on all {low['rows']:,} rows: best label the same on "
              f"{low['label_agreement']:.4%}, largest probability gap {low['max_probability_gap']:.1e}")
    checks = [check, *([ray_check] if ray_check else [])]
    return 0 if all(not c["differing_columns"] and c["max_probability_gap"] <= 1e-6 for c in checks) else 1



if __name__ == "__main__":
    sys.exit(main())
