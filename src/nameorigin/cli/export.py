"""`nameorigin export`: a checkpoint for serving without Lightning, as a torch.export program (.pt2) and ONNX."""

import sys
from pathlib import Path
from typing import Annotated

import typer

from nameorigin.base.errors import UserError
from nameorigin.base.extras import missing_extra
from nameorigin.cli.predict import Checkpoint, Outputs, model_path


def export(checkpoint: Checkpoint,
           out: Annotated[Path, typer.Option(help="path stem of the files to write: <out>.pt2, <out>.onnx, "
                                             "<out>.json")] = Path("model"),
           formats: Annotated[str | None, typer.Option(help="comma-separated, from pt2 and onnx (default: both, or "
                                                       "pt2 alone for a model with the known-name lookup, which ONNX "
                                                       "cannot express; onnx needs the [export] extra)")] = None,
           outputs: Outputs = Path("outputs")) -> int:
    """Write the model as model.pt2 and model.onnx with a .json sidecar; `nameorigin predict` serves either."""
    from nameorigin.serving.export import FORMATS, export_model, onnx_limitation
    from nameorigin.serving.predict import Predictor

    chosen = tuple(f for f in (",".join(FORMATS) if formats is None else formats).split(",") if f)
    if not chosen or any(f not in FORMATS for f in chosen):
        raise UserError(f"--formats {formats!r}: choose from {', '.join(FORMATS)}")
    if out.is_dir():  # the stem of a folder would write its files beside it, as <folder>.pt2
        raise UserError(f"--out {out} is a folder: pass a path stem in it, e.g. {out / 'model'}")
    predictor = Predictor.from_checkpoint(model_path(checkpoint, outputs))
    if formats is None and (reason := onnx_limitation(predictor.net)):
        print(f"note: no ONNX file: {reason}", file=sys.stderr)
        chosen = ("pt2",)
    try:
        written = export_model(predictor, out, chosen)
    except UserError:
        raise
    except ValueError as error:  # torch.export's and onnx's own refusals of a model
        raise UserError(str(error)) from None
    except ImportError as error:
        raise UserError(f"{missing_extra('the onnx format', 'export', error)}, or pass --formats pt2") from None
    print("wrote " + ", ".join(map(str, written)))
    return 0
