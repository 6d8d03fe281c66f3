"""What precision=bf16 costs in answers: a checkpoint's test split scored in float32 and in bf16 (the recurrent
products in bfloat16, the state in float32), side by side: top-1 agreement, the largest probability gap, test
accuracy and top-label ECE of each, and the forward passes' names/s (median of --repeat rounds, interleaved).

  python -m benchmarks.precision outputs/<run>/checkpoints/refit.ckpt              # the shipped corpus
  python -m benchmarks.precision refit.ckpt --data data/first_names/gender.csv --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from nameorigin.analysis.evaluate import checkpoint_splits
from nameorigin.base.errors import UserError, exits_2_on_user_error
from nameorigin.data.corpus import shipped_corpus
from nameorigin.model.calibration import expected_calibration_error
from nameorigin.serving.options import PRECISIONS
from nameorigin.serving.predict import Predictor


def compare(checkpoint: str, data: str, repeat: int) -> dict:
    predictor = Predictor.load(checkpoint)
    test = checkpoint_splits(predictor, data)["test"]
    tokens, lengths, errors = predictor.encode_many([name for name, _ in test])
    usable = torch.tensor([error is None for error in errors])
    encoded = (tokens[usable], lengths[usable])
    truth = torch.tensor([predictor.labels.index(label) for _, label in test])[usable]
    probs, seconds = {}, {precision: [] for precision in PRECISIONS}
    for _ in range(repeat):
        for precision in PRECISIONS:
            start = time.perf_counter()
            probs[precision] = predictor.probabilities(encoded, precision=precision)
            seconds[precision].append(time.perf_counter() - start)
    full, low = probs["float32"], probs["bf16"]
    return {"names": int(usable.sum()), "agreement": float((full.argmax(1) == low.argmax(1)).double().mean()),
            "max_probability_gap": float((full - low).abs().max()),
            **{f"{key}_{precision}": value for precision in PRECISIONS for key, value in
               (("accuracy", float((probs[precision].argmax(1) == truth).double().mean())),
                ("ece", expected_calibration_error(probs[precision], truth)),
                ("names_per_second", int(usable.sum()) / statistics.median(seconds[precision])))}}


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a one-layer .ckpt written by train.py")
    parser.add_argument("--data", help="the corpus folder or table it was trained on (default: the shipped corpus)")
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds of each precision (default 3)")
    args = parser.parse_args(argv)
    if not Path(args.checkpoint).is_file():
        raise UserError(f"checkpoint {args.checkpoint} does not exist: pass a .ckpt written by train.py")
    found = compare(args.checkpoint, args.data or str(shipped_corpus()), max(1, args.repeat))
    print(f"test names scored: {found['names']:,}")
    print(f"{'precision':<10} {'accuracy':>9} {'ECE':>7} {'names/s (forward)':>18}")
    for precision in PRECISIONS:
        print(f"{precision:<10} {found[f'accuracy_{precision}']:>9.4f} {found[f'ece_{precision}']:>7.4f} "
              f"{found[f'names_per_second_{precision}']:>18,.0f}")
    speed = found["names_per_second_bf16"] / found["names_per_second_float32"]
    print(f"bf16 against float32: top-1 agreement {found['agreement']:.4%}, largest probability gap "
          f"{found['max_probability_gap']:.1e}, ECE {found['ece_bf16'] - found['ece_float32']:+.4f}, "
          f"forward {speed:.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
