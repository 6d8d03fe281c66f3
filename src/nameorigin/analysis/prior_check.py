"""Does `--prior estimate` find a population's label mix? Resample a checkpoint's test split to `size` names, with
replacement, at a known label mix (default: uniform over the labels, far from the training mix), estimate the
mix from the names alone by EM (nameorigin.serving.prior), and compare it with the mix actually drawn; and score
accuracy on the resampled names before and after re-weighting to the estimate.

  python -m nameorigin.analysis.prior_check <run>/checkpoints/refit.ckpt
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import torch

from nameorigin.analysis.evaluate import checkpoint_splits
from nameorigin.base.errors import exits_2_on_user_error
from nameorigin.data.names import shipped_corpus
from nameorigin.serving.predict import Predictor
from nameorigin.serving.prior import estimate_prior, reweight


def prior_shift_check(predictor: Predictor, root: str | Path, mix: torch.Tensor | None = None, size: int = 5000,
                      seed: int = 0) -> dict:
    labels = predictor.labels
    mix = torch.full((len(labels),), 1 / len(labels)) if mix is None else mix
    by_label: dict[int, list[str]] = {}
    for name, label in checkpoint_splits(predictor, root)["test"]:
        by_label.setdefault(labels.index(label), []).append(name)
    present = torch.tensor([i in by_label for i in range(len(labels))], dtype=torch.float)
    mix = mix * present / (mix * present).sum()  # a label with no test name cannot be drawn
    rng = random.Random(seed)
    drawn_labels = rng.choices(range(len(labels)), weights=mix.tolist(), k=size)
    names = [rng.choice(by_label[k]) for k in drawn_labels]
    truth = torch.tensor(drawn_labels)
    drawn = torch.bincount(truth, minlength=len(labels)).float() / size
    probs = predictor.probabilities([predictor.encode(name)[0] for name in names])
    estimate = estimate_prior(probs, predictor.trained_prior)
    adjusted = reweight(probs, predictor.trained_prior, estimate)
    return {"size": size, "labels": labels, "drawn": drawn.tolist(), "estimate": estimate.tolist(),
            "trained_prior": predictor.trained_prior.tolist(),
            "total_variation": float((estimate - drawn).abs().sum() / 2),
            "total_variation_of_the_trained_prior": float((predictor.trained_prior - drawn).abs().sum() / 2),
            "accuracy_before": float((probs.argmax(-1) == truth).float().mean()),
            "accuracy_after": float((adjusted.argmax(-1) == truth).float().mean())}


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a .ckpt trained on the tutorial corpus (or --corpus)")
    parser.add_argument("--corpus", help="the corpus it trained on (default: the shipped one)")
    parser.add_argument("--size", type=int, default=5000, help="names resampled (default 5000)")
    parser.add_argument("--seed", type=int, default=0, help="the resampling seed (default 0)")
    args = parser.parse_args(argv)
    result = prior_shift_check(Predictor.load(args.checkpoint), args.corpus or shipped_corpus(), size=args.size,
                               seed=args.seed)
    print(json.dumps({k: v for k, v in result.items() if k not in ("labels",)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
