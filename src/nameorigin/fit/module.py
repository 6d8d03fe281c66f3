"""NameClassifier: the LightningModule around CharRNN (loss, metrics, optimizer and schedule)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from pytorch_lightning.plugins.precision import MixedPrecision, Precision
from pytorch_lightning.utilities import GradClipAlgorithmType
from torchmetrics import MaxMetric, MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix, MulticlassF1Score
from torchmetrics.utilities.distributed import gather_all_tensors

from nameorigin.base.errors import UserError
from nameorigin.base.parts import boundary_index
from nameorigin.base.textnorm import UNK
from nameorigin.config import ModelConfig, TransferShape, from_plain, plain
from nameorigin.data.batching import Batch, OneLengthRows
from nameorigin.fit.graphed import GraphedSteps, device_rows, fast_optimizer
from nameorigin.model.artifacts import CHECKPOINT_FORMAT, Calibration
from nameorigin.model.calibration import expected_calibration_error, level_key, prediction_sets, share_calibration_error
from nameorigin.model.ensemble import build_served_net
from nameorigin.model.label_report import REPORT_LEVEL, label_report, served_and_compared
from nameorigin.model.novelty import CharTrigrams, ood_score


class NameClassifier(pl.LightningModule):
    """The model config (nameorigin.config.ModelConfig), the vocabulary and the labels go into the checkpoint as
    plain Python types, so the checkpoint alone rebuilds the model and loads with `torch.load(weights_only=True)`.
    `transfer` is what a pretrained checkpoint adds when fine-tuning (nameorigin.training.transfer); `members` > 1:
    an ensemble of that many networks, assembled from trained ones (nameorigin.training.ensemble), never trained."""

    def __init__(self, config: ModelConfig | dict, vocab: Sequence[str], labels: Sequence[str],
                 class_prior: Sequence[float] | None = None, label_names: Sequence[str] | None = None,
                 transfer: TransferShape | dict | None = None, members: int = 1):
        super().__init__()
        config = config if isinstance(config, ModelConfig) else from_plain(ModelConfig, config)
        transfer = from_plain(TransferShape, transfer) if isinstance(transfer, dict) else transfer
        vocab, labels = [str(c) for c in vocab], [str(label) for label in labels]
        class_prior = None if class_prior is None else [float(p) for p in class_prior]
        weights = config.class_weights
        if isinstance(weights, str):
            raise UserError(f"model.class_weights={weights}: the data module turns it into numbers before training")
        if weights is not None and len(weights) != len(labels):
            raise UserError(f"model.class_weights={list(weights)} must be {len(labels)} positive numbers, one per "
                            f"label ({', '.join(labels)}), or balanced, sqrt or null")
        if config.logit_adjustment and (class_prior is None or len(class_prior) != len(labels)
                                        or min(class_prior) <= 0):
            raise UserError(f"model.logit_adjustment={config.logit_adjustment} needs a positive class_prior per "
                            "label (train.py passes the training split's): set model.logit_adjustment=0 otherwise")
        self.config, self.transfer_shape = config, transfer
        self.save_hyperparameters({"config": plain(config), "vocab": vocab, "labels": labels,
                                   "class_prior": class_prior,
                                   "label_names": None if label_names is None else [str(n) for n in label_names],
                                   "transfer": plain(transfer) if transfer else None,
                                   **({"members": int(members)} if members > 1 else {})})
        self.net = build_served_net(config, len(vocab), len(labels), transfer, members,
                                    boundary_index(vocab, config.name_parts))
        if config.logit_adjustment:  # post-hoc logit adjustment (Menon et al. 2021): rare languages get a fairer share
            offset = [-config.logit_adjustment * math.log(p) for p in class_prior]
            self.net.logit_offset.copy_(torch.tensor(offset) - sum(offset) / len(offset))
        class_weights = None if weights is None else [float(w) for w in weights]
        self.register_buffer("class_weight", None if class_weights is None else torch.tensor(class_weights))
        n = len(labels)
        metrics = MetricCollection({
            "acc": MulticlassAccuracy(n, average="micro"),
            "macro_f1": MulticlassF1Score(n, average="macro"),
            **({"acc_top5": MulticlassAccuracy(n, top_k=5, average="micro")} if n > 5 else {}),
        })
        self.train_metrics = metrics.clone(prefix="train/")
        self.val_metrics, self.test_metrics = metrics.clone(prefix="val/"), metrics.clone(prefix="test/")
        self.val_class_f1, self.test_class_f1 = (MulticlassF1Score(n, average=None) for _ in range(2))
        self.val_confusion, self.test_confusion = (MulticlassConfusionMatrix(n) for _ in range(2))
        # Accuracy counting a prediction right when it is any of the name's languages (480 names have several).
        self.val_acc_any, self.test_acc_any = MeanMetric(), MeanMetric()
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()
        self.val_acc_weighted, self.test_acc_weighted = MeanMetric(), MeanMetric()  # with data.weight_column
        self.val_person_acc = MeanMetric()  # the share of people right: a count or share table's objective
        if transfer and transfer.known_names:  # test scores apart: names found in names-dataset and the others
            self.test_found = MetricCollection({"acc": MulticlassAccuracy(n, average="micro"),
                                                "macro_f1": MulticlassF1Score(n, average="macro")})
            self.test_not_found = self.test_found.clone()
            self.test_share_found = MeanMetric()  # how many of the test names the starting point's table holds
        self.val_acc_best = MaxMetric()
        self.val_acc_best.persistent(True)  # kept in checkpoints, so a resumed run remembers its best
        self.capture_next_step = False  # GradAccumulationLogger asks for it (capture_next) on the steps it inspects
        self.calibration: Calibration | None = None  # fitted on validation after training
        self.mixture: dict | None = None  # nameorigin.training.linear_mix: how the two parts were mixed
        self.test_outputs: list[tuple[torch.Tensor, ...]] = []  # (logits, targets, shares, abstaining) of the test pass
        self.label_report: list[dict] | None = None  # nameorigin.model.label_report, after a test pass
        self.fast_path_clip: float | None = None  # with the fast path on (use_fast_path)
        self.fast: GraphedSteps | None = None

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.net(tokens, lengths)

    def capture_next(self) -> None:
        """Record the next training step's per-timestep tensors (the gradient check's)."""
        self.capture_next_step = True

    def use_fast_path(self, clip: float | None) -> None:
        """Train by the fast path's step (nameorigin.fit.graphed): it steps the optimizer itself, clipping the
        gradients' norm to `clip` (None: not clipped)."""
        self.automatic_optimization = False
        self.fast_path_clip = clip

    def loss(self, logits: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Cross-entropy against the label or, with soft_targets, against the distribution `batch.shares`
        describes (a name's languages shared equally, a share table's columns, a surname's country shares).
        With per-name weights (data.weight_column), their weighted mean over the batch's names."""
        targets = batch.targets
        if self.config.soft_targets:
            shares = batch.shares.float()
            targets = shares / shares.sum(1, keepdim=True)
        if batch.weights is None:
            return F.cross_entropy(logits, targets, weight=self.class_weight,
                                   label_smoothing=self.config.label_smoothing)
        per_name = F.cross_entropy(logits, targets, weight=self.class_weight, reduction="none",
                                   label_smoothing=self.config.label_smoothing)
        return (per_name * batch.weights).sum() / batch.weights.sum()

    def training_step(self, batch: Batch | OneLengthRows, batch_idx: int) -> torch.Tensor | None:
        if isinstance(batch, OneLengthRows):  # the fast path: its step trains and tallies on the device
            self.fast(batch.rows, batch.length, self.capture_next_step)
            self.capture_next_step = False
            return None
        tokens, lengths, targets = batch.tokens, batch.lengths, batch.targets
        logits = self.net(tokens, lengths, capture=self.capture_next_step)
        self.capture_next_step = False
        loss = self.loss(logits, batch)
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"non-finite training loss ({loss.item()}) at step {self.global_step}: the learning rate "
                f"(model.optimizer.lr) is likely too high; lower it or set trainer.gradient_clip_val"
            )
        self.train_metrics.update(logits.detach(), targets)
        self.log("train/loss", loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=len(targets),
                 sync_dist=True)
        self.log_dict(self.train_metrics, on_step=False, on_epoch=True, batch_size=len(targets))
        return loss

    def on_train_start(self) -> None:
        if not self.automatic_optimization:  # the fast path: the training split moves to the device once
            self.fast = GraphedSteps(self, device_rows(self.trainer.datamodule.datasets["train"], self.device),
                                     self.fast_path_clip)

    def on_train_epoch_end(self) -> None:
        if self.fast is not None:  # what Lightning's loop does for the automatic step: log, then the schedule
            self.log_dict(self.fast.epoch_tallies())
            scheduler = self.lr_schedulers()
            if scheduler is not None:
                scheduler.step()

    def _evaluate(self, batch: Batch, stage: str) -> None:
        tokens, lengths, targets, shares = batch.tokens, batch.lengths, batch.targets, batch.shares
        logits = self.net(tokens, lengths)
        preds = logits.argmax(-1)
        # A torchmetrics mean, not self.log(sync_dist=True): Lightning's sync averages the name count across ranks
        # in an integer tensor, which truncates an odd total and inflates the loss of an uneven split.
        mean_loss = self.val_loss if stage == "val" else self.test_loss
        # Held-out scores count each name once; the weights enter acc_weighted (the share of people right).
        mean_loss.update(self.loss(logits, batch._replace(weights=None)), weight=len(targets))
        self.log(f"{stage}/loss", mean_loss, batch_size=len(targets))
        metrics = self.val_metrics if stage == "val" else self.test_metrics
        metrics.update(logits, targets)
        acc_any = self.val_acc_any if stage == "val" else self.test_acc_any
        acc_any.update((shares.gather(1, preds[:, None]) > 0).float())
        self.log(f"{stage}/acc_any", acc_any, batch_size=len(targets))
        if batch.weights is not None:
            acc_weighted = self.val_acc_weighted if stage == "val" else self.test_acc_weighted
            acc_weighted.update((preds == targets).float(), weight=batch.weights)
            self.log(f"{stage}/acc_weighted", acc_weighted, batch_size=len(targets))
        if stage == "val" and (batch.weights is not None or shares.is_floating_point()):
            # Each name's credit is its predicted label's share (its label's, one-hot, on a count table), times its
            # weight: nameorigin.evaluation.baselines.person_weighted_accuracy, as the margin reports it on test.
            credit = shares.gather(1, preds[:, None]).squeeze(1) if shares.is_floating_point() else preds == targets
            self.val_person_acc.update(credit.float(), weight=1.0 if batch.weights is None else batch.weights)
            self.log("val/person_acc", self.val_person_acc, batch_size=len(targets))
        (self.val_class_f1 if stage == "val" else self.test_class_f1).update(preds, targets)
        (self.val_confusion if stage == "val" else self.test_confusion).update(preds, targets)
        self.log_dict(metrics, prog_bar=stage == "val", batch_size=len(targets))
        if stage == "test":
            self.test_outputs.append((logits.detach().float(), targets, shares.float(),
                                      self.abstaining(tokens, lengths)))
            if self.known_names is not None:
                _, found = self.known_names.lookup(self.net.transfer.as_pretrained(tokens), lengths)
                self.test_share_found.update(found.float())
                for subset, rows in ((self.test_found, found), (self.test_not_found, ~found)):
                    if rows.any():
                        subset.update(logits[rows], targets[rows])

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def _log_class_f1(self, stage: str) -> torch.Tensor:
        metric = self.val_class_f1 if stage == "val" else self.test_class_f1
        scores = metric.compute()
        for label, score in zip(self.hparams.labels, scores, strict=True):
            self.log(f"{stage}_f1/{label}", score, sync_dist=True)
        metric.reset()
        return scores

    def on_validation_epoch_start(self) -> None:
        self.val_confusion.reset()

    def on_test_epoch_start(self) -> None:
        self.test_confusion.reset()
        self.test_outputs = []

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking:  # two sanity batches are no score to remember
            self.val_acc_best.update(self.val_metrics["acc"].compute())
            self.log("val/acc_best", self.val_acc_best.compute(), prog_bar=True, sync_dist=True)
        self._log_class_f1("val")

    def on_test_epoch_end(self) -> None:
        self._log_class_f1("test")
        if self.known_names is not None:
            for subset, suffix in ((self.test_found, "in_pretrain"), (self.test_not_found, "not_in_pretrain")):
                for key, value in subset.compute().items():
                    self.log(f"test/{key}_{suffix}", value, sync_dist=True)
                subset.reset()
            self.log("test/share_in_pretrain", self.test_share_found.compute(), sync_dist=True)
            self.test_share_found.reset()
        logits, targets, shares, abstaining = self.gather_test_outputs()
        if not len(targets):
            return
        self.test_outputs = [(logits.cpu(), targets.cpu(), shares.cpu())]  # for the dashboard's reliability diagram
        calibration = self.calibration or Calibration()
        rule = calibration.abstention
        if rule:  # the share of test names the rule fitted on validation abstains on (all reasons but set size)
            scores = ood_score(abstaining[:, 1], logits.logsumexp(-1), rule.scale)
            abstained = (abstaining[:, 0] > rule.max_unknown_share) | (scores < rule.threshold)
            self.log("test/abstained", abstained.float().mean(), sync_dist=True)
        probs = logits.softmax(-1)
        raw = (logits * self.net.temperature).softmax(-1)  # before temperature scaling
        bins = calibration.bins
        # Every rank holds the same gathered logits, so sync_dist averages equal numbers: it only tells Lightning.
        self.log("test/ece_raw", expected_calibration_error(raw, targets, bins), sync_dist=True)
        self.log("test/ece", expected_calibration_error(probs, targets, bins), sync_dist=True)
        if self.config.soft_targets:  # over people: a name's predicted label is right for its share of them
            self.log("test/ece_shares", share_calibration_error(probs, shares, bins), sync_dist=True)
        for level in calibration.conformal:
            name = f"{float(level) * 100:g}"
            for kind in [None, *calibration.set_kinds(level)]:  # None: the sets this model serves (calibration.sets)
                sets = prediction_sets(probs, calibration.threshold(level, kind))
                suffix = f"_{kind}" if kind else ""
                self.log(f"test/coverage_{name}{suffix}", sets.gather(1, targets[:, None]).float().mean(),
                         sync_dist=True)
                self.log(f"test/set_size_{name}{suffix}", sets.sum(1).float().mean(), sync_dist=True)
        thresholds = served_and_compared(calibration, level_key(REPORT_LEVEL))
        self.label_report = label_report(probs, targets, self.hparams.labels, thresholds,
                                         abstained if rule else None, bins)

    def abstaining(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """[B, 2]: each name's share of characters never in training, and its letters' novelty (0 without a
        fitted abstention rule)."""
        rule = self.calibration.abstention if self.calibration else None
        if not rule:
            return tokens.new_zeros(len(lengths), 2, dtype=torch.float)
        if getattr(self, "_novelty_of", None) is not rule:  # built once per fitted rule
            self._novelty, self._novelty_of = CharTrigrams.from_state(rule.novelty), rule
        unknown = (tokens == self.hparams.vocab.index(UNK)).sum(1).float() / lengths.float()
        return torch.stack([unknown, self._novelty.score(tokens, lengths).to(tokens.device)], dim=1)

    def gather_test_outputs(self) -> tuple[torch.Tensor, ...]:
        """Every rank's test logits, targets, shares and abstention inputs, on every rank. Ranks hold different
        numbers of names (each scores its own share once), which Lightning's all_gather cannot take; torchmetrics'
        gather pads and trims."""
        n = len(self.hparams.labels)
        parts = self.test_outputs or [(torch.zeros(0, n, device=self.device),
                                       torch.zeros(0, dtype=torch.long, device=self.device),
                                       torch.zeros(0, n, device=self.device), torch.zeros(0, 2, device=self.device))]
        columns = [torch.cat(column) for column in zip(*parts, strict=True)]
        if self.trainer.world_size > 1:
            columns = [torch.cat(gather_all_tensors(t.contiguous())) for t in columns]
        return tuple(columns)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        datamodule = self.trainer.datamodule
        if datamodule is not None:  # one key for every corpus' split settings (Lightning's is the class name)
            checkpoint["data"] = {**datamodule.state_dict(), "label_name": getattr(datamodule, "label_name", "label")}
        checkpoint.update(self.served_decisions())

    def served_decisions(self) -> dict[str, Any]:
        """What the steps after `fit` decided, as a checkpoint carries it: the calibration and the linear part
        where there are any, and the format."""
        return {**({"calibration": self.calibration.plain()} if self.calibration else {}),
                **({"linear_part": self.mixture} if self.mixture else {}), "format": CHECKPOINT_FORMAT}

    def serve_with(self, calibration: Calibration | None, mixture: dict | None) -> None:
        """What the steps after `fit` decided for serving: the calibration (its temperature becomes the decision
        layer's; none: temperature 1) and the linear part's mixture, which every checkpoint saved after carries."""
        self.calibration, self.mixture = calibration, mixture
        self.net.temperature.fill_(float(calibration.temperature) if calibration else 1.0)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.calibration = Calibration.from_plain(checkpoint.get("calibration"))
        self.mixture = checkpoint.get("linear_part")

    @torch.no_grad()
    def collect_logits(self, loader: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Decision logits, targets and shares over a loader, on the CPU (for calibration after training)."""
        self.eval()
        parts = [(self.net(batch.tokens, batch.lengths).float(), batch.targets, batch.shares.float())
                 for batch in loader]
        logits, targets, shares = (torch.cat(column) for column in zip(*parts, strict=True))
        return logits, targets, shares

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: Any = None) -> None:
        """Lightning refuses to clip for a fused optimizer under any mixed precision, for fear of gradients still
        scaled by float16's loss scaler; bf16-mixed has no scaler, so there the plain clipping is right."""
        precision = self.trainer.precision_plugin
        if isinstance(precision, MixedPrecision) and precision.scaler is None:
            Precision.clip_gradients(precision, optimizer, gradient_clip_val or 0.0,
                                     gradient_clip_algorithm or GradClipAlgorithmType.NORM)
        else:
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    @property
    def known_names(self) -> Any:
        """The known-name table of a fine-tuned model, or None."""
        return None if self.net.transfer is None else self.net.transfer.known

    def configure_optimizers(self) -> dict:
        settings = self.config
        factory = instantiate(settings.optimizer) if settings.optimizer else torch.optim.AdamW
        scale = settings.pretrained_lr_scale
        if settings.init_from and scale != 1.0:  # pretrained layers move more slowly than new ones
            modules = [self.net.embedding, *(cell for _, cell in self.net.named_cells()),
                       *(self.net.transfer.pretrained_modules() if self.net.transfer is not None else [])]
            pretrained = {id(p) for m in modules if m is not None for p in m.parameters()}
            base_lr = getattr(factory, "keywords", {}).get("lr", 1e-3)
            params = [{"params": [p for p in self.parameters() if id(p) not in pretrained]},
                      {"params": [p for p in self.parameters() if id(p) in pretrained], "lr": base_lr * scale}]
        else:
            params = self.parameters()
        if self.automatic_optimization or self.device.type != "cuda":  # no graphs to capture on the CPU
            optimizer = factory(params=params)
        else:
            optimizer = fast_optimizer(factory, list(params), getattr(factory, "keywords", {}).get("lr", 1e-3),
                                       self.device)
        if not settings.scheduler:
            return {"optimizer": optimizer}
        scheduler = instantiate(settings.scheduler)(optimizer=optimizer)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}
