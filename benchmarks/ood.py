"""Out-of-distribution surnames, made at run time from names-dataset and never committed: last names whose top
country (share >= min_share) speaks none of the model's labels, with every name of the training corpus (or a
spelling variant of one) left out. The countries are in benchmarks/ood_countries.yaml: `tune` picked the abstention
score, `report` is what the figures are measured on.

  python -m benchmarks.ood <run>/checkpoints/refit.ckpt     # abstention on test and on each group
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nameorigin.analysis.evaluate import checkpoint_splits
from nameorigin.base.errors import UserError, exits_2_on_user_error
from nameorigin.base.textnorm import variant_key
from nameorigin.data.corpus import read_corpus, shipped_corpus
from nameorigin.serving.predict import Predictor

COUNTRIES = Path(__file__).with_name("ood_countries.yaml")


def country_groups(path: Path = COUNTRIES) -> dict:
    import yaml  # Hydra's own dependency

    if not path.is_file():
        raise UserError(f"{path} does not exist: run from a checkout of nameorigin, or pass --countries")
    return yaml.safe_load(path.read_text())


def ood_names(cache: str | Path, countries: list[str], corpus: Path, min_share: float = 0.9) -> dict[str, list[str]]:
    """Per country: the cached surnames whose top country it is, at min_share or more, not in `corpus`."""
    from nameorigin.data.surnames import Surnames

    surnames = Surnames(cache)
    known = {variant_key(name) for name, _ in read_corpus(corpus)[0]}
    top, share = surnames.top_index[:, 0], surnames.top_share[:, 0]
    names = {}
    for code in countries:
        if code not in surnames.countries:
            raise UserError(f"country {code} is not in names-dataset's surnames: fix {COUNTRIES.name}")
        rows = ((top == surnames.countries.index(code)) & (share >= min_share)).nonzero().flatten().tolist()
        names[code] = [surnames.names[r] for r in rows if variant_key(surnames.names[r]) not in known]
    return names


def abstention_rates(predictor: Predictor, names: list[str]) -> dict:
    answers = predictor.predict(names, top_k=1)
    reasons: dict[str, int] = {}
    for answer in answers:
        if answer.abstained:
            reasons[answer.reason_code] = reasons.get(answer.reason_code, 0) + 1
    return {"names": len(names), "abstained": sum(reasons.values()) / max(len(names), 1), "reasons": reasons}


def report(checkpoint: str, cache: str, groups: dict, corpus: Path) -> dict:
    predictor = Predictor.load(checkpoint)
    test = sorted({name for name, _ in checkpoint_splits(predictor, corpus)["test"]})
    result = {"test": abstention_rates(predictor, test)}
    for group in ("tune", "report"):
        per_country = ood_names(cache, groups[group], corpus, groups.get("min_share", 0.9))
        result[group] = {code: abstention_rates(predictor, names) for code, names in per_country.items()}
        pooled = [name for names in per_country.values() for name in names]
        result[f"{group}_pooled"] = abstention_rates(predictor, pooled)
    return result


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a .ckpt trained on the tutorial corpus")
    parser.add_argument("--cache", default="data/surnames", help="the surnames cache (converted on first use)")
    parser.add_argument("--countries", default=str(COUNTRIES), help="the YAML of country groups")
    parser.add_argument("--corpus", default=None, help="the corpus it trained on (default: the shipped one)")
    args = parser.parse_args(argv)
    corpus = Path(args.corpus) if args.corpus else shipped_corpus()
    print(json.dumps(report(args.checkpoint, args.cache, country_groups(Path(args.countries)), corpus), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
