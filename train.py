"""Train the name-origin classifier: `python train.py [hydra overrides]`, e.g. `model.cell=lstm`."""

import os
import shutil
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig

from nameorigin.base.errors import UserError, WriteError
from nameorigin.config import register
from nameorigin.fit.preemption import Preempted
from nameorigin.training.pipeline import train

register()  # the typed schemas, before Hydra composes the config
task_started = False


def remove_run_folder(run: Path, log_dir: Path) -> None:
    """Delete the run folder, then its date and log folders if this run was all they held."""
    shutil.rmtree(run, ignore_errors=True)
    for parent in run.resolve().parents:
        if not parent.is_relative_to(log_dir.resolve()):
            break
        try:
            parent.rmdir()  # only succeeds when empty
        except OSError:
            break


def one_line(error: HydraException) -> str:
    """Hydra's override errors span several lines (the options, its search path, a hint): the same in one line."""
    if isinstance(error, MissingConfigException) and error.options:
        return f"{str(error).splitlines()[0]}: choose one of {', '.join(error.options)}"
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    if isinstance(error, OverrideParseException):
        text = f"cannot parse the override {error.override!r}: {text}"
    return f"{text} ({str(error.__cause__).splitlines()[0]})" if error.__cause__ is not None else text


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    global task_started
    task_started = True
    try:
        metrics = train(cfg)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        # Nothing of a run that never started is kept: no empty run folders that look like results. A run that
        # could not write a file keeps what it wrote before.
        if HydraConfig.get().mode.name == "RUN" and not isinstance(error, WriteError):
            remove_run_folder(Path(cfg.paths.output_dir), Path(cfg.paths.log_dir))
        sys.exit(error.exit_code)
    except Preempted as stop:
        print(stop.line, file=sys.stderr)
        raise
    except FloatingPointError as error:
        print(f"error: {error}; the last good checkpoint stays in {cfg.paths.output_dir}/checkpoints",
              file=sys.stderr)
        sys.exit(1)
    return metrics.get(cfg.get("optimized_metric"))


if __name__ == "__main__":
    wants_traceback = os.environ.get("HYDRA_FULL_ERROR") == "1"
    # Hydra then raises a bad override's error here instead of printing its own multi-line report.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        main()
    except HydraException as error:
        if task_started or wants_traceback:
            raise
        print(f"error: {one_line(error)}", file=sys.stderr)
        sys.exit(2)
    except OSError as error:
        if task_started or error.filename is None:
            raise
        # Hydra creates the run folder before the task starts: hydra.run.dir or paths.log_dir cannot be written.
        print(f"error: cannot create the run folder {error.filename} ({error.strerror}): pass a writable "
              "paths.log_dir (or hydra.run.dir)", file=sys.stderr)
        sys.exit(2)
    except SystemExit as exit_:
        # Hydra exits 1 on a bad override before the task runs: that is a usage error, so 2.
        sys.exit(2 if exit_.code == 1 and not task_started else exit_.code)
