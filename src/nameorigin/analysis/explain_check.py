"""Do the explanations mean something? Two checks on a checkpoint's own test names
(`nameorigin evaluate CKPT [DIR] --explain`):

- the residual: how far the parts are from adding up, against the size of the score they explain;
- deletion: delete each name's character with the largest contribution, and compare the fall in the chosen
  label's probability with deleting a character at random. Random is scored both ways: one draw per name (seed
  0), and the expectation (the mean over every character of the name).
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

from nameorigin.analysis.evaluate import checkpoint_splits
from nameorigin.base.textnorm import normalize_name
from nameorigin.serving.predict import BATCH_SIZE, Predictor


def explanation_check(predictor: Predictor, root: str | Path, batch_size: int = BATCH_SIZE, seed: int = 0) -> dict:
    names = sorted({name for name, _ in checkpoint_splits(predictor, root)["test"]})
    encoded = [predictor.encode(name) for name in names]
    kept = [(normalize_name(name, predictor.normalize), codes) for name, (codes, error) in zip(names, encoded,
            strict=True) if error is None and len(codes) >= 2]  # one character: nothing to compare
    clean, codes = [name for name, _ in kept], [c for _, c in kept]
    why = predictor.explain_encoded(codes, clean, batch_size)
    label = torch.tensor([predictor.labels.index(w.label) for w in why])

    def chosen(encoded: list[list[int]], rows: list[int]) -> torch.Tensor:
        return predictor.probabilities(encoded, batch_size)[torch.arange(len(rows)), label[rows]]

    everyone = list(range(len(codes)))
    before = chosen(codes, everyone)
    deleted = lambda positions: [c[:j] + c[j + 1:] for c, j in zip(codes, positions, strict=True)]  # noqa: E731
    top = [max(range(len(c)), key=w.by_character.__getitem__) for c, w in zip(codes, why, strict=True)]
    rng = random.Random(seed)
    drawn = [rng.randrange(len(c)) for c in codes]
    fall_top, fall_drawn = before - chosen(deleted(top), everyone), before - chosen(deleted(drawn), everyone)
    expected = torch.zeros(len(codes))
    for j in range(max(len(c) for c in codes)):
        rows = [i for i, c in enumerate(codes) if j < len(c)]
        expected[rows] += before[rows] - chosen([codes[i][:j] + codes[i][j + 1:] for i in rows], rows)
    expected /= torch.tensor([len(c) for c in codes], dtype=torch.float)
    residual = torch.tensor([abs(w.residual) for w in why])
    score = torch.tensor([abs(w.score) for w in why])
    return {"names": len(codes), "mean_abs_residual": float(residual.mean()), "mean_abs_score": float(score.mean()),
            "residual_share": float(residual.mean() / score.mean()),
            "fall_top": float(fall_top.mean()), "fall_random": float(fall_drawn.mean()),
            "fall_expected_random": float(expected.mean()),
            "share_top_beats_random": float((fall_top > fall_drawn).float().mean()),
            "share_random_is_top": float((torch.tensor(top) == torch.tensor(drawn)).float().mean()),
            "share_top_beats_expected_random": float((fall_top > expected).float().mean())}


def format_check(result: dict) -> str:
    return "\n".join([
        f"explanations of the {result['names']} test names (two characters or more):",
        f"  residual   mean |residual| {result['mean_abs_residual']:.2e} = {result['residual_share']:.2e} of the "
        f"mean |score| {result['mean_abs_score']:.3f}",
        f"  deletion   the top character: p(label) falls {result['fall_top']:.4f} on average; a random one: "
        f"{result['fall_random']:.4f} (expected over every character: {result['fall_expected_random']:.4f})",
        f"             the top character's fall is larger for {result['share_top_beats_random']:.1%} of names than "
        f"a random draw's (the draw is the top character for {result['share_random_is_top']:.1%}), and for "
        f"{result['share_top_beats_expected_random']:.1%} than the expected random fall",
    ])
