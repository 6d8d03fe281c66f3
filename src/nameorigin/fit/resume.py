"""Resuming a run: the checkpoint `ckpt_path` names (or the newest last.ckpt), checked against the model it would
resume before anything is built."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from nameorigin.base.checkpoint_io import load_checkpoint
from nameorigin.base.errors import UserError
from nameorigin.config import ModelConfig, from_plain, shape_fields
from nameorigin.data.batching import is_refit


def find_last_checkpoint(log_dir: str | Path, exclude: str | Path | None = None) -> Path:
    """The most recently written last.ckpt under log_dir (for ckpt_path=last)."""
    skip = Path(exclude).resolve() if exclude else None
    found = [p for p in Path(log_dir).glob("**/checkpoints/last.ckpt")
             if skip is None or skip not in p.resolve().parents]
    if not found:
        raise UserError(f"ckpt_path=last but no last.ckpt under {log_dir}: train first or pass ckpt_path=<file>")
    return max(found, key=lambda p: p.stat().st_mtime)


def resolve_checkpoint(ckpt_path: str | None, log_dir: str | Path, output_dir: str | Path,
                       model: ModelConfig) -> tuple[str | None, dict]:
    """The checkpoint to resume (path, its contents read weights-only), or (None, {}) for a fresh run."""
    if ckpt_path in (None, ""):
        return None, {}
    path = find_last_checkpoint(log_dir, exclude=output_dir) if ckpt_path == "last" else Path(ckpt_path)
    checkpoint = load_checkpoint(path, setting="ckpt_path")
    if is_refit(checkpoint.get("data")):  # finished, and it has seen the validation names
        raise UserError(f"ckpt_path={path} is a refit model (trained on train + validation), not a training state: "
                        "resume from the run's last.ckpt or ckpt_path=last")
    # Read through the schema: a setting the checkpoint predates takes what it meant then (its "absent" value, else
    # its default): a run begun under the polynomial n-gram hash resumes only with model.ngram_hash=polynomial.
    trained_with = from_plain(type(model), checkpoint["hyper_parameters"]["config"])
    wrong = [f"model.{key}={getattr(model, key)} (checkpoint: {getattr(trained_with, key)})"
             for key in shape_fields(model) if getattr(trained_with, key) != getattr(model, key)]
    if wrong:
        raise UserError(f"ckpt_path={path} cannot resume this model: {', '.join(wrong)}; "
                        "resume with the checkpoint's model settings")
    return str(path), checkpoint


def carry_over(path: str, checkpoint: dict, output_dir: str | Path) -> str:
    """A resumed run writes into its own folder: its best.ckpt is copied there, and the checkpoint callbacks'
    state is pointed at it, so the resumed run keeps the best score and file an uninterrupted run would (Lightning
    keeps only the best path of a state saved in another folder, and would then take any later epoch as best).
    Returns the checkpoint to resume from: `path`, or that state written into the new folder's
    checkpoints/resume.ckpt (the caller removes it once training has read it)."""
    from nameorigin.fit.checkpointing import AtomicCheckpointIO

    old, new = os.path.realpath(Path(path).parent), os.path.realpath(Path(output_dir) / "checkpoints")
    if old == new:
        return path
    os.makedirs(new, exist_ok=True)
    if os.path.isfile(os.path.join(old, "best.ckpt")):
        shutil.copy2(os.path.join(old, "best.ckpt"), os.path.join(new, "best.ckpt"))

    def moved(value: Any) -> Any:
        if isinstance(value, str) and (value == old or value.startswith(old + os.sep)):
            return new + value[len(old):]
        if isinstance(value, dict):
            return {moved(key): moved(item) for key, item in value.items()}
        return value

    states = checkpoint.get("callbacks", {})
    checkpoint["callbacks"] = {key: moved(state) if key.startswith("ModelCheckpoint") else state
                               for key, state in states.items()}
    target = os.path.join(new, "resume.ckpt")
    AtomicCheckpointIO().save_checkpoint(checkpoint, target)
    return target
