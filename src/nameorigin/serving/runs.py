"""What "latest" means: the newest run under outputs/ whose model a user would serve. A pretraining run that
publishes a starting point (transfer.publish, `make pretrain`) is never it: its model answers the pretraining's
labels (countries), not the table's. `python -m nameorigin.serving.runs` prints the folder `make dashboard` opens.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from nameorigin.base.errors import UserError, exits_2_on_user_error
from nameorigin.model.artifacts import REFIT_FILE, RESULTS_FILE, STARTING_POINT_KEY


def run_folder(path: Path, outputs: Path) -> Path | None:
    """The run folder holding `path` (the nearest folder above it with Hydra's record or a results.json)."""
    for folder in [path, *path.parents]:
        if (folder / ".hydra").is_dir() or (folder / RESULTS_FILE).is_file():
            return folder
        if folder == outputs:
            break
    return None


def publishes_starting_point(run: Path) -> bool:
    """Whether the run publishes a starting point: its results say so, or (a run stopped before its results) the
    settings Hydra recorded at its start set transfer.publish."""
    results = run / RESULTS_FILE
    if results.is_file():
        try:
            return bool(json.loads(results.read_text()).get(STARTING_POINT_KEY))
        except ValueError:
            pass
    settings = run / ".hydra" / "config.yaml"
    if settings.is_file():
        try:
            recorded = yaml.safe_load(settings.read_text()) or {}
        except yaml.YAMLError:
            return False
        return bool((recorded.get("transfer") or {}).get("publish"))
    return False


def served_checkpoints(outputs: str | Path = "outputs", name: str = "best.ckpt") -> list[Path]:
    """Every run's `name` under `outputs` but a pretraining's, newest first."""
    outputs = Path(outputs)
    found = []
    for path in outputs.glob(f"**/checkpoints/{name}"):
        run = run_folder(path.parent, outputs)
        if run is None or not publishes_starting_point(run):
            found.append(path)
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def newest_checkpoint(outputs: str | Path = "outputs", name: str = "best.ckpt") -> Path:
    """The newest run's model: its refit.ckpt (nameorigin.training.refit) when it has one, else its best.ckpt;
    never a pretraining's."""
    found = served_checkpoints(outputs, name)
    if not found:
        raise UserError(f"no {name} of a run under {outputs}/ (a pretraining's model is no run's): train first "
                        "(make train) or pass a checkpoint path")
    refit = found[0].with_name(REFIT_FILE)
    return refit if name == "best.ckpt" and refit.is_file() else found[0]


def shown_folder(run: Path, outputs: Path) -> Path:
    """The folder TensorBoard opens for a run: a sweep's own folder (outputs/multirun/<date>/<time>) for its jobs."""
    parts = run.relative_to(outputs).parts
    return outputs.joinpath(*parts[:3]) if parts[:1] == ("multirun",) and len(parts) > 3 else run


def newest_run(outputs: str | Path = "outputs") -> Path:
    """The newest run or sweep under `outputs` (by its <date>/<time> folder names) but a pretraining."""
    outputs = Path(outputs)
    runs = {shown_folder(record.parent, outputs) for record in outputs.glob("**/.hydra")
            if not publishes_starting_point(record.parent)}
    if not runs:
        raise UserError(f"no run under {outputs}/ (a pretraining is no run to open): run 'make train' first")
    return max(runs, key=lambda folder: (folder.parent.name, folder.name))


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    print(newest_run(args[0] if args else "outputs"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
