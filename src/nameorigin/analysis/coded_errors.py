"""The error metrics of gender-inference studies (Santamaría & Mihaljević 2018, "Comparison and benchmark of
name-to-gender inference services"), so a gender model reads as its field reports it. Truth is f or m; an answer
is f, m or None (no answer: unknown, androgynous, or an abstention):

- errorCoded = (fm + mf + mu + fu) / all: a wrong answer and no answer both count as errors;
- errorCodedWithoutNA = (fm + mf) / (names answered): errors among the answers;
- naCoded = (mu + fu) / all: the share left unanswered;
- errorGenderBias = (mf - fm) / (names answered): positive when men are taken for women more often than the
  reverse.

`fm` counts women answered m, `mu` men unanswered, and so on.
"""

from __future__ import annotations

from collections.abc import Sequence


def coded_errors(truth: Sequence[str], answers: Sequence[str | None], female: str = "F",
                 male: str = "M") -> dict[str, float]:
    if len(truth) != len(answers):
        raise ValueError("one answer per name")
    cell = {(t, a): 0 for t in (female, male) for a in (female, male, None)}
    for t, a in zip(truth, answers, strict=True):
        cell[(t, a if a in (female, male) else None)] += 1
    fm, mf = cell[(female, male)], cell[(male, female)]
    unanswered = cell[(female, None)] + cell[(male, None)]
    answered = sum(cell.values()) - unanswered
    total = max(sum(cell.values()), 1)
    return {"names": sum(cell.values()), "errorCoded": (fm + mf + unanswered) / total,
            "errorCodedWithoutNA": (fm + mf) / max(answered, 1), "naCoded": unanswered / total,
            "errorGenderBias": (mf - fm) / max(answered, 1)}
