"""Does autograd handle one layer reused at every step? Yes: the gradient is the sum of one piece per use.

  python -m benchmarks.reuse_demo                       # Linear(1,1) used twice on x=10, MSE against y=5
  python -m benchmarks.reuse_demo --uses 3 --w 0.5
  python -m benchmarks.reuse_demo --checkpoint best.ckpt --name Nakamura
"""

from __future__ import annotations

import argparse
import math
import sys

import torch
import torch.nn.functional as F
from torch import nn


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--uses", type=int, default=2, help="how many times the layer is applied (default 2)")
    parser.add_argument("--x", type=float, default=10.0, help="input (default 10)")
    parser.add_argument("--y", type=float, default=5.0, help="MSE target (default 5)")
    parser.add_argument("--w", type=float, default=0.9472, help="the layer's weight (default 0.9472)")
    parser.add_argument("--checkpoint", help="also split a trained cell's gradient for one name, step by step")
    parser.add_argument("--name", help="the name for --checkpoint (default Nakamura)")
    parser.add_argument("--language", help="target language for the loss (default: the model's top guess)")
    args = parser.parse_args(argv)
    if args.uses < 1:
        parser.error(f"--uses {args.uses} must be at least 1")
    for flag in ("x", "y", "w"):
        if not math.isfinite(getattr(args, flag)):
            parser.error(f"--{flag} {getattr(args, flag)} must be a finite number")
    if not args.checkpoint and (args.name is not None or args.language is not None):
        parser.error("--name and --language need --checkpoint (they pick the name and target for a trained cell)")
    if args.name is None:
        args.name = "Nakamura"
    return args


def linear_demo(uses: int, x: float, y: float, w: float) -> list[str]:
    layer = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        layer.weight.fill_(w)
    inputs, outputs, out = [], [], torch.tensor([[x]])
    for _ in range(uses):
        inputs.append(out)
        out = layer(out)
        out.retain_grad()
        outputs.append(out)
    F.mse_loss(out, torch.tensor([[y]])).backward()
    # Use k's own piece: dL/d(output of use k) times the input it multiplied.
    pieces = [float(o.grad * i.detach()) for i, o in zip(inputs, outputs, strict=True)]
    if not all(math.isfinite(v) for v in (*pieces, layer.weight.grad.item())):
        # float32 tops out near 3e38: past it every row reads inf and the check below proves nothing
        raise ValueError(f"--uses {uses} --x {x:g} --w {w:g} overflows float32: use fewer uses or a smaller "
                         "|x| or |w|")
    hand = 2 * (w**uses * x - y) * uses * w ** (uses - 1) * x
    rows = [("autograd: w.grad", layer.weight.grad.item()),
            (f"by hand: 2(w^{uses} x - y) * {uses} w^{uses - 1} x", hand)]
    if uses == 2:
        rows.append(("the question's 4(w^2 x - y) w x", 4 * (w**2 * x - y) * w * x))
    rows += [(f"use {k + 1}: dL/d(out_{k + 1}) * in_{k + 1}", p) for k, p in enumerate(pieces)]
    rows.append(("sum of the uses", sum(pieces)))
    header = f"Linear(1, 1, bias=False) applied {uses}x to x={x:g}, MSE against y={y:g}, w={w:g}"
    return [header] + [f"  {label:<36} = {value:.6f}" for label, value in rows]


def cell_demo(checkpoint: str, name: str, language: str | None) -> list[str]:
    from nameorigin.model.charrnn import SHARED_WEIGHTS
    from nameorigin.serving.predict import Predictor

    predictor = Predictor.from_checkpoint(checkpoint)
    codes, error = predictor.encode(name)
    if error:
        raise ValueError(f"--name {name!r}: {error}")
    net = predictor.net
    tokens, lengths = torch.tensor([codes]), torch.tensor([len(codes)])
    logits = net(tokens, lengths, capture=True)
    if language and language not in predictor.labels:
        raise ValueError(f"--language {language!r} is not one of {', '.join(predictor.labels)}")
    target = predictor.labels.index(language) if language else int(logits.argmax())
    net.zero_grad()
    F.cross_entropy(logits, torch.tensor([target])).backward()
    pieces = net.capture["cell"].contributions()  # the forward cell, which reads the name as written
    clean = "".join(predictor.vocab[c] for c in codes)
    lines = [f"\n{clean!r} through the trained {net.cell.kind} cell, loss = cross-entropy against "
             f"{predictor.labels[target]}; weight_hh's gradient, one piece per character:",
             f"  {'step':>4} {'char':>4} {'|piece|':>10} {'|sum so far|':>13}"]
    running = torch.zeros_like(net.cell.weight_hh)
    for t, char in enumerate(clean):
        piece = pieces["weight_hh"][len(clean) - 1 - t]  # contributions are indexed by distance from the end
        running += piece
        lines.append(f"  {t:>4} {char!r:>4} {piece.norm():10.5f} {running.norm():13.5f}")
    for weight in SHARED_WEIGHTS:
        grad = getattr(net.cell, weight).grad
        residual = float((pieces[weight].sum(0) - grad).norm() / grad.norm().clamp_min(1e-30))
        lines.append(f"  {weight:<9} |.grad| {grad.norm():.5f}  |sum of pieces - .grad| / |.grad| = {residual:.1e}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from nameorigin.base.errors import UserError

    try:
        lines = linear_demo(args.uses, args.x, args.y, args.w)
        if args.checkpoint:
            lines += cell_demo(args.checkpoint, args.name, args.language)
    except (UserError, ValueError) as error:  # a bad flag: the one-line error alone, no half of the demo
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
