"""How well `nameorigin audit` finds planted label errors, on the shipped corpus' training rows (the default split,
seed 0) or on any table (`--table`, with its name and label columns, or share columns scored under each name's
majority label; `--sample` rows drawn from it with seed 0): `--rate` of the rows given another label (seeded by
`--seed`), drawn two ways: uniformly over the other labels, and from the n-gram model's own out-of-sample confusion
matrix (the realistic kind: a German name turned Dutch, not Korean). Names listed under several labels are never
flipped and left out of the scoring (their second label is not an error). One out-of-sample fit per kind is read
at every cut of nameorigin.analysis.audit.CUTS (the audit's default among them) and at the planted count of rows of
lowest given-label probability (what a count that fits the table allows); the curve ranks every scored row by the
given label's probability and reads precision and recall at each depth. Beside them, on the same flips, the yardstick
a practitioner would reach for: cleanlab's documented recipe (`recipe`).

  python -m benchmarks.audit_check --seed 1 2
  python -m benchmarks.audit_check --seed 1 2 --model ngram network --kind uniform     # the two models, same flips
  python -m benchmarks.audit_check --table data/nana/nana.csv --label-column nationality --sample 30000 --json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import warnings
from collections import Counter

import numpy as np

from nameorigin.analysis.audit import CUT, CUTS, MODEL, MODELS, THRESHOLD, OutOfSample, out_of_sample
from nameorigin.data.corpus import read_corpus, shipped_corpus, split_by_name

DEPTHS = (0.01, 0.02, 0.03, 0.05, 0.075, 0.10)  # of the scored rows
KINDS = ("uniform", "confusion-shaped")
RECIPE_C = 10.0  # the recipe's logistic regression, as a practitioner would set it up for names


def planted(train: list[tuple[str, str]], labels: list[str], rate: float, seed: int,
            confusion: np.ndarray | None) -> tuple[list[tuple[str, str]], np.ndarray, np.ndarray]:
    """The rows with `rate` of the single-label ones relabelled; which rows changed, which rows are scored."""
    rng = np.random.default_rng(seed)
    counts = Counter(name for name, _ in train)
    scored = np.array([counts[name] == 1 for name, _ in train])
    flipped = rng.choice(np.flatnonzero(scored), size=int(rate * len(train)), replace=False)
    index = {label: i for i, label in enumerate(labels)}
    noisy = list(train)
    for row in flipped:
        name, label = train[row]
        weights = np.ones(len(labels)) if confusion is None else confusion[index[label]].astype(float).copy()
        weights[index[label]] = 0
        weights = weights if weights.sum() > 0 else (np.arange(len(labels)) != index[label]).astype(float)
        noisy[row] = (name, labels[rng.choice(len(labels), p=weights / weights.sum())])
    changed = np.zeros(len(train), dtype=bool)
    changed[flipped] = True
    return noisy, changed, scored


def scores(found: np.ndarray, changed: np.ndarray, scored: np.ndarray) -> dict:
    """Flagged, precision, recall and F1 over the scored rows."""
    from sklearn.metrics import precision_recall_fscore_support

    flagged = np.zeros(len(changed), dtype=bool)
    flagged[found] = True
    precision, recall, f1, _ = precision_recall_fscore_support(changed[scored], flagged[scored], average="binary",
                                                               zero_division=0)
    return {"flagged": int((flagged & scored).sum()), "precision": float(precision), "recall": float(recall),
            "f1": float(f1)}


def check(kind: str, rows: list[tuple[str, str]], labels: list[str], rate: float, seed: int,
          confusion: np.ndarray | None, model: str = MODEL, yardstick: bool = True) -> dict:
    """Every cut on one set of flips, the planted count of lowest given-label probability ("planted_count"), the
    depth curve, and with `yardstick` cleanlab's recipe on the same flips."""
    noisy, changed, scored = planted(rows, labels, rate, seed, confusion)
    start = time.perf_counter()
    probabilities = out_of_sample(noisy, labels, seed=seed, settings=OutOfSample(model))
    seconds = time.perf_counter() - start
    index = {label: i for i, label in enumerate(labels)}
    given = np.array([index[label] for _, label in noisy])
    cuts = {cut: scores(choose(given, probabilities, THRESHOLD), changed, scored) for cut, choose in CUTS.items()}
    quality = probabilities[np.arange(len(noisy)), given]
    cuts["planted_count"] = scores(np.argsort(quality, kind="stable")[: int(changed.sum())], changed, scored)
    order = [row for row in np.argsort(quality, kind="stable") if scored[row]]
    curve = []
    for depth in DEPTHS:
        top = np.array(order[: int(depth * scored.sum())], dtype=np.int64)
        curve.append({"depth": depth, **scores(top, changed, scored)})
    found = {"kind": kind, "seed": seed, "model": model, "rows": len(noisy), "flipped": int(changed.sum()),
             "cut": CUT, **cuts[CUT], "cuts": cuts, "curve": curve, "seconds": seconds}
    if yardstick:
        start = time.perf_counter()
        found["recipe"] = {**scores(recipe(noisy, labels, seed), changed, scored),
                           "seconds": time.perf_counter() - start}
    return found


def recipe(rows: list[tuple[str, str]], labels: list[str], seed: int) -> np.ndarray:
    """cleanlab's documented recipe, the yardstick: out-of-sample probabilities from a simple classifier by 5-fold
    `cross_val_predict` on its own shuffled folds (a char 1-4-gram TF-IDF logistic regression, C=10, otherwise
    scikit-learn's defaults), then `cleanlab.filter.find_label_issues` with its defaults. The rows it flags. With
    170 labels the default 100 iterations stop short of convergence: run to it, a NaNa fold's held-out accuracy
    moves by a fifth of a point at three times the cost."""
    from cleanlab.filter import find_label_issues
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from threadpoolctl import threadpool_limits

    from nameorigin.evaluation.baselines import tfidf_ngrams

    index = {label: i for i, label in enumerate(labels)}
    given = np.array([index[label] for _, label in rows])
    folds = StratifiedKFold(n_splits=5, shuffle=True, random_state=seed)
    with threadpool_limits(1), warnings.catch_warnings():  # a label with fewer rows than folds is fine here too
        warnings.filterwarnings("ignore", "The least populated class", UserWarning)
        warnings.filterwarnings("ignore", category=ConvergenceWarning)
        probabilities = cross_val_predict(make_pipeline(tfidf_ngrams(), LogisticRegression(C=RECIPE_C)),
                                          [name for name, _ in rows], given, cv=folds, method="predict_proba",
                                          n_jobs=min(5, os.cpu_count() or 1))
    return np.flatnonzero(find_label_issues(given, probabilities))


def confusion_counts(rows: list[tuple[str, str]], labels: list[str], seed: int) -> np.ndarray:
    """[given, predicted] counts of the n-gram model's out-of-sample answers on the rows as they are."""
    clean = out_of_sample(rows, labels, seed=seed)
    index = {label: i for i, label in enumerate(labels)}
    counts = np.zeros((len(labels), len(labels)))
    np.add.at(counts, ([index[label] for _, label in rows], clean.argmax(1)), 1)
    return counts


def table_rows(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The rows audited: the corpus' default training split, or a table's pairs (a sample of them)."""
    if args.table is None:
        return split_by_name(read_corpus(shipped_corpus())[0], [0.8, 0.1, 0.1], 0)["train"]
    from nameorigin.config import TableDataConfig
    from nameorigin.data.table import read_table

    shares = args.share_columns.split(",") if args.share_columns else None
    pairs = read_table(TableDataConfig(path=args.table, name_column=args.name_column, label_column=args.label_column,
                                       share_columns=shares)).pairs
    if args.sample and args.sample < len(pairs):
        pairs = sorted(random.Random(0).sample(pairs, args.sample))
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=0.05, help="share of training rows relabelled (default 0.05)")
    parser.add_argument("--seed", type=int, nargs="+", default=[0], help="seeds of the flips and the folds, each "
                        "checked in turn (default 0)")
    parser.add_argument("--model", nargs="+", choices=list(MODELS), default=[MODEL],
                        help=f"the out-of-sample models compared on the same flips (default {MODEL})")
    parser.add_argument("--kind", nargs="+", choices=list(KINDS), default=list(KINDS),
                        help="the kinds of flips (default both)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--table", help="a table to audit instead of the corpus (CSV, TSV, Parquet, JSON Lines)")
    parser.add_argument("--name-column", default="name", help="the table's name column (default name)")
    parser.add_argument("--label-column", default="label", help="the table's label column (default label)")
    parser.add_argument("--share-columns", help="the table's share columns, comma-separated (instead of a label)")
    parser.add_argument("--sample", type=int, help="rows drawn from the table with seed 0 (default: all)")
    args = parser.parse_args(argv)
    if not 0 < args.rate < 0.5:
        parser.error("--rate must be between 0 and 0.5")
    train = table_rows(args)
    labels = sorted({label for _, label in train})
    matrices = {"uniform": None, "confusion-shaped": confusion_counts(train, labels, args.seed[0])
                if "confusion-shaped" in args.kind else None}
    results = [check(kind, train, labels, args.rate, seed, matrices[kind], model, yardstick=model == args.model[0])
               for seed in args.seed for kind in args.kind for model in args.model]
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    for result in results:
        print(f"{result['kind']}, seed {result['seed']}: {result['flipped']:,} of {result['rows']:,} rows flipped "
              f"({result['seconds']:.0f} s out of sample, {result['model']})")
        named = {**result["cuts"], **({"recipe": result["recipe"]} if "recipe" in result else {})}
        for cut, found in named.items():
            print(f"  {cut:>13}{' (default)' if cut == CUT else '':10}  flags {found['flagged']:>6,}: precision "
                  f"{found['precision']:.3f}, recall {found['recall']:.3f}, F1 {found['f1']:.3f}")
        print("  depth  flagged  precision  recall")
        for point in result["curve"]:
            print(f"  {point['depth']:>5.1%}  {point['flagged']:>7,}  {point['precision']:>9.3f}  "
                  f"{point['recall']:>6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
