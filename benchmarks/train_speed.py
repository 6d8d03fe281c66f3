"""Training speed side by side in real runs: each variant (a set of train.py overrides) trained at each seed, the
variants alternated seed by seed so a slow spell of the machine falls on all of them, one run at a time.

  python -m benchmarks.train_speed --variant before="model.impl=autograd data.batch_size=64" \
      --variant after="model.impl=bptt data.batch_size=128" --seeds 0,1,2 -- transfer.use=never refit.enabled=false

Per run: the median epoch's names/s from train.log (EpochTimer: validation left out), the best validation
accuracy, the fit's and the whole run's seconds. Per variant: their means, and the names/s and wall ratios to the
first variant. Prints JSON (benchmarks.record keeps it).

  python -m benchmarks.train_speed --profile --variant small="transfer.use=never" \
      --variant large="experiment=first_name_gender transfer.use=never"

--profile: each run under `debug=step_profile` (one short epoch), its step_profile.json instead: where a training
step's time goes (nameorigin.fit.step_profile).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EPOCH = re.compile(r"epoch \d+ trained in [\d.]+ s \(([\d.]+) names/s\)")


def one_run(overrides: list[str], seed: int, folder: Path, profile: bool = False) -> dict:
    start = time.perf_counter()
    overrides = [*overrides, "debug=step_profile"] if profile else overrides
    done = subprocess.run([sys.executable, str(ROOT / "train.py"), *overrides, f"seed={seed}",
                           "callbacks.progress_bar=null", f"hydra.run.dir={folder}"],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"error: train.py {shlex.join(overrides)} seed={seed} exited {done.returncode}: "
                 f"{done.stderr.strip()[-500:]}")
    if profile:
        return {"seed": seed, **json.loads((folder / "step_profile.json").read_text())}
    rates = [float(rate) for rate in EPOCH.findall((folder / "train.log").read_text())]
    metrics = json.loads((folder / "results.json").read_text())["metrics"]
    return {"seed": seed, "names_per_s": round(statistics.median(rates), 1), "val_acc": metrics["val/acc_best"],
            "test_acc": metrics.get("test/acc"), "fit_s": round(metrics["time/fit_s"], 1), "wall_s": round(wall, 1)}


def summary(runs: list[dict], first: list[dict]) -> dict:
    mean = {key: statistics.mean(run[key] for run in runs) for key in ("names_per_s", "val_acc", "fit_s", "wall_s")}
    base = {key: statistics.mean(run[key] for run in first) for key in ("names_per_s", "wall_s")}
    return {**{f"mean_{key}": round(value, 4) for key, value in mean.items()},
            "names_per_s_ratio": round(mean["names_per_s"] / base["names_per_s"], 2),
            "wall_ratio": round(mean["wall_s"] / base["wall_s"], 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", action="append", required=True, metavar="NAME=OVERRIDES",
                        help="a name, =, and the train.py overrides it adds (space-separated); the first is the "
                        "reference of the ratios")
    parser.add_argument("--seeds", default="0", help="comma-separated training seeds (default 0)")
    parser.add_argument("--profile", action="store_true", help="each run one short epoch under debug=step_profile: "
                        "where a training step's time goes")
    parser.add_argument("common", nargs=argparse.REMAINDER, help="-- then overrides every run gets")
    args = parser.parse_args(argv)
    variants = {}
    for given in args.variant:
        name, _, overrides = given.partition("=")
        if not name or not overrides:
            parser.error(f"--variant {given!r}: give NAME=OVERRIDES")
        variants[name] = shlex.split(overrides)
    common = args.common[1:] if args.common[:1] == ["--"] else args.common
    seeds = [int(seed) for seed in args.seeds.split(",")]
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as scratch:
        for seed in seeds:
            for name, overrides in variants.items():
                runs[name].append(one_run([*common, *overrides], seed, Path(scratch) / f"{name}-{seed}", args.profile))
                print(f"{name} seed {seed}: {runs[name][-1]}", file=sys.stderr, flush=True)
    first = runs[next(iter(variants))]
    print(json.dumps({"common": common, "seeds": seeds,
                      "variants": {name: {"overrides": variants[name], "runs": runs[name],
                                          **({} if args.profile else summary(runs[name], first))}
                                   for name in variants}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
