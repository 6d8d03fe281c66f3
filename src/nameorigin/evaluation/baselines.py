"""The reference any char-RNN score is read against: TF-IDF of character 1-4-grams + logistic regression
(scikit-learn, the optional [bench] extra), trained and scored on the same name-disjoint split as train.py. For
tables too large for the LR's grid (NaNa's 890k names x 175 labels), the project's own n-gram linear model
(fit_hashed_baseline: nameorigin.model.ngram_linear, what the model's linear part is)."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from nameorigin.data.batching import TRAINED_ON
from nameorigin.data.corpus import read_corpus, split_by_name
from nameorigin.model import ngram_linear

LR_GRID = (1.0, 3.0, 10.0, 30.0)  # the LR's C, picked on validation
PARALLEL_PAST = 5_000  # training names past which the grid's fits run in parallel processes

if TYPE_CHECKING:
    from sklearn.feature_extraction.text import TfidfVectorizer


def tfidf_baseline(data: str, seed: int = 0) -> dict:
    """TF-IDF of character 1-4-grams + logistic regression, C chosen on the validation split."""
    result = fit_tfidf_baseline(split_by_name(read_corpus(data)[0], [0.8, 0.1, 0.1], seed))
    del result["test_predictions"]
    return result


def fit_tfidf_baseline(splits: dict[str, list[tuple[str, str]]], refit: bool = False) -> dict:
    """The n-gram baseline fitted on splits["train"], C chosen on splits["val"], scored on splits["test"]; with
    each test name's predicted language, for a paired comparison on the same names. refit: then fitted again, with
    that C, on train + val (vocabulary and weights), as train.py's refit model is."""
    from sklearn.metrics import accuracy_score, f1_score  # imported here: an optional extra

    text = {s: [n for n, _ in p] for s, p in splits.items()}
    gold = {s: [lang for _, lang in p] for s, p in splits.items()}
    start = time.time()
    vectorizer = tfidf_ngrams()
    features = {"train": vectorizer.fit_transform(text["train"])}
    features.update({s: vectorizer.transform(text[s]) for s in ("val", "test")})
    fits = fit_grid(features["train"], gold["train"])
    best = max(fits, key=lambda m: accuracy_score(gold["val"], m.predict(features["val"])))
    val_acc = accuracy_score(gold["val"], best.predict(features["val"]))
    if refit:
        vectorizer = tfidf_ngrams()
        both = vectorizer.fit_transform(text["train"] + text["val"])
        (best,) = fit_grid(both, gold["train"] + gold["val"], (best.C,))
        features["test"] = vectorizer.transform(text["test"])
    predicted = best.predict(features["test"])
    # plain floats: the margin's figures go into checkpoints read with weights_only=True
    return {"C": float(best.C), "setting": f"C={best.C:g}", "val_acc": float(val_acc),
            "trained_on": TRAINED_ON if refit else "train", "test_acc": float(accuracy_score(gold["test"], predicted)),
            "test_macro_f1": float(f1_score(gold["test"], predicted, average="macro")), "seconds": time.time() - start,
            "test_predictions": [str(p) for p in predicted]}


def fit_grid(features: Any, labels: list[str], grid: tuple[float, ...] = LR_GRID) -> list[Any]:
    """One logistic regression per C of `grid`, each on one BLAS thread: on these sparse fits more threads only add
    overhead, and each fit's answer is then the same on any machine. Past PARALLEL_PAST names the fits run side by
    side, one process per core (below it, starting the processes costs more than it saves)."""
    from joblib import Parallel, delayed
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    def fit(c: float) -> Any:
        with threadpool_limits(1):
            return LogisticRegression(C=c, max_iter=2000).fit(features, labels)

    if len(labels) < PARALLEL_PAST or len(grid) == 1:
        return [fit(c) for c in grid]
    return Parallel(n_jobs=min(len(grid), os.cpu_count() or 1))(delayed(fit)(c) for c in grid)


def tfidf_ngrams() -> TfidfVectorizer:
    """Character 1-4-grams within word boundaries, TF-IDF weighted (sublinear): the LR baselines' features."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 4), sublinear_tf=True)


def fit_hashed_baseline(splits: dict[str, list[tuple[str, str]]], refit: bool = False, buckets: int = 2**18,
                        max_n: int = 4, seed: int = 0) -> dict:
    """fit_tfidf_baseline for large tables: the project's own n-gram linear model (nameorigin.model.ngram_linear,
    the model's linear part fitted alone) on 1-4-grams hashed into `buckets`; its penalty picked on validation, or
    past the full fit's size, the batch fit's epochs; with each test pair's predicted label and the rank of its
    true label, for precision@K and a paired comparison. refit: then fitted again on train + val with that
    setting."""
    from sklearn.metrics import f1_score

    start = time.time()
    names = {split: [name for name, _ in pairs] for split, pairs in splits.items()}
    labels = sorted({label for _, label in splits["train"]})
    column = {label: i for i, label in enumerate(labels)}
    gold = {split: torch.tensor([column.get(label, -1) for _, label in pairs]) for split, pairs in splits.items()}
    counted = ngram_linear.NameCounts(names["train"], max_n, buckets)
    x = {split: counted(names[split]) for split in splits}
    full = ngram_linear.products(x["train"], len(labels)) <= ngram_linear.FIT_LIMIT
    if full:
        fitted = ngram_linear.fit_on_validation((x["train"], gold["train"], None), (x["val"], gold["val"]),
                                                len(labels))
        setting = f"penalty={fitted.penalty:g}"
    else:
        fitted = ngram_linear.fit_batches(x["train"], gold["train"], len(labels), seed=seed,
                                          val=(x["val"], gold["val"]))
        setting = f"epochs={max(fitted.val_acc, key=lambda epoch: (fitted.val_acc[epoch], -epoch))}"
    val_acc = max(fitted.val_acc.values())
    if refit:
        # a validation label training never had cannot be fitted: its names stay out
        pairs = [(name, column[label]) for name, label in splits["train"] + splits["val"] if label in column]
        counted = ngram_linear.NameCounts([name for name, _ in pairs], max_n, buckets)
        both, targets = counted([name for name, _ in pairs]), torch.tensor([label for _, label in pairs])
        if full:
            fitted = ngram_linear.LinearFit(*ngram_linear.fit_full(both, targets, None, len(labels), fitted.penalty),
                                            fitted.penalty)
        else:
            fitted = ngram_linear.fit_batches(both, targets, len(labels), epochs=int(setting.split("=")[1]),
                                              seed=seed)
        x["test"] = counted(names["test"])
    scores = fitted.logits(x["test"])
    ranks = ngram_linear.label_ranks(scores, gold["test"])
    predicted = [labels[i] for i in scores.argmax(1).tolist()]
    truth_names = [label for _, label in splits["test"]]
    return {"setting": setting, "val_acc": val_acc, "trained_on": TRAINED_ON if refit else "train",
            "test_acc": float(np.mean([p == t for p, t in zip(predicted, truth_names, strict=True)])),
            "test_macro_f1": float(f1_score(truth_names, predicted, average="macro")),
            "precision_at": ngram_linear.precision_at(ranks, len(labels)),
            "seconds": time.time() - start, "test_predictions": predicted, "test_ranks": ranks.tolist()}


def expanded_rows(targets: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A share table as a classifier's training rows: one row per (name, label it has a share of), weighted by
    share x the name's weight. Weighted cross-entropy over these rows is the run's own loss on those names."""
    rows, columns = np.nonzero(targets)
    return rows, columns, targets[rows, columns] * weights[rows]


def person_weighted_accuracy(targets: np.ndarray, weights: np.ndarray, predicted: np.ndarray) -> float:
    """The share of the people behind the names whose label the prediction matches (each name counts its weight,
    split over its labels' shares)."""
    return float((weights * targets[np.arange(len(predicted)), predicted]).sum() / weights.sum())


def fit_share_baseline(names: dict[str, list[str]], targets: dict[str, np.ndarray], weights: dict[str, np.ndarray],
                       hashed: bool, refit: bool = False) -> dict:
    """The n-gram baseline fitted to what a share or weighted table's run fits: each name's label shares as targets,
    weighted by its weight (targets: [names, labels] shares, one-hot without share columns; weights: ones without a
    weight column). The TF-IDF LR (C) or, for large tables, the project's hashed n-gram softmax (its penalty),
    the setting picked on validation by person-weighted accuracy; refit: then fitted again on train + val. Returns
    the test names' label probabilities."""
    if hashed:
        return fit_hashed_share_baseline(names, targets, weights, refit)
    from scipy.sparse import vstack
    from sklearn.linear_model import LogisticRegression

    start = time.time()
    vectorizer = tfidf_ngrams()
    features = {"train": vectorizer.fit_transform(names["train"])}
    features.update({s: vectorizer.transform(names[s]) for s in names if s not in features})

    def fit(setting: float, splits: tuple[str, ...]) -> Any:
        x = vstack([features[s] for s in splits])
        rows, columns, sample_weight = expanded_rows(np.concatenate([targets[s] for s in splits]),
                                                     np.concatenate([weights[s] for s in splits]))
        return LogisticRegression(C=setting, max_iter=2000).fit(x[rows], columns, sample_weight=sample_weight)

    def probabilities(model: Any, split: str) -> np.ndarray:
        full = np.zeros((len(names[split]), targets[split].shape[1]))
        full[:, model.classes_] = model.predict_proba(features[split])  # a label no name had a share of: 0
        return full

    scored = {}
    for setting in (1, 3, 10, 30):
        model = fit(setting, ("train",))
        scored[setting] = person_weighted_accuracy(targets["val"], weights["val"],
                                                   probabilities(model, "val").argmax(1)), model
    setting = max(scored, key=lambda s: scored[s][0])
    model = fit(setting, ("train", "val")) if refit else scored[setting][1]
    return {"setting": f"C={setting:g}", "val_person_acc": scored[setting][0],
            "test_probabilities": probabilities(model, "test"), "seconds": time.time() - start}


def fit_hashed_share_baseline(names: dict[str, list[str]], targets: dict[str, np.ndarray],
                              weights: dict[str, np.ndarray], refit: bool, buckets: int = 2**18,
                              max_n: int = 4) -> dict:
    """fit_share_baseline's large-table model: nameorigin.model.ngram_linear's full fit against the shares,
    weighted, its penalty picked on validation by person-weighted accuracy (the model's linear part, alone)."""
    start = time.time()
    shares = {split: torch.from_numpy(values).float() for split, values in targets.items()}
    weight = {split: torch.from_numpy(values).float() for split, values in weights.items()}
    counted = ngram_linear.NameCounts(names["train"], max_n, buckets)
    x = {split: counted(names[split]) for split in names}
    labels = targets["train"].shape[1]
    fitted = ngram_linear.fit_on_validation(
        (x["train"], shares["train"], weight["train"]), (x["val"], None), labels,
        score=lambda predicted: person_weighted_accuracy(targets["val"], weights["val"], predicted.numpy()))
    penalty, weight_matrix, bias = fitted.penalty, fitted.weight, fitted.bias
    if refit:
        counted = ngram_linear.NameCounts(names["train"] + names["val"], max_n, buckets)
        weight_matrix, bias = ngram_linear.fit_full(
            counted(names["train"] + names["val"]), torch.cat([shares["train"], shares["val"]]),
            torch.cat([weight["train"], weight["val"]]), labels, penalty)
        x["test"] = counted(names["test"])
    probabilities = (x["test"] @ weight_matrix + bias).softmax(1).double().numpy()
    return {"setting": f"penalty={penalty:g}", "val_person_acc": fitted.val_acc[penalty],
            "test_probabilities": probabilities, "seconds": time.time() - start}
