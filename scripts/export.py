"""Export a checkpoint to TorchScript for serving without Lightning (or this package).

  python scripts/export.py best.ckpt --out model.pt      # writes model.pt and model.json (vocab, labels)
  python scripts/predict.py model.pt Nakamura             # the predict script accepts the export too
"""

from __future__ import annotations

import argparse
import sys

from nameorigin.export import export_torchscript, sidecar_path
from nameorigin.predict import PredictError, Predictor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a .ckpt written by train.py")
    parser.add_argument("--out", default="model.pt", help="where to write the TorchScript model (default model.pt)")
    args = parser.parse_args(argv)
    if not args.out.endswith(".pt"):
        parser.error(f"--out {args.out}: name it *.pt (the sidecar goes to *.json beside it)")
    try:
        out = export_torchscript(Predictor.from_checkpoint(args.checkpoint), args.out)
    except PredictError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {out} and {sidecar_path(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
