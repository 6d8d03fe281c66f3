"""Score a checkpoint on its own held-out test split, rebuilt from the split settings stored inside it."""

from __future__ import annotations

from pathlib import Path

import torch

from nameorigin.data import DataError, read_corpus, split_by_name
from nameorigin.predict import BATCH_SIZE, PredictError, Predictor


def evaluate(predictor: Predictor, root: str | Path, batch_size: int = BATCH_SIZE) -> dict:
    """Accuracy, macro-F1, per-class F1 and the confusion matrix on the checkpoint's test split."""
    settings = predictor.data_settings
    if not {"corpus_sha256", "split_seed", "split_fractions"} <= settings.keys():
        raise PredictError("this checkpoint holds no split settings: evaluate needs one written by train.py")
    try:
        pairs, digest = read_corpus(root, settings.get("normalize", predictor.normalize))
    except DataError as error:
        raise PredictError(str(error)) from None
    if digest != settings["corpus_sha256"]:
        raise PredictError(f"{root} is not the corpus this checkpoint was trained on (sha256 differs): "
                           "pass the original folder")
    test = split_by_name(pairs, settings["split_fractions"], settings["split_seed"])["test"]
    index = {label: i for i, label in enumerate(predictor.labels)}
    encoded = [predictor.encode(name)[0] or [1] for name, _ in test]
    preds = predictor.probabilities(encoded, batch_size).argmax(-1)
    truth = torch.tensor([index[language] for _, language in test])
    k = len(predictor.labels)
    confusion = torch.bincount(truth * k + preds, minlength=k * k).view(k, k)
    tp = confusion.diag().double()
    precision = tp / confusion.sum(0).double().clamp_min(1)
    recall = tp / confusion.sum(1).double().clamp_min(1)
    f1 = 2 * precision * recall / (precision + recall).clamp_min(1e-12)
    return {"size": len(test), "accuracy": float(tp.sum() / len(test)), "macro_f1": float(f1.mean()),
            "per_class_f1": dict(zip(predictor.labels, f1.tolist(), strict=True)),
            "labels": predictor.labels, "confusion": confusion.tolist()}


def format_report(result: dict) -> str:
    labels = result["labels"]
    short = [label[:4] for label in labels]
    lines = [f"test split: {result['size']} names",
             f"accuracy  {result['accuracy']:.4f}", f"macro-F1  {result['macro_f1']:.4f}", "", "per-class F1:"]
    lines += [f"  {label:<12} {score:.3f}" for label, score in result["per_class_f1"].items()]
    lines += ["", "confusion (rows true, columns predicted):", " " * 13 + " ".join(f"{s:>4}" for s in short)]
    lines += [f"  {label:<10} " + " ".join(f"{n:>4}" for n in row) for label, row in
              zip(labels, result["confusion"], strict=True)]
    return "\n".join(lines)
