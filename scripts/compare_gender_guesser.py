"""A gender checkpoint beside gender-guesser, the curated first-name lookup, on the checkpoint's own test split.

  pip install gender-guesser==0.4.0       # GPL-3.0: nameorigin never depends on it; only this script imports it
  python scripts/compare_gender_guesser.py outputs/<run>/checkpoints/best.ckpt --table data/first_names/gender.csv

gender-guesser answers male, female, mostly_male, mostly_female, andy (androgynous) or unknown. Its coverage is
the share of test names it answers with one of the first four; on those names both accuracies are reported,
against each name's majority gender in the table. Both are also reported as gender-inference studies report
them (errorCoded, errorCodedWithoutNA, naCoded, errorGenderBias; nameorigin.analysis.coded_errors), with the
model's abstentions as "no answer": at its default abstention rule, and along a curve of thresholds on its top
probability.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from nameorigin.analysis.coded_errors import coded_errors
from nameorigin.analysis.evaluate import checkpoint_splits
from nameorigin.base.errors import UserError, exits_2_on_user_error
from nameorigin.serving.predict import Predictor

ANSWERS = {"male": "M", "mostly_male": "M", "female": "F", "mostly_female": "F"}
THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)  # the model answers when its top probability reaches t


def compare(predictor: Predictor, table: str) -> dict:
    if sorted(predictor.labels) != ["F", "M"]:
        raise UserError(f"the checkpoint's labels are {', '.join(predictor.labels)}: pass a first name -> gender "
                        "checkpoint (experiment=first_name_gender)")
    try:
        from gender_guesser.detector import Detector
    except ImportError:
        raise UserError("this comparison needs gender-guesser: pip install gender-guesser==0.4.0 (GPL-3.0, not a "
                        "dependency of nameorigin)") from None
    test = checkpoint_splits(predictor, table)["test"]
    probs = predictor.probabilities([predictor.encode(name)[0] or [1] for name, _ in test])
    model = [predictor.labels[i] for i in probs.argmax(-1).tolist()]
    detector = Detector(case_sensitive=False)
    raw = [detector.get_gender(name) for name, _ in test]
    truth = [gender for _, gender in test]

    def accuracy(answers: list, rows: list[int]) -> float:
        return sum(answers[i] == truth[i] for i in rows) / max(len(rows), 1)

    result = {"test_names": len(test), "model_accuracy_all": accuracy(model, list(range(len(test))))}
    for subset, kinds in (("answered", set(ANSWERS)), ("sure", {"male", "female"})):
        rows = [i for i, answer in enumerate(raw) if answer in kinds]
        guesses = [ANSWERS.get(answer) for answer in raw]
        result[subset] = {"names": len(rows), "coverage": len(rows) / max(len(test), 1),
                          "gender_guesser_accuracy": accuracy(guesses, rows), "model_accuracy": accuracy(model, rows)}
    result["answers"] = {kind: raw.count(kind) for kind in sorted(set(raw))}
    result["coded"] = {"gender_guesser": coded_errors(truth, [ANSWERS.get(answer) for answer in raw]),
                       "gender_guesser_sure": coded_errors(truth, [{"male": "M", "female": "F"}.get(answer)
                                                                   for answer in raw]),
                       "model_always": coded_errors(truth, model)}
    answers = predictor.predict([name for name, _ in test], top_k=1)
    result["coded"]["model_default_abstention"] = coded_errors(
        truth, [None if a.abstained or not a.predictions else a.predictions[0][0] for a in answers])
    top = probs.max(-1).values
    result["coded_curve"] = {f"{t:.2f}": coded_errors(truth, [m if p >= t else None for m, p in
                                                                zip(model, top.tolist(), strict=True)])
                             for t in THRESHOLDS}
    confident = torch.tensor([max(p) for p in probs.tolist()])
    result["model_mean_confidence_on_unanswered"] = float(confident[[a not in ANSWERS for a in raw]].mean()) \
        if any(a not in ANSWERS for a in raw) else None
    return result


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a .ckpt of experiment=first_name_gender")
    parser.add_argument("--table", default="data/first_names/gender.csv",
                        help="the table it was trained on (its sha256 is checked; default data/first_names/gender.csv)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result = compare(Predictor.load(args.checkpoint), args.table)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"test split: {result['test_names']:,} names; model accuracy on all of them "
          f"{result['model_accuracy_all']:.4f}")
    for subset, words in (("answered", "male, female, mostly_*"), ("sure", "male or female only")):
        part = result[subset]
        print(f"gender-guesser answers {part['names']:,} ({100 * part['coverage']:.1f} %, {words}): "
              f"gender-guesser {part['gender_guesser_accuracy']:.4f}, model {part['model_accuracy']:.4f}")
    print("gender-guesser's answers:", ", ".join(f"{k} {v:,}" for k, v in result["answers"].items()))
    print(f"\n{'answers':<38} {'errorCoded':>10} {'withoutNA':>10} {'naCoded':>8} {'genderBias':>10}")
    rows = [("gender-guesser (mostly_* answered)", result["coded"]["gender_guesser"]),
            ("gender-guesser (male/female only)", result["coded"]["gender_guesser_sure"]),
            ("model, always answering", result["coded"]["model_always"]),
            ("model, default abstention", result["coded"]["model_default_abstention"]),
            *((f"model, top probability >= {t}", m) for t, m in result["coded_curve"].items())]
    for label, m in rows:
        print(f"{label:<38} {m['errorCoded']:>10.4f} {m['errorCodedWithoutNA']:>10.4f} {m['naCoded']:>8.4f} "
              f"{m['errorGenderBias']:>10.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
