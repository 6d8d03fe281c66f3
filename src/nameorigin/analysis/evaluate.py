"""Score a checkpoint on its own held-out test split, rebuilt from the split settings stored inside it."""

from __future__ import annotations

from pathlib import Path

import torch

from nameorigin.base.errors import UserError
from nameorigin.config import TableDataConfig
from nameorigin.data.corpus import label_files, read_corpus, split_by_name
from nameorigin.model.artifacts import Calibration
from nameorigin.model.calibration import expected_calibration_error, level_key, prediction_sets
from nameorigin.model.charrnn import batch_tokens
from nameorigin.model.label_report import (
    REPORT_LEVEL,
    f1_from_confusion,
    label_report,
    report_table,
    served_and_compared,
    weakest_line,
)
from nameorigin.serving.abstain import abstentions
from nameorigin.serving.predict import BATCH_SIZE, Predictor


def scores(truth: torch.Tensor, preds: torch.Tensor, k: int) -> tuple[float, float, list[float], torch.Tensor]:
    """Accuracy, macro-F1, per-class F1 and the confusion matrix. Macro-F1 averages the languages that occur in
    the truth or the predictions (as torchmetrics does), so a subset without some language is not penalized."""
    confusion = torch.bincount(truth * k + preds, minlength=k * k).view(k, k)
    tp, f1 = confusion.diag().double(), f1_from_confusion(confusion)
    present = (confusion.sum(0) + confusion.sum(1)) > 0
    return float(tp.sum() / max(len(truth), 1)), float(f1[present].mean()), f1.tolist(), confusion


def checkpoint_splits(predictor: Predictor, root: str | Path) -> dict[str, list[tuple[str, str]]]:
    """The train/val/test pairs the checkpoint was trained on, rebuilt from root with the split settings stored in
    it; refuses a corpus whose sha256 differs from the one it was trained on."""
    settings = predictor.data_settings
    if not {"corpus_sha256", "split_seed", "split_fractions"} <= settings.keys():
        raise UserError("this checkpoint holds no split settings: evaluate needs one written by train.py")
    if "label_column" in settings:  # trained on a table: read it again with the stored column settings
        from nameorigin.data.table import COLUMN_SETTINGS, read_table  # with the data module: imports Lightning

        columns = {key: settings[key] for key in COLUMN_SETTINGS if key in settings}  # older: no share columns
        table = read_table(TableDataConfig(path=str(root), normalize=settings["normalize"], **columns))
        pairs, digest = table.pairs, table.digest  # with shares: each name under its majority label
    elif not label_files(Path(root)):  # read_corpus's own message names train.py's data.root override
        raise UserError(f"{root} holds no <Language>.txt files: pass the folder the checkpoint was trained on")
    else:
        pairs, digest = read_corpus(root, settings.get("normalize", predictor.normalize))
    if digest != settings["corpus_sha256"]:
        raise UserError(f"{root} is not the corpus this checkpoint was trained on (sha256 differs): "
                        "pass the original folder or table")
    return split_by_name(pairs, settings["split_fractions"], settings["split_seed"])




def ranked_scores(probs: torch.Tensor, truth: torch.Tensor, calibration: Calibration) -> dict:
    """What ranks and probabilities say beyond the top label, each test pair one sample (a name under two labels
    is two samples, as name2nat counts them): precision@1..5 (the true label among the top K), the top-label ECE,
    and, when the checkpoint stores the level, how often the 90 % prediction set holds the label and its size."""
    rank = (probs > probs.gather(1, truth[:, None])).sum(1)  # how many labels score above the true one
    result = {"precision_at": {k: float((rank < k).double().mean()) for k in range(1, min(5, probs.shape[1]) + 1)},
              "ece": expected_calibration_error(probs, truth), "ranks": rank.tolist()}
    if level_key(REPORT_LEVEL) in calibration.conformal:
        sets = prediction_sets(probs, calibration.threshold(level_key(REPORT_LEVEL)))
        result["set_level"] = REPORT_LEVEL
        result["set_coverage"] = float(sets.gather(1, truth[:, None]).double().mean())
        result["set_size"] = float(sets.sum(1).double().mean())
    return result


def evaluate(predictor: Predictor, root: str | Path, batch_size: int = BATCH_SIZE,
             known_keys: set[str] | None = None) -> dict:
    """Accuracy, macro-F1, per-class F1, the confusion matrix, which test names it got right, precision@K, ECE
    and set coverage (ranked_scores), on the checkpoint's test split; with `known_keys`
    (nameorigin.model.known.name_key of every names-dataset surname) also for the test names found there and for
    those not found."""
    test = checkpoint_splits(predictor, root)["test"]
    index = {label: i for i, label in enumerate(predictor.labels)}
    encoded = [predictor.encode(name) for name, _ in test]
    padded = batch_tokens([codes or [1] for codes, _ in encoded], torch.device("cpu"))
    calibration = predictor.calibration if predictor.undo_temperature == 1.0 else Calibration()
    energy = torch.empty(len(test)) if calibration.abstention else None
    probs = predictor.probabilities(padded, batch_size, energy)
    preds = probs.argmax(-1)
    truth = torch.tensor([index[language] for _, language in test])
    k = len(predictor.labels)
    accuracy, macro_f1, f1, confusion = scores(truth, preds, k)
    # Which test names abstain, as predict() decides it (an unusable name too), from this one forward pass.
    abstained = None if energy is None else torch.tensor(
        [error is not None for _, error in encoded]) | torch.from_numpy(
        abstentions(predictor, padded, energy, None, None, batch_size).abstained)
    result = {"size": len(test), "accuracy": accuracy, "macro_f1": macro_f1,
              **ranked_scores(probs, truth, calibration),
              "per_label": label_report(probs, truth, predictor.labels,
                                        served_and_compared(calibration, level_key(REPORT_LEVEL)), abstained,
                                        calibration.bins),
              "per_class_f1": dict(zip(predictor.labels, f1, strict=True)),
              "labels": predictor.labels, "confusion": confusion.tolist(), "correct": (preds == truth).tolist()}
    if known_keys is not None:
        from nameorigin.model.known import name_key

        found = torch.tensor([name_key(name) in known_keys for name, _ in test])
        for subset, rows in (("in_pretrain", found), ("not_in_pretrain", ~found)):
            accuracy, macro_f1, _, _ = scores(truth[rows], preds[rows], k)
            result[subset] = {"size": int(rows.sum()), "accuracy": accuracy, "macro_f1": macro_f1}
    return result


def format_report(result: dict) -> str:
    labels = result["labels"]
    short = [label[:4] for label in labels]
    lines = [f"test split: {result['size']} names",
             f"accuracy  {result['accuracy']:.4f}", f"macro-F1  {result['macro_f1']:.4f}",
             "precision@K  " + "  ".join(f"{k}: {p:.4f}" for k, p in result["precision_at"].items()),
             f"ECE       {result['ece']:.4f}"]
    if "set_coverage" in result:
        lines.append(f"{result['set_level']:.0%} sets  coverage {result['set_coverage']:.4f}, "
                     f"mean size {result['set_size']:.2f}")
    for subset in ("in_pretrain", "not_in_pretrain"):
        if subset in result:
            part = result[subset]
            where = "found in" if subset == "in_pretrain" else "not found in"
            lines.append(f"  {part['size']} names {where} names-dataset: accuracy {part['accuracy']:.4f}, "
                         f"macro-F1 {part['macro_f1']:.4f}")
    lines += ["", weakest_line(result["per_label"]) or "", *report_table(result["per_label"])]
    lines += ["", "confusion (rows true, columns predicted):", " " * 13 + " ".join(f"{s:>4}" for s in short)]
    lines += [f"  {label:<10} " + " ".join(f"{n:>4}" for n in row) for label, row in
              zip(labels, result["confusion"], strict=True)]
    return "\n".join(lines)
