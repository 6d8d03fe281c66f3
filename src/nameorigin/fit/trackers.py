"""What a run tells the experiment trackers beside TensorBoard (logger=csv, logger=mlflow; nameorigin.conf's
logger group): its settings as flat parameters, the settings the rule or the search picked, where its model is,
and, for a tracker that keeps files, the model card and the per-label report. Metrics reach every logger through
Lightning itself. The refit gets loggers of its own kind (refit_loggers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytorch_lightning.loggers import CSVLogger, Logger, MLFlowLogger, TensorBoardLogger

from nameorigin.config import flat_settings


def flat(settings: dict) -> dict[str, Any]:
    """Nested settings as dotted keys (model.hidden_size), lists as text: a tracker's parameters are flat."""
    return {key: str(value) if isinstance(value, list | tuple) else value
            for key, value in flat_settings(settings).items()}


def trackers(loggers: list[Logger]) -> list[Logger]:
    return [logger for logger in loggers if not isinstance(logger, TensorBoardLogger)]


def report_to_trackers(loggers: list[Logger], settings: dict, picks: tuple, final: str | None,
                       files: list[Path]) -> None:
    """The run's settings (nested plain values), picks and model path as parameters of each tracker; `files`
    (those that exist) as artifacts of those that keep files."""
    chosen = trackers(loggers)
    if not chosen:
        return
    params = {**flat(settings), **{f"picked.{pick.key}": pick.why for pick in picks},
              "model_checkpoint": str(final)}
    for logger in chosen:
        logger.log_hyperparams(params)
        if isinstance(logger, MLFlowLogger):
            for path in files:
                if path.is_file():
                    logger.experiment.log_artifact(logger.run_id, str(path))
        logger.save()


def refit_copies(loggers: list[Logger]) -> list[Logger]:
    """Trackers for the refit: CSV into csv/refit/, MLflow into the same run with its metrics prefixed refit-."""
    copies: list[Logger] = []
    for logger in trackers(loggers):
        if isinstance(logger, CSVLogger):
            copies.append(CSVLogger(save_dir=logger.save_dir, name=logger.name, version="refit"))
        elif isinstance(logger, MLFlowLogger):
            copies.append(RefitMLFlowLogger(experiment_name=logger._experiment_name, run_id=logger.run_id,
                                            tracking_uri=logger._tracking_uri, prefix="refit", log_model=False))
    return copies


class RefitMLFlowLogger(MLFlowLogger):
    """The refit's logger in the first training's MLflow run: its settings under refit/ too, since MLflow keeps a
    run's parameters once (the refit's class prior, from train + validation, differs)."""

    def log_hyperparams(self, params: Any) -> None:
        super().log_hyperparams({"refit": params})
