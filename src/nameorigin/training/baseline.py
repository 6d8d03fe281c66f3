"""The reference any char-RNN score is read against: TF-IDF of character 1-4-grams + logistic regression
(scikit-learn, the optional [bench] extra), trained and scored on the same name-disjoint split as train.py. For
tables too large for the LR's grid (NaNa's 890k names x 175 labels), the same character n-grams hashed, fitted
by SGD (fit_hashed_baseline)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from nameorigin.data.batching import TRAINED_ON
from nameorigin.data.corpus import read_corpus, split_by_name

if TYPE_CHECKING:
    from sklearn.feature_extraction.text import HashingVectorizer, TfidfVectorizer


def ngram_baseline(data: str, seed: int = 0) -> dict:
    """TF-IDF of character 1-4-grams + logistic regression, C chosen on the validation split."""
    result = fit_ngram_baseline(split_by_name(read_corpus(data)[0], [0.8, 0.1, 0.1], seed))
    del result["test_predictions"]
    return result


def fit_ngram_baseline(splits: dict[str, list[tuple[str, str]]], refit: bool = False) -> dict:
    """The n-gram baseline fitted on splits["train"], C chosen on splits["val"], scored on splits["test"]; with
    each test name's predicted language, for a paired comparison on the same names. refit: then fitted again, with
    that C, on train + val (vocabulary and weights), as train.py's refit model is."""
    from sklearn.linear_model import LogisticRegression  # imported here: an optional extra
    from sklearn.metrics import accuracy_score, f1_score

    text = {s: [n for n, _ in p] for s, p in splits.items()}
    gold = {s: [lang for _, lang in p] for s, p in splits.items()}
    start = time.time()
    vectorizer = tfidf_ngrams()
    features = {"train": vectorizer.fit_transform(text["train"])}
    features.update({s: vectorizer.transform(text[s]) for s in ("val", "test")})
    fits = [LogisticRegression(C=c, max_iter=2000).fit(features["train"], gold["train"]) for c in (1, 3, 10, 30)]
    best = max(fits, key=lambda m: accuracy_score(gold["val"], m.predict(features["val"])))
    val_acc = accuracy_score(gold["val"], best.predict(features["val"]))
    if refit:
        vectorizer = tfidf_ngrams()
        both = vectorizer.fit_transform(text["train"] + text["val"])
        best = LogisticRegression(C=best.C, max_iter=2000).fit(both, gold["train"] + gold["val"])
        features["test"] = vectorizer.transform(text["test"])
    predicted = best.predict(features["test"])
    return {"C": best.C, "val_acc": val_acc, "trained_on": TRAINED_ON if refit else "train",
            "test_acc": accuracy_score(gold["test"], predicted),
            "test_macro_f1": f1_score(gold["test"], predicted, average="macro"), "seconds": time.time() - start,
            "test_predictions": [str(p) for p in predicted]}


def tfidf_ngrams() -> TfidfVectorizer:
    """Character 1-4-grams within word boundaries, TF-IDF weighted (sublinear): the LR baselines' features."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 4), sublinear_tf=True)


def hashed_ngrams(columns: int = 2**20) -> HashingVectorizer:
    """Character 1-4-grams within word boundaries, hashed into `columns` columns, each row L2-normalized."""
    from sklearn.feature_extraction.text import HashingVectorizer

    return HashingVectorizer(analyzer="char_wb", ngram_range=(1, 4), n_features=columns, alternate_sign=False)


def fit_hashed_baseline(splits: dict[str, list[tuple[str, str]]], refit: bool = False,
                        alphas: tuple[float, ...] = (1e-6, 3e-7, 1e-7), epochs: int = 5, seed: int = 0) -> dict:
    """fit_ngram_baseline for large tables: hashed character 1-4-grams + one-vs-rest logistic regression by SGD
    (log loss), alpha chosen on splits["val"]; with each test pair's predicted label and the rank of its true
    label, for precision@K and a paired comparison. refit: then fitted again on train + val with that alpha."""
    import numpy as np
    from sklearn.linear_model import SGDClassifier
    from sklearn.metrics import f1_score

    vectorizer, start = hashed_ngrams(), time.time()
    features = {s: vectorizer.transform([name for name, _ in pairs]) for s, pairs in splits.items()}
    gold = {s: np.array([label for _, label in pairs]) for s, pairs in splits.items()}

    def fit(alpha: float, split: str = "train") -> SGDClassifier:
        from scipy.sparse import vstack

        x, y = (features["train"], gold["train"]) if split == "train" else \
            (vstack([features["train"], features["val"]]), np.concatenate([gold["train"], gold["val"]]))
        model = SGDClassifier(loss="log_loss", alpha=alpha, max_iter=epochs, tol=None, n_jobs=-1, random_state=seed)
        return model.fit(x, y)

    val_acc, best = {}, None  # one model kept at a time: each holds labels x 2^20 weights
    for alpha in alphas:
        model = fit(alpha)
        val_acc[alpha] = float((model.predict(features["val"]) == gold["val"]).mean())
        if best is None or val_acc[alpha] > val_acc[best[0]]:
            best = alpha, model
    alpha, model = best
    if refit:
        model = fit(alpha, "train+val")
    scores = model.decision_function(features["test"])
    if scores.ndim == 1:  # two labels: scikit-learn gives the second label's score alone
        scores = np.stack([-scores, scores], axis=1)
    column = {label: i for i, label in enumerate(model.classes_)}
    truth = np.array([column.get(label, -1) for label in gold["test"]])
    true_score = scores[np.arange(len(truth)), np.maximum(truth, 0)]
    rank = np.where(truth >= 0, (scores > true_score[:, None]).sum(1), len(column))  # a label train never had
    predicted = model.classes_[scores.argmax(1)]
    return {"alpha": alpha, "val_acc": val_acc, "trained_on": TRAINED_ON if refit else "train",
            "test_acc": float((predicted == gold["test"]).mean()),
            "test_macro_f1": float(f1_score(gold["test"], predicted, average="macro")),
            "precision_at": {k: float((rank < k).mean()) for k in range(1, min(5, scores.shape[1]) + 1)},
            "seconds": time.time() - start, "test_predictions": [str(p) for p in predicted]}


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
    weight column). The TF-IDF LR (C) or, for large tables, the hashed SGD model (alpha), the setting picked on
    validation by person-weighted accuracy; refit: then fitted again on train + val. Returns the test names'
    label probabilities."""
    from scipy.sparse import vstack
    from sklearn.linear_model import LogisticRegression, SGDClassifier

    start = time.time()
    vectorizer = hashed_ngrams() if hashed else tfidf_ngrams()
    features = {"train": vectorizer.fit_transform(names["train"])} if not hashed else {}
    features.update({s: vectorizer.transform(names[s]) for s in names if s not in features})
    settings = (1e-6, 3e-7, 1e-7) if hashed else (1, 3, 10, 30)

    def fit(setting: float, splits: tuple[str, ...]) -> Any:
        x = vstack([features[s] for s in splits])
        rows, columns, sample_weight = expanded_rows(np.concatenate([targets[s] for s in splits]),
                                                     np.concatenate([weights[s] for s in splits]))
        model = SGDClassifier(loss="log_loss", alpha=setting, max_iter=5, tol=None, random_state=0) if hashed \
            else LogisticRegression(C=setting, max_iter=2000)
        return model.fit(x[rows], columns, sample_weight=sample_weight)

    def probabilities(model: Any, split: str) -> np.ndarray:
        full = np.zeros((len(names[split]), targets[split].shape[1]))
        full[:, model.classes_] = model.predict_proba(features[split])  # a label no name had a share of: 0
        return full

    scored = {}
    for setting in settings:
        model = fit(setting, ("train",))
        scored[setting] = person_weighted_accuracy(targets["val"], weights["val"],
                                                   probabilities(model, "val").argmax(1)), model
    setting = max(scored, key=lambda s: scored[s][0])
    model = fit(setting, ("train", "val")) if refit else scored[setting][1]
    name = "alpha" if hashed else "C"
    return {"setting": f"{name}={setting:g}", "val_person_acc": scored[setting][0],
            "test_probabilities": probabilities(model, "test"), "seconds": time.time() - start}
