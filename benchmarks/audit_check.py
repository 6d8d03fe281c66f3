"""How well `nameorigin audit` finds planted label errors: the shipped corpus' training rows (the default split,
seed 0) with 5 % of them given another label (seeded), drawn two ways: uniformly over the other labels, and from
the baseline's own out-of-sample confusion matrix (the realistic kind: a German name turned Dutch, not Korean).
Names the corpus lists under several languages are never flipped and left out of the scoring (their second label
is not an error). Each kind is read at the audit's fixed threshold (nameorigin.analysis.audit.THRESHOLD, picked
at seed 0: read it at other seeds) and at cleanlab's own cut; the curve ranks every scored row by the given label's
probability and reads precision and recall at each depth.

  python -m benchmarks.audit_check --seed 1
  python -m benchmarks.audit_check --rate 0.05 --seed 2 --json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

import numpy as np

from nameorigin.analysis.audit import audit, out_of_sample
from nameorigin.data.corpus import read_corpus, shipped_corpus, split_by_name

DEPTHS = (0.01, 0.02, 0.03, 0.05, 0.075, 0.10)  # of the scored rows


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
    flagged = np.zeros(len(changed), dtype=bool)
    flagged[found] = True
    hits = int((flagged & changed & scored).sum())
    return {"flagged": int((flagged & scored).sum()), "precision": hits / max(int((flagged & scored).sum()), 1),
            "recall": hits / max(int((changed & scored).sum()), 1)}


def check(kind: str, train: list[tuple[str, str]], labels: list[str], rate: float, seed: int,
          confusion: np.ndarray | None) -> dict:
    noisy, changed, scored = planted(train, labels, rate, seed, confusion)
    found = audit(noisy, seed=seed)
    cleanlab = audit(noisy, seed=seed, cleanlab_cut=True)
    given = found.given()
    quality = found.probabilities[np.arange(len(noisy)), given]
    order = [row for row in np.argsort(quality, kind="stable") if scored[row]]
    curve = []
    for depth in DEPTHS:
        top = np.array(order[: int(depth * scored.sum())], dtype=np.int64)
        curve.append({"depth": depth, **scores(top, changed, scored)})
    return {"kind": kind, "rows": len(noisy), "flipped": int(changed.sum()), **scores(found.suspects, changed, scored),
            "cleanlab_cut": scores(cleanlab.suspects, changed, scored), "curve": curve,
            "seconds": sum(found.seconds.values())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=0.05, help="share of training rows relabelled (default 0.05)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the flips and the folds (default 0)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if not 0 < args.rate < 0.5:
        parser.error("--rate must be between 0 and 0.5")
    train = split_by_name(read_corpus(shipped_corpus())[0], [0.8, 0.1, 0.1], 0)["train"]
    labels = sorted({label for _, label in train})
    clean = out_of_sample(train, labels, seed=args.seed)
    index = {label: i for i, label in enumerate(labels)}
    confusion = np.zeros((len(labels), len(labels)))
    np.add.at(confusion, ([index[label] for _, label in train], clean.argmax(1)), 1)
    results = [check(kind, train, labels, args.rate, args.seed, matrix)
               for kind, matrix in (("uniform", None), ("confusion-shaped", confusion))]
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    for result in results:
        own = result["cleanlab_cut"]
        print(f"{result['kind']}: {result['flipped']:,} of {result['rows']:,} training rows flipped; the threshold "
              f"flags {result['flagged']:,}: precision {result['precision']:.3f}, recall {result['recall']:.3f}; "
              f"cleanlab's cut flags {own['flagged']:,}: precision {own['precision']:.3f}, recall "
              f"{own['recall']:.3f} ({result['seconds']:.0f} s)")
        print("  depth  flagged  precision  recall")
        for point in result["curve"]:
            print(f"  {point['depth']:>5.1%}  {point['flagged']:>7,}  {point['precision']:>9.3f}  "
                  f"{point['recall']:>6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
