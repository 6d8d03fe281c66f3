"""How well `--composition` finds a table's label mix, where the truth is known: resample a checkpoint's test split
into tables of `size` names at known label mixes, estimate each table's composition, and report per method the
mean absolute error of the shares and, for each method that has intervals (adjusted), how often they hold the
true share, over every (table, label) pair. The reference (the adjusted method's confusion matrix) is the one the
checkpoint carries: the validation names as best.ckpt answers them, for best.ckpt and refit.ckpt alike (a
checkpoint without one: its validation names, answered now, refused for a refit, which trained on them).

  python -m benchmarks.composition_check <run>/checkpoints/refit.ckpt \\
      --mix uniform swapped docs/priors/census_like.json docs/priors/east_asian.json docs/priors/european.json
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from benchmarks.prior_check import named_mix
from nameorigin.analysis.composition import (
    INTERVAL_METHODS,
    METHODS,
    Resampling,
    answered,
    estimate,
    reference_from,
    stored_reference,
)
from nameorigin.analysis.evaluate import checkpoint_splits
from nameorigin.base.errors import UserError, exits_2_on_user_error
from nameorigin.data.batching import is_refit
from nameorigin.data.corpus import shipped_corpus
from nameorigin.serving.predict import Predictor

CHECK_RESAMPLING = Resampling(bootstraps=100)  # per table: 200 tables a mix make the coverage figure


@dataclass(frozen=True)
class Draws:
    """The tables drawn per mix, and the names in each."""

    tables: int = 200
    size: int = 5000


def composition_check(predictor: Predictor, root: str | Path, mixes: dict[str, torch.Tensor], draws: Draws = Draws(),
                      resampling: Resampling = CHECK_RESAMPLING, abstain: bool = True) -> dict:
    """`abstain`: leave the names the rule turns away out of each table's estimate, as --composition does (the
    truth stays each table's whole mix)."""
    tables, size, seed = draws.tables, draws.size, resampling.seed
    splits = checkpoint_splits(predictor, root)
    reference = stored_reference(predictor)
    if reference is None:
        if is_refit(predictor.data_settings):
            raise UserError("this refitted checkpoint carries no held-out reference and trained on its validation "
                            "names: check the run's best.ckpt")
        reference = reference_from(predictor, splits["val"])
        reference.measured_on = "the validation names, answered by this model"
    test = splits["test"]
    labels = predictor.labels
    truth_of = np.array([labels.index(label) for _, label in test])
    probs, usable, abstained = answered(predictor, [name for name, _ in test])
    kept = usable & ~abstained if abstain else usable
    by_label = {k: np.flatnonzero(truth_of == k) for k in range(len(labels))}
    present = np.array([len(by_label[k]) > 0 for k in range(len(labels))])
    rng = np.random.default_rng(seed)
    results = {}
    for mix_name, mix in mixes.items():
        weights = mix.numpy() * present
        weights = weights / weights.sum()
        errors = {method: [] for method in METHODS}
        covered = {method: [] for method in INTERVAL_METHODS}
        widths = {method: [] for method in INTERVAL_METHODS}
        for table in range(tables):
            drawn = rng.choice(len(labels), size=size, p=weights)
            rows = np.array([rng.choice(by_label[k]) for k in drawn])
            truth = np.bincount(drawn, minlength=len(labels)) / size
            counts = np.bincount(rows, minlength=len(test))
            keep = np.flatnonzero((counts > 0) & kept)
            found = estimate(probs[torch.from_numpy(keep)], torch.from_numpy(counts[keep]), predictor.trained_prior,
                             labels, reference, replace(resampling, seed=seed * 100_003 + table))
            for method in METHODS:
                errors[method].append(np.abs(np.array(found.estimates[method]) - truth).mean())
            for method in INTERVAL_METHODS:
                low, high = np.array(found.intervals[method]).T
                covered[method].append(((low <= truth) & (truth <= high)).mean())
                widths[method].append((high - low).mean())
        results[mix_name] = {method: {"mae": float(np.mean(errors[method]))} for method in METHODS}
        for method in INTERVAL_METHODS:
            results[mix_name][method].update(coverage=float(np.mean(covered[method])),
                                             mean_width=float(np.mean(widths[method])))
    return {"tables": tables, "size": size, "bootstraps": resampling.bootstraps, "level": resampling.level,
            "reference_names": len(reference.targets), "reference": reference.measured_on, "mixes": results}


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a best.ckpt or refit.ckpt trained on the tutorial corpus (or --corpus)")
    parser.add_argument("--corpus", help="the corpus it trained on (default: the shipped one)")
    parser.add_argument("--mix", nargs="+", default=["uniform", "swapped"],
                        help="the label mixes drawn: uniform, swapped, dominated (one label at 98%%), absent "
                        "(a third of the labels absent) or JSON files of label -> share")
    parser.add_argument("--tables", type=int, default=200, help="tables per mix (default 200)")
    parser.add_argument("--size", type=int, default=5000, help="names a table (default 5000)")
    parser.add_argument("--bootstraps", type=int, default=100, help="bootstrap replicates a table (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="the resampling seed (default 0)")
    parser.add_argument("--no-abstain", action="store_true", help="count every usable name, as --composition "
                        "--no-abstain does")
    args = parser.parse_args(argv)
    if min(args.tables, args.size, args.bootstraps) < 1:
        raise UserError("--tables, --size and --bootstraps must be at least 1")
    predictor = Predictor.load(args.checkpoint)
    mixes = {Path(spec).stem: named_mix(spec, predictor) for spec in args.mix}
    print(json.dumps(composition_check(predictor, args.corpus or shipped_corpus(), mixes, Draws(args.tables, args.size),
                                       Resampling(bootstraps=args.bootstraps, seed=args.seed), not args.no_abstain),
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
