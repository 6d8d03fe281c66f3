"""The reference any char-RNN score is read against: TF-IDF of character 1-4-grams + logistic regression
(scikit-learn, the optional [bench] extra), trained and scored on the same name-disjoint split as train.py."""

from __future__ import annotations

import time

from nameorigin.data.batching import TRAINED_ON
from nameorigin.data.names import read_corpus, split_by_name


def ngram_baseline(data: str, seed: int = 0) -> dict:
    """TF-IDF of character 1-4-grams + logistic regression, C chosen on the validation split."""
    result = fit_ngram_baseline(split_by_name(read_corpus(data)[0], [0.8, 0.1, 0.1], seed))
    del result["test_predictions"]
    return result


def fit_ngram_baseline(splits: dict[str, list[tuple[str, str]]], refit: bool = False) -> dict:
    """The n-gram baseline fitted on splits["train"], C chosen on splits["val"], scored on splits["test"]; with
    each test name's predicted language, for a paired comparison on the same names. refit: then fitted again, with
    that C, on train + val (vocabulary and weights), as train.py's refit model is."""
    from sklearn.feature_extraction.text import TfidfVectorizer  # imported here: an optional extra
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score

    text = {s: [n for n, _ in p] for s, p in splits.items()}
    gold = {s: [lang for _, lang in p] for s, p in splits.items()}
    start = time.time()
    def char_ngrams() -> TfidfVectorizer:  # one definition for the fit on train and the refit on train + val
        return TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 4), sublinear_tf=True)

    vectorizer = char_ngrams()
    features = {"train": vectorizer.fit_transform(text["train"])}
    features.update({s: vectorizer.transform(text[s]) for s in ("val", "test")})
    fits = [LogisticRegression(C=c, max_iter=2000).fit(features["train"], gold["train"]) for c in (1, 3, 10, 30)]
    best = max(fits, key=lambda m: accuracy_score(gold["val"], m.predict(features["val"])))
    val_acc = accuracy_score(gold["val"], best.predict(features["val"]))
    if refit:
        vectorizer = char_ngrams()
        both = vectorizer.fit_transform(text["train"] + text["val"])
        best = LogisticRegression(C=best.C, max_iter=2000).fit(both, gold["train"] + gold["val"])
        features["test"] = vectorizer.transform(text["test"])
    predicted = best.predict(features["test"])
    return {"C": best.C, "val_acc": val_acc, "trained_on": TRAINED_ON if refit else "train",
            "test_acc": accuracy_score(gold["test"], predicted),
            "test_macro_f1": f1_score(gold["test"], predicted, average="macro"), "seconds": time.time() - start,
            "test_predictions": [str(p) for p in predicted]}


def country_baseline(cache: str, seed: int = 0, fractions: tuple[float, ...] = (0.98, 0.01, 0.01),
                     alpha: float = 1e-6, epochs: int = 5) -> dict:
    """The linear reference for the surnames country model, on the same name-disjoint split: hashed character
    1-4-grams + SGD logistic regression on each name's most common country; top-1 and top-5 on held-out names."""
    import numpy as np
    from sklearn.feature_extraction.text import HashingVectorizer
    from sklearn.linear_model import SGDClassifier

    from nameorigin.data.surnames import SurnamesDataModule

    data = SurnamesDataModule(cache, split_fractions=fractions, split_seed=seed)
    data.setup()
    top = data.corpus.top_index[:, 0].numpy()
    vectorizer = HashingVectorizer(analyzer="char_wb", ngram_range=(1, 4), n_features=2**20, alternate_sign=False)
    start = time.time()
    features = {s: vectorizer.transform([data.corpus.names[r] for r in rows]) for s, rows in data.splits.items()}
    model = SGDClassifier(loss="log_loss", alpha=alpha, max_iter=epochs, tol=None, n_jobs=-1, random_state=seed)
    model.fit(features["train"], top[data.splits["train"]])
    result = {"alpha": alpha, "epochs": epochs, "seconds": time.time() - start}
    for split in ("val", "test"):
        scores = model.decision_function(features[split])
        truth = top[data.splits[split]]
        best5 = model.classes_[np.argsort(-scores, axis=1)[:, :5]]
        result[f"{split}_top1"] = float((best5[:, 0] == truth).mean())
        result[f"{split}_top5"] = float((best5 == truth[:, None]).any(1).mean())
    return result
