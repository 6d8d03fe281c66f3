"""names-dataset's first names as a table of gender shares, for the second task (first name -> gender):

    nameorigin first-names-table                             # writes data/first_names/gender.csv and .json
    python train.py experiment=first_name_gender

The conversion reads only the installed package's own pickle (v3/first_names.pkl.gz, 727,556 names), as the
surnames conversion does, and writes a CSV with the columns name, F, M (each name's share of women and men) and a
JSON beside it with the counts and decisions; both atomically.

Decisions, with their counts in the JSON: the surnames' folding (NFD, combining marks dropped); names in other
scripts (not ASCII after folding) are dropped, as are names with characters other than letters, space,
apostrophe, hyphen and period, and names without gender shares; names that fold to the same string are merged
by averaging their gender shares.
"""

from __future__ import annotations

import csv
import gzip
import json
import random
from collections import Counter
from pathlib import Path

from nameorigin.base.atomic import write_atomically
from nameorigin.base.digest import file_sha256
from nameorigin.data.names_dataset import fold, package_pickle, well_formed

GENDERS = ("F", "M")


def convert_first_names(out: Path, source: Path | None = None, sample: int | None = None) -> dict:
    """Write `out` (name,F,M) and `out` with suffix .json; returns the JSON's content. sample: only that many
    names, drawn at random (seed 0) from the whole table: a smaller table of the same kind."""
    import pickle

    source = source or package_pickle("first_names.pkl.gz")
    with gzip.open(source, "rb") as f:
        raw = pickle.load(f)  # noqa: S301  (the installed package's own file, never a user's path)
    counts = Counter(raw_names=len(raw))
    merged: dict[str, list[float]] = {}
    seen: Counter = Counter()
    for name, info in raw.items():
        folded, gender = fold(name), info.get("gender") or {}
        if not folded.isascii():
            counts["dropped_other_script"] += 1
        elif not well_formed(folded):
            counts["dropped_other_characters"] += 1
        elif not any(gender.get(g) for g in GENDERS):
            counts["dropped_no_gender"] += 1
        else:
            total = sum(float(gender.get(g, 0.0)) for g in GENDERS)
            shares = [float(gender.get(g, 0.0)) / total for g in GENDERS]
            before = merged.get(folded)
            merged[folded] = shares if before is None else [a + b for a, b in zip(before, shares, strict=True)]
            seen[folded] += 1
    del raw
    names = sorted(merged)
    if sample is not None and sample < len(names):
        counts["left_out_by_sample"] = len(names) - sample
        names = sorted(random.Random(0).sample(names, sample))
    counts.update(kept=len(names), merged_spellings=sum(n - 1 for n in seen.values()),
                  majority_F=sum(merged[n][0] > merged[n][1] for n in names),
                  majority_M=sum(merged[n][1] >= merged[n][0] for n in names),
                  one_gender_only=sum(min(merged[n]) == 0 for n in names))

    def write_csv(tmp: Path) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["name", *GENDERS])
            for name in names:
                writer.writerow([name, *(f"{share / seen[name]:.4g}" for share in merged[name])])

    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(out, write_csv)
    record = {"source": "names-dataset 3.3.1 (Apache-2.0), v3/first_names.pkl.gz", "table": out.name,
            "sha256": file_sha256(out), "columns": ["name", *GENDERS], "counts": dict(counts),
            "decisions": __doc__.split("Decisions, ")[1].strip()}
    write_atomically(out.with_suffix(".json"), lambda p: p.write_text(json.dumps(record, indent=1)))
    return record
