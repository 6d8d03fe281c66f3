"""How many rows of a table were relabelled, and which: the audit's default cut (nameorigin.analysis.audit).

Each given label is read as a mixture: the model's answer, or a relabelling, at random or to a label the model
confuses with the row's own. With p the out-of-sample probabilities put on the table's scale by one temperature,

    P(given | name) = (1 - a - c) p(given) + a (1 - p(given)) / (labels - 1) + c sum_t p(t) confused(t -> given)

where `confused` is the table's soft confusion matrix made symmetric and sharpened (SHARPNESS): each label's summed
probabilities over its rows, plus its transpose, the diagonal removed, raised to that power, rows normalised. The
temperature and both rates are fitted by maximum likelihood. The suspects are the rows most likely relabelled at
random, or to a confused label with the model's answer pointing back, as many as maximise the expected F1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A relabelling goes to the few labels a label is most confused with; a model's own doubt on a table of many labels
# spreads over dozens. Left soft (power 1) the confused part also soaks up that doubt and the audit flags three times
# the relabelled rows on NaNa; the power was picked on planted flips at seed 0 (docs/data-and-evaluation.md).
SHARPNESS = 4.0
FITTED_ROWS = 50_000  # the temperature is fitted on at most this many rows (drawn with seed 0): one number
LOG_TEMPERATURE = (-1.0, 1.0)  # from 0.37 (a model too soft for its table) to 2.7 (too sure)


@dataclass(frozen=True)
class Relabelling:
    """The fitted mixture: the temperature, the shares of rows relabelled at random and to a confused label, and
    each row's score the suspects are ranked by (its probability of having been relabelled at random, or to a
    confused label with the model's best other answer as the label it came from)."""

    at_random: float
    confused: float
    temperature: float
    fixable: np.ndarray

    def suspects(self) -> np.ndarray:
        """The rows of highest score, as many as maximise the expected F1 (the flagged rows' scores are the
        expected hits, all rows' scores the expected errors)."""
        ranked = np.argsort(-self.fixable, kind="stable")
        expected_hits = np.concatenate([[0.0], np.cumsum(self.fixable[ranked])])
        expected_f1 = 2 * expected_hits / (np.arange(len(ranked) + 1) + self.fixable.sum() + 1e-12)
        return ranked[: int(expected_f1.argmax())]

    def said(self) -> str:
        """What the fit read, for the audit's summary line."""
        return (f"{self.at_random + self.confused:.1%} estimated relabelled: {self.at_random:.1%} at random, "
                f"{self.confused:.1%} to a label the model confuses with theirs, probabilities at temperature "
                f"{self.temperature:.2f}")


def confusion_between(given: np.ndarray, probabilities: np.ndarray, sharpness: float = SHARPNESS) -> np.ndarray:
    """[labels, labels]: how much each label is confused with each other one, either way, rows summing to 1."""
    from scipy.sparse import csr_matrix

    rows, labels = probabilities.shape
    confusion = np.asarray(csr_matrix((np.ones(rows), (given, np.arange(rows))), shape=(labels, rows)) @ probabilities,
                           dtype=np.float64)
    confusion += confusion.T  # either way: a German name given as Dutch, or a Dutch name answered as German
    np.fill_diagonal(confusion, 0.0)
    confusion **= sharpness
    return confusion / np.maximum(confusion.sum(1, keepdims=True), 1e-300)


def readings(given: np.ndarray, probabilities: np.ndarray, confusion: np.ndarray, temperature: float,
             chunk: int = 2**16) -> np.ndarray:
    """[4, rows], at the temperature: the given label's probability, its likelihood relabelled at random and
    relabelled to a confused label, and the share of the other labels' probability on the model's best one."""
    out = np.zeros((4, len(given)))
    labels = probabilities.shape[1]
    for start in range(0, len(given), chunk):
        rows = slice(start, start + chunk)
        logits = np.log(np.maximum(probabilities[rows].astype(np.float64), 1e-12)) / temperature
        scaled = np.exp(logits - logits.max(1, keepdims=True))
        scaled /= scaled.sum(1, keepdims=True)
        own = scaled[np.arange(len(scaled)), given[rows]]
        scaled[np.arange(len(scaled)), given[rows]] = 0.0
        out[:, rows] = (own, (1 - own) / max(labels - 1, 1), (scaled * confusion.T[given[rows]]).sum(1),
                        scaled.max(1) / np.maximum(1 - own, 1e-12))
    return out


def mixed(read: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """Each row's P(given | name) under the mixture with shares (a, c), from its readings."""
    own, at_random, confused, _ = read
    return (1 - shares.sum()) * own + shares[0] * at_random + shares[1] * confused + 1e-12


def rates(read: np.ndarray) -> tuple[np.ndarray, float]:
    """(a, c) by maximum likelihood over the rows read, and the mean negative log-likelihood there."""
    from scipy.optimize import minimize

    fitted = minimize(lambda shares: -np.log(mixed(read, shares)).mean(), np.array([0.02, 0.02]),
                      bounds=[(0.0, 0.5), (0.0, 0.5)], method="L-BFGS-B")
    return fitted.x, float(fitted.fun)


def relabelling(given: np.ndarray, probabilities: np.ndarray) -> Relabelling:
    """The mixture fitted to a table's given labels and out-of-sample probabilities [rows, labels]."""
    from scipy.optimize import minimize_scalar

    confusion = confusion_between(given, probabilities)
    rows = len(given)
    sample = np.sort(np.random.default_rng(0).choice(rows, FITTED_ROWS, replace=False)) if rows > FITTED_ROWS \
        else np.arange(rows)
    sampled_given, sampled = given[sample], probabilities[sample]  # taken once, read at every temperature tried
    log_temperature = minimize_scalar(
        lambda t: rates(readings(sampled_given, sampled, confusion, float(np.exp(t))))[1],
        bounds=LOG_TEMPERATURE, method="bounded", options={"xatol": 0.01}).x if rows else 0.0
    temperature = float(np.exp(log_temperature))
    read = readings(given, probabilities, confusion, temperature)
    shares, _ = rates(read) if rows else (np.zeros(2), 0.0)
    _, random_likelihood, confused_likelihood, points_back = read
    likelihood = mixed(read, shares)
    return Relabelling(float(shares[0]), float(shares[1]), temperature,
                       (shares[0] * random_likelihood + shares[1] * confused_likelihood * points_back) / likelihood)
