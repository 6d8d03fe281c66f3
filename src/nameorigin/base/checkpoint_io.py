"""Reading checkpoints safely: weights-only loading, so a checkpoint whose pickle would run code is refused, never
executed. Training (resume, fine-tuning) and serving both read checkpoints through here."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import torch

from nameorigin.base.errors import UserError


def load_checkpoint(path: str | Path, setting: str = "checkpoint") -> dict:
    """torch.load with weights_only=True: a checkpoint whose pickle would run code is refused, never executed.
    `setting` names where the path came from (model.init_from, ckpt_path) in the error."""
    path = Path(path)
    if not path.is_file():
        state = "is a folder" if path.is_dir() else "does not exist"
        raise UserError(f"{setting} {path} {state}: pass the path of a .ckpt file")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if not zipfile.is_zipfile(path):  # torch.save writes a zip archive; this is some other file
            raise UserError(f"{setting} {path} is not a readable torch checkpoint (not a torch.save archive): "
                            "use a .ckpt written by train.py") from None
        reason = str(error).splitlines()[0] if str(error) else "unsafe content"
        raise UserError(f"{setting} {path} was refused by weights-only loading ({reason[:160]}): "
                        "it may run code; load only checkpoints you trained") from None
    except Exception as error:  # weights-only unpickling never runs code; anything else means a broken file
        raise UserError(f"{setting} {path} is not a readable torch checkpoint "
                        f"({type(error).__name__}): it may be truncated; use another .ckpt") from None
    hparams = checkpoint.get("hyper_parameters") if isinstance(checkpoint, dict) else None
    if isinstance(hparams, dict) and "cell" in hparams and "config" not in hparams:
        raise UserError(f"{setting} {path} predates nameorigin's typed model config (its settings are not stored "
                        "as one config): retrain it with this version")
    if not isinstance(hparams, dict) or not {"vocab", "labels", "config"} <= hparams.keys():
        raise UserError(f"{setting} {path} is not a nameorigin checkpoint (no vocab/labels/model config): "
                        "pass one written by train.py")
    return checkpoint
