"""The default run at split seeds 0-2 x training seeds 0-2, each beside the n-gram LR on its own test names, and
the nine runs' pooled lead.

  python -m benchmarks.seeds --json                     # nine runs of python train.py, about 20 minutes on 2 cores
  python -m benchmarks.seeds --json -- model.cell=lstm  # any overrides, given to every run

Each run trains and tests as `python train.py data.split_seed=S seed=T` (its own margin step off: the baseline
depends on the split alone, so it is fitted here once per split, as the margin step fits it: C on validation, then
refitted on train + validation). Per run: test accuracy and macro-F1 beside the baseline's, and the lead with its
95 % paired bootstrap interval over that run's test names.

Pooled: the mean of the nine leads, with a 95 % percentile interval from resampling test names, one resample of
each split's test names shared by that split's three training seeds (their leads are measured on the same names,
so they are not independent), 10,000 resamples. It states how much the mean lead could move with other test
names of the same corpus; the training seeds' own spread is in the per-run figures.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

SPLIT_SEEDS, SEEDS = (0, 1, 2), (0, 1, 2)
ROOT = Path(__file__).resolve().parent.parent


def train_run(split_seed: int, seed: int, overrides: list[str]) -> Path:
    """One run in its own process; its folder."""
    command = [sys.executable, str(ROOT / "train.py"), f"data.split_seed={split_seed}", f"seed={seed}",
               "margin.enabled=false", "callbacks.progress_bar=null", *overrides]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"error: the run at split seed {split_seed}, seed {seed} exited {done.returncode}: "
                 f"{done.stderr.strip()[-500:]}")
    return Path(re.search(r"tensorboard --logdir (\S+)\s*$", done.stdout).group(1))


def correct_names(run: Path) -> tuple[np.ndarray, dict]:
    """Which of its test names the run's tested model gets right, and its results."""
    from nameorigin.analysis.evaluate import evaluate
    from nameorigin.data.corpus import shipped_corpus
    from nameorigin.serving.predict import Predictor
    from nameorigin.training.transfer import tried_starting_point

    written = json.loads((run / "results.json").read_text())
    results = written["metrics"]
    predictor = Predictor.load(written["model"])  # the model the run tested: the refit, best.ckpt, or transfer's
    root = predictor.data_settings.get("root") or shipped_corpus()
    return np.array(evaluate(predictor, root)["correct"]), results | {"root": str(root),
                                                                       "starting_point": tried_starting_point(written)}


def baseline_correct(predictor_results: dict, split_seed: int) -> tuple[np.ndarray, dict]:
    from nameorigin.data.corpus import read_corpus, split_by_name
    from nameorigin.evaluation.baselines import fit_tfidf_baseline

    splits = split_by_name(read_corpus(predictor_results["root"])[0], [0.8, 0.1, 0.1], split_seed)
    fitted = fit_tfidf_baseline(splits, refit=True)
    truth = [label for _, label in splits["test"]]
    return np.array([p == t for p, t in zip(fitted["test_predictions"], truth, strict=True)]), fitted


def pooled(model: dict, baseline: dict, samples: int = 10_000, seed: int = 0) -> tuple[float, list[float]]:
    """Mean lead over every run, and its interval from shared resamples of each split's test names."""
    rng = np.random.default_rng(seed)
    leads = np.zeros(samples)
    runs = sum(len(rows) for rows in model.values())
    for split, rows in model.items():
        n = len(baseline[split])
        draws = rng.integers(0, n, size=(samples, n))
        base = baseline[split][draws].mean(1)
        for correct in rows:
            leads += correct[draws].mean(1) - base
    leads /= runs
    mean = np.mean([c.mean() - baseline[s].mean() for s, rows in model.items() for c in rows])
    return float(mean), [float(x) for x in np.quantile(leads, [0.025, 0.975])]


def measure(overrides: list[str]) -> dict:
    from nameorigin.evaluation.margin import paired

    runs, model, baseline, baseline_f1 = [], {}, {}, {}
    for split_seed in SPLIT_SEEDS:
        for seed in SEEDS:
            correct, results = correct_names(train_run(split_seed, seed, overrides))
            if split_seed not in baseline:
                baseline[split_seed], fitted = baseline_correct(results, split_seed)
                baseline_f1[split_seed] = fitted["test_macro_f1"]
            if abs(float(correct.mean()) - results["test/acc"]) > 1e-6:  # the run's own test read the same model
                sys.exit(f"error: split {split_seed} seed {seed}: {correct.mean()} re-scored, {results['test/acc']} "
                         "in the run")
            model.setdefault(split_seed, []).append(correct)
            compared = paired(torch.from_numpy(correct), torch.from_numpy(baseline[split_seed]))
            runs.append({"split_seed": split_seed, "seed": seed, "val_acc": results["val/acc_best"],
                         "transferred": bool(results.get("transfer/chosen")),
                         "starting_point": results["starting_point"],
                         "test_acc": results["test/acc"], "test_acc_any": results["test/acc_any"],
                         "test_macro_f1": results["test/macro_f1"],
                         "baseline_acc": float(baseline[split_seed].mean()),
                         "baseline_macro_f1": baseline_f1[split_seed],
                         "margin": 100 * (float(correct.mean()) - float(baseline[split_seed].mean())),
                         "interval": [100 * x for x in compared["interval"]], "test_names": len(correct)})
    mean_lead, low_high = pooled(model, baseline)

    def mean(rows: list[dict], key: str) -> float:
        return float(np.mean([row[key] for row in rows]))

    first = [run for run in runs if run["seed"] == 0]
    keys = ("test_acc", "test_macro_f1", "baseline_acc", "baseline_macro_f1", "margin")
    return {"runs": runs, "splits": first, "mean": {key: mean(first, key) for key in keys},
            "nine_runs": {**{key: mean(runs, key) for key in keys}, "margin": 100 * mean_lead,
                          "interval": [100 * x for x in low_high]}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON (benchmarks.record reads it)")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="-- then Hydra overrides for every run")
    args = parser.parse_args(argv)
    overrides = args.overrides[1:] if args.overrides[:1] == ["--"] else args.overrides
    figures = measure(overrides)
    if args.json:
        print(json.dumps(figures, indent=1))
        return 0
    for run in figures["runs"]:
        print(f"split {run['split_seed']} seed {run['seed']}: test {run['test_acc']:.4f} vs LR "
              f"{run['baseline_acc']:.4f}, lead {run['margin']:+.2f} [{run['interval'][0]:+.2f}, "
              f"{run['interval'][1]:+.2f}]")
    nine = figures["nine_runs"]
    print(f"nine runs: mean lead {nine['margin']:+.2f}, pooled 95 % interval [{nine['interval'][0]:+.2f}, "
          f"{nine['interval'][1]:+.2f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
