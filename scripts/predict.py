"""Predict the language of origin of names from a checkpoint alone.

  python scripts/predict.py outputs/.../checkpoints/best.ckpt Nakamura Dovesky "O'Neill"
  python scripts/predict.py latest --top-k 5 --format json < names.txt
  python scripts/predict.py best.ckpt --evaluate data/names
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Iterable

from nameorigin.predict import BATCH_SIZE, PredictError, Prediction, Predictor, newest_checkpoint


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a .ckpt written by train.py, a .pt from scripts/export.py, or "
                        "'latest' for the newest best.ckpt")
    parser.add_argument("names", nargs="*", help="names to classify; if none and no --file, read standard input")
    parser.add_argument("--file", help="a UTF-8 file with one name per line (blank lines skipped)")
    parser.add_argument("--top-k", type=int, default=3, help="how many languages to show per name (default 3)")
    parser.add_argument("--format", choices=("text", "json", "csv"), default="text", help="output format")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto (default cpu)")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE,
                        help=f"names per forward pass (default {BATCH_SIZE})")
    parser.add_argument("--outputs", default="outputs", help="where 'latest' looks for runs (default outputs)")
    parser.add_argument("--evaluate", metavar="DIR",
                        help="score the checkpoint on its own held-out test split rebuilt from DIR")
    return parser.parse_intermixed_args(argv)


def read_names(args: argparse.Namespace) -> list[str]:
    if args.names:
        return list(args.names)
    if args.file:
        try:
            with open(args.file, encoding="utf-8", errors="strict") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            raise PredictError(f"--file {args.file} does not exist: pass an existing file") from None
        except UnicodeDecodeError as error:
            raise PredictError(f"--file {args.file} is not UTF-8 (byte {error.start}): re-save it as UTF-8") from None
    else:
        lines = sys.stdin.buffer.read().decode("utf-8", errors="replace").splitlines()
    return [line for line in lines if line.strip()]


def write(predictions: Iterable[Prediction], fmt: str) -> None:
    out = sys.stdout
    if fmt == "json":
        json.dump([p.as_dict() for p in predictions], out, ensure_ascii=False, indent=1)
        out.write("\n")
    elif fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["name", "language", "probability", "rank"])
        for p in predictions:
            for rank, (language, probability) in enumerate(p.predictions, start=1):
                writer.writerow([p.name, language, f"{probability:.6f}", rank])
            if p.error:
                writer.writerow([p.name, "", "", ""])
    else:
        for p in predictions:
            shown = p.name.encode("unicode_escape").decode("ascii") if not p.name.isprintable() else p.name
            if p.error:
                out.write(f"{shown}\n  (no prediction: {p.error})\n")
                continue
            out.write(f"{shown}\n")
            for language, probability in p.predictions:
                out.write(f"  {language:<12} {probability:6.1%}\n")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        path = newest_checkpoint(args.outputs) if args.checkpoint == "latest" else args.checkpoint
        predictor = Predictor.load(path, device=args.device)
        if args.evaluate:
            from nameorigin.evaluate import evaluate, format_report

            print(format_report(evaluate(predictor, args.evaluate, args.batch_size)))
            return 0
        write(predictor.predict(read_names(args), top_k=args.top_k, batch_size=args.batch_size), args.format)
    except PredictError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `| head` closed the pipe: not an error
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
