"""The reference any char-RNN score is read against: TF-IDF of character 1-4-grams + logistic regression
(scikit-learn, the optional [bench] extra), trained and scored on the same name-disjoint split as train.py."""

from __future__ import annotations

import time

from nameorigin.data import read_corpus, split_by_name


def ngram_baseline(data: str, seed: int = 0) -> dict:
    """TF-IDF of character 1-4-grams + logistic regression, C chosen on the validation split."""
    from sklearn.feature_extraction.text import TfidfVectorizer  # imported here: an optional extra
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score

    splits = split_by_name(read_corpus(data)[0], [0.8, 0.1, 0.1], seed)
    text = {s: [n for n, _ in p] for s, p in splits.items()}
    gold = {s: [lang for _, lang in p] for s, p in splits.items()}
    start = time.time()
    vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 4), sublinear_tf=True)
    features = {"train": vectorizer.fit_transform(text["train"])}
    features.update({s: vectorizer.transform(text[s]) for s in ("val", "test")})
    fits = [LogisticRegression(C=c, max_iter=2000).fit(features["train"], gold["train"]) for c in (1, 3, 10, 30)]
    best = max(fits, key=lambda m: accuracy_score(gold["val"], m.predict(features["val"])))
    predicted = best.predict(features["test"])
    return {"C": best.C, "val_acc": accuracy_score(gold["val"], best.predict(features["val"])),
            "test_acc": accuracy_score(gold["test"], predicted),
            "test_macro_f1": f1_score(gold["test"], predicted, average="macro"), "seconds": time.time() - start}
