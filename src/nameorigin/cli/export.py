"""Export a checkpoint for serving without Lightning: a torch.export program (.pt2) and ONNX (.onnx).

  python scripts/export.py best.ckpt --out model            # writes model.pt2, model.onnx and model.json
  python scripts/export.py best.ckpt --out model --formats pt2
  python scripts/predict.py model.onnx Nakamura              # the predict script serves either file
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nameorigin.base.errors import exits_2_on_user_error
from nameorigin.base.extras import missing_extra
from nameorigin.serving.export import FORMATS, export_model, onnx_limitation
from nameorigin.serving.predict import Predictor


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a .ckpt written by train.py")
    parser.add_argument("--out", default="model", help="path stem of the files to write (default: model)")
    parser.add_argument("--formats", help=f"comma-separated, from {', '.join(FORMATS)} (default: both, or pt2 alone "
                        "for a model with the known-name lookup, which ONNX cannot express; onnx needs the [export] "
                        "extra)")
    args = parser.parse_args(argv)
    formats = tuple(f for f in (",".join(FORMATS) if args.formats is None else args.formats).split(",") if f)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        parser.error(f"--formats {args.formats!r}: choose from {', '.join(FORMATS)}")
    if Path(args.out).is_dir():  # the stem of a folder would write its files beside it, as <folder>.pt2
        parser.error(f"--out {args.out} is a folder: pass a path stem in it, e.g. {Path(args.out) / 'model'}")
    try:
        predictor = Predictor.from_checkpoint(args.checkpoint)
        if args.formats is None and (reason := onnx_limitation(predictor.net)):
            print(f"note: no ONNX file: {reason}", file=sys.stderr)
            formats = ("pt2",)
        written = export_model(predictor, args.out, formats)
    except ValueError as error:  # torch.export's and onnx's own refusals of a model
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ImportError as error:
        print(f"error: {missing_extra('the onnx format', 'export', error)}, or pass --formats pt2", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
