"""TensorBoard panels beyond scalars: layout, confusion matrices, hparams, projector and a predictions text."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback
from pytorch_lightning.loggers import TensorBoardLogger

from nameorigin.fit.callbacks import tensorboard_writer
from nameorigin.fit.plots import confusion_figure, figure_to_writer, label_report_figure, reliability_figure
from nameorigin.model.artifacts import Calibration
from nameorigin.model.calibration import reliability
from nameorigin.model.charrnn import SHARED_WEIGHTS
from nameorigin.model.ensemble import named_members
from nameorigin.model.explain import explain_names, explainable
from nameorigin.model.label_report import REPORT_LEVEL

HP_METRICS = ("hp/val_acc_best", "hp/test_acc", "hp/test_macro_f1")


def scalars_layout(labels: list[str]) -> dict:
    """Custom Scalars tab: the charts a user looks at first, grouped."""
    return {
        "Training": {
            "loss": ["Multiline", ["train/loss_epoch", "val/loss"]],
            "accuracy": ["Multiline", ["train/acc", "val/acc", "val/acc_best"]],
            "macro F1": ["Multiline", ["train/macro_f1", "val/macro_f1"]],
            "learning rate": ["Multiline", ["lr-.*"]],
            "per-class F1 (val)": ["Multiline", [f"val_f1/{label}" for label in labels]],
        },
        "Gradient accumulation": {
            # Tags are regular expressions: every cell's weights (grad_accum/[<cell>/]<weight>/...) in one chart.
            "residual |sum_t g_t - grad| / |grad|": ["Multiline", [f"grad_accum/(.*/)?{n}/residual"
                                                                   for n in SHARED_WEIGHTS]],
            "horizon (chars holding 90% of the gradient)": [
                "Multiline", [f"grad_accum/(.*/)?{n}/horizon90" for n in SHARED_WEIGHTS]],
            "share of the last character": ["Multiline", [f"grad_accum/(.*/)?{n}/last_char_share"
                                                          for n in SHARED_WEIGHTS]],
        },
    }


class Dashboard(Callback):
    """Writes the layout at start, a confusion matrix each validation epoch, and at the end of testing the
    hparams with final metrics, the character embeddings for the projector and sample predictions."""

    def __init__(self, sample_predictions: int = 12):
        self.sample_predictions = sample_predictions
        self.val_acc_best: float | None = None

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        writer = tensorboard_writer(trainer)
        if writer is not None and trainer.is_global_zero:
            writer.add_custom_scalars(scalars_layout(pl_module.hparams.labels))

    def _confusion(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        matrix = (pl_module.val_confusion if stage == "val" else pl_module.test_confusion).compute()
        writer = tensorboard_writer(trainer)
        if writer is not None and trainer.is_global_zero and not trainer.sanity_checking:
            title = f"{stage} confusion (rows normalized), epoch {trainer.current_epoch}"
            figure = confusion_figure(matrix, pl_module.hparams.labels, title)
            figure_to_writer(writer, f"{stage}/confusion_matrix", figure, trainer.global_step)

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._confusion(trainer, pl_module, "val")

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking and "val/acc_best" in trainer.callback_metrics:
            self.val_acc_best = float(trainer.callback_metrics["val/acc_best"])

    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._confusion(trainer, pl_module, "test")

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        writer = tensorboard_writer(trainer)
        if writer is None or not trainer.is_global_zero:
            return
        metrics = trainer.callback_metrics
        final = {"hp/test_acc": float(metrics.get("test/acc", float("nan"))),
                 "hp/test_macro_f1": float(metrics.get("test/macro_f1", float("nan"))),
                 "hp/val_acc_best": float("nan") if self.val_acc_best is None else self.val_acc_best}
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger.log_hyperparams(run_hparams(trainer, pl_module), final)
        self._projector(writer, pl_module, trainer.global_step)
        self._predictions_text(writer, trainer, pl_module)
        self._test_reliability(writer, pl_module, trainer.global_step)
        if pl_module.label_report:
            figure_to_writer(writer, "test/per_label", label_report_figure(pl_module.label_report, REPORT_LEVEL),
                             trainer.global_step)
        writer.flush()

    def _test_reliability(self, writer: Any, pl_module: pl.LightningModule, step: int) -> None:
        if not pl_module.test_outputs:
            return
        logits, targets, *_ = pl_module.test_outputs[0]
        bins = pl_module.calibration.bins if pl_module.calibration else 15
        curves = {"before (T = 1)": reliability((logits * pl_module.net.temperature.cpu()).softmax(-1), targets, bins),
                  f"after (T = {float(pl_module.net.temperature):.2f})": reliability(logits.softmax(-1), targets, bins)}
        figure_to_writer(writer, "calibration/reliability_test", reliability_figure(curves, "test reliability"), step)

    def _projector(self, writer: Any, pl_module: pl.LightningModule, step: int) -> None:
        _, net = named_members(pl_module.net)[0]  # an ensemble's first network
        # With one-hot input each character's embedding is its column of the input weights.
        vectors = net.embedding.weight if net.embedding is not None else net.cell.weight_ih.t()
        vocab = [repr(c) if c.isspace() or not c else c for c in pl_module.hparams.vocab]
        writer.add_embedding(vectors.detach().float().cpu(), metadata=vocab, tag="char_embedding", global_step=step)

    def _predictions_text(self, writer: Any, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        datamodule = trainer.datamodule
        if datamodule is None or "test" not in getattr(datamodule, "datasets", {}):
            return
        dataset, labels = datamodule.datasets["test"], pl_module.hparams.labels
        picks = torch.linspace(0, len(dataset) - 1, min(self.sample_predictions, len(dataset))).long().tolist()
        tokens, lengths, targets, *_ = dataset.collate(picks)
        with torch.no_grad():
            was_training = pl_module.training
            pl_module.eval()
            probs = pl_module(tokens.to(pl_module.device), lengths.to(pl_module.device)).softmax(-1).cpu()
            names = [dataset.names[index] for index in picks]
            codes = [tokens[i, : int(lengths[i])].tolist() for i in range(len(picks))]
            why = explain_names(pl_module.net, codes, names, labels, len(picks)) \
                if explainable(pl_module.net) else None
            pl_module.train(was_training)
        rows = ["| name | true | top-3 predictions | why the top one (strongest characters; parts) |",
                "|---|---|---|---|"]
        for i, name in enumerate(names):
            top = probs[i].topk(min(3, len(labels)))
            guesses = ", ".join(f"{labels[j]} {p:.2f}" for p, j in zip(top.values.tolist(), top.indices.tolist(),
                                                                       strict=True))
            reason = f"{why[i].marked(name)}; {why[i].compact(3)}" if why else "none: read both ways (directions=2)"
            rows.append(f"| {name} | {labels[int(targets[i])]} | {guesses} | {reason} |")
        writer.add_text("test/sample_predictions", "\n".join(rows), global_step=trainer.global_step)


def log_calibration(loggers: list, summary: Calibration, logits: torch.Tensor, targets: torch.Tensor) -> None:
    """Validation calibration: temperature, ECE before/after, and a reliability diagram."""
    writer = next((logger.experiment for logger in loggers if isinstance(logger, TensorBoardLogger)), None)
    if writer is None:
        return
    for key in ("temperature", "val_ece_raw", "val_ece"):
        writer.add_scalar(f"calibration/{key}", getattr(summary, key), 0)
    for level, threshold in summary.conformal.items():
        writer.add_scalar(f"calibration/threshold_{float(level) * 100:g}", threshold, 0)
    bins, temperature = summary.bins, summary.temperature
    curves = {"before (T = 1)": reliability(logits.softmax(-1), targets, bins),
              f"after (T = {temperature:.2f})": reliability((logits / temperature).softmax(-1), targets, bins)}
    figure_to_writer(writer, "calibration/reliability_val", reliability_figure(curves, "validation reliability"), 0)
    writer.flush()


def run_hparams(trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
    """The knobs worth comparing in the HParams tab (not the vocabulary or label list)."""
    config = pl_module.hparams["config"]
    params = {k: v for k, v in config.items() if k not in ("class_weights", "optimizer", "scheduler")}
    params["class_weights"] = config["class_weights"] is not None
    if trainer.optimizers:
        optimizer = trainer.optimizers[0]
        params.update(optimizer=type(optimizer).__name__, lr=optimizer.defaults.get("lr"),
                      weight_decay=optimizer.defaults.get("weight_decay"))
    datamodule = trainer.datamodule
    for key in ("batch_size", "split_seed"):
        if hasattr(datamodule, key):
            params[key] = getattr(datamodule, key)
    params["max_epochs"] = trainer.max_epochs
    return params
