"""Does `--prior estimate` find a population's label mix? Resample a checkpoint's test split to `size` names, with
replacement, at a known label mix, estimate the mix from the names alone by EM (nameorigin.serving.prior), and
compare it with the mix actually drawn; and score accuracy on the resampled names before and after re-weighting to
the estimate.

The mixes: `uniform` over the labels (the default, far from most training mixes), `swapped` (the training prior
with its two largest labels' shares exchanged) or a JSON file of label -> share. Beside the estimate it reports a
ceiling that serving can never reach: EM again, with the temperature fitted on the test names themselves. When
that is still far from the drawn mix, the error comes from how the model separates the labels, not from the
temperature carried from validation.

  python -m benchmarks.prior_check <run>/checkpoints/refit.ckpt --mix swapped
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import torch

from nameorigin.analysis.evaluate import checkpoint_splits
from nameorigin.base.errors import UserError, exits_2_on_user_error
from nameorigin.data.corpus import shipped_corpus
from nameorigin.model.calibration import fit_temperature
from nameorigin.serving.predict import Predictor
from nameorigin.serving.prior import estimate_prior, read_prior, reweight


def named_mix(spec: str, predictor: Predictor) -> torch.Tensor:
    """`uniform`, `swapped` (the training mix with its two largest labels' shares swapped), `dominated` (the
    largest training label at 98 %, the rest in their training proportions), `absent` (every third label absent,
    the rest in their training proportions) or a JSON file of label -> share, as a distribution over the
    predictor's labels."""
    mix = predictor.training_shares.clone()
    if spec == "swapped":
        first, second = mix.topk(2).indices.tolist()
        mix[first], mix[second] = mix[second].item(), mix[first].item()
        return mix
    if spec == "dominated":
        top = int(mix.argmax())
        mix[top] = 0.0
        mix = 0.02 * mix / mix.sum()
        mix[top] = 0.98
        return mix
    if spec == "absent":
        mix[::3] = 0.0
        return mix / mix.sum()
    if spec == "estimate":
        raise UserError("--mix estimate: the mix drawn must be known; pass uniform, swapped, dominated, absent "
                        "or a JSON file")
    return read_prior(spec, predictor.labels)


def prior_shift_check(predictor: Predictor, root: str | Path, mix: torch.Tensor | None = None, size: int = 5000,
                      seed: int = 0) -> dict:
    labels = predictor.labels
    mix = torch.full((len(labels),), 1 / len(labels)) if mix is None else mix
    test = checkpoint_splits(predictor, root)["test"]
    by_label: dict[int, list[int]] = {}
    for row, (_, label) in enumerate(test):
        by_label.setdefault(labels.index(label), []).append(row)
    present = torch.tensor([i in by_label for i in range(len(labels))], dtype=torch.float)
    mix = mix * present / (mix * present).sum()  # a label with no test name cannot be drawn
    rng = random.Random(seed)
    drawn_labels = rng.choices(range(len(labels)), weights=mix.tolist(), k=size)
    rows = torch.tensor([rng.choice(by_label[k]) for k in drawn_labels])
    truth = torch.tensor(drawn_labels)
    drawn = torch.bincount(truth, minlength=len(labels)).float() / size
    test_probs = predictor.probabilities([predictor.encode(name)[0] for name, _ in test])
    probs = test_probs[rows]
    estimate = estimate_prior(probs, predictor.trained_prior)
    adjusted = reweight(probs, predictor.trained_prior, estimate)
    # The ceiling: a temperature fitted on the test names (in the test split's own mix), which serving never has.
    log_probs = test_probs.clamp_min(1e-30).log()
    test_targets = torch.tensor([labels.index(label) for _, label in test])
    refitted = (log_probs[rows] / fit_temperature(log_probs, test_targets)).softmax(-1)
    ceiling = estimate_prior(refitted, predictor.trained_prior)
    distance = lambda prior: float((prior - drawn).abs().sum() / 2)  # noqa: E731
    return {"size": size, "labels": labels, "drawn": drawn.tolist(), "estimate": estimate.tolist(),
            "trained_prior": predictor.trained_prior.tolist(),
            "total_variation": distance(estimate),
            "total_variation_of_the_trained_prior": distance(predictor.trained_prior),
            "total_variation_with_the_temperature_fitted_on_test": distance(ceiling),
            "accuracy_before": float((probs.argmax(-1) == truth).float().mean()),
            "accuracy_after": float((adjusted.argmax(-1) == truth).float().mean())}


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a .ckpt trained on the tutorial corpus (or --corpus)")
    parser.add_argument("--corpus", help="the corpus it trained on (default: the shipped one)")
    parser.add_argument("--mix", default="uniform",
                        help="the label mix drawn: uniform (default), swapped (the training prior with its two "
                             "largest shares exchanged) or a JSON file of label -> share")
    parser.add_argument("--size", type=int, default=5000, help="names resampled (default 5000)")
    parser.add_argument("--seed", type=int, default=0, help="the resampling seed (default 0)")
    args = parser.parse_args(argv)
    if args.size < 1:
        raise UserError(f"--size {args.size}: resample at least one name")
    predictor = Predictor.load(args.checkpoint)
    result = prior_shift_check(predictor, args.corpus or shipped_corpus(), named_mix(args.mix, predictor),
                               size=args.size, seed=args.seed)
    print(json.dumps({k: v for k, v in result.items() if k not in ("labels",)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
