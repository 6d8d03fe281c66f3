"""names-dataset's name lists (983,826 last names and 727,556 first names, each with its share of people per
country) converted into one plain cache that pretraining reads and the known-name lookup is built from.

Conversion reads only the installed package's own pickles, once per recipe, and writes `<cache>/<stem>.npz` (numpy
arrays, loaded with allow_pickle=False) and `<stem>.json` (the recipe, counts, decisions, vocabulary, the npz's
sha256), each atomically: an interrupted conversion leaves nothing a later run would read. A cache converted with
another recipe is converted anew.

Decisions, with their counts in the JSON and the split manifest: names are read as the package holds them with
surrounding space stripped; with normalize=ascii they are folded as the tutorial corpus is (NFD, combining marks
dropped) and names in other scripts (not ASCII after folding) are dropped; with normalize=none they stay in their
own alphabet (NFC), and names holding a character that fewer than min_char_names names hold are dropped; names with
characters other than letters, marks, space, apostrophe, hyphen and period are dropped; names with spaces are kept
(the vocabulary has a space); a name held by both lists, or names that become one string, are merged by summing
their country shares; names whose spelling variant is a validation or test name of a listed run are left out.
"""

from __future__ import annotations

import gzip
import json
import string
import unicodedata
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from nameorigin.base.atomic import write_atomically
from nameorigin.base.digest import file_sha256, sha256_of
from nameorigin.base.textnorm import MAX_NAME_LENGTH, PAD, UNK, normalize_name, variant_key
from nameorigin.config import NAME_LISTS

TOP = 10  # names-dataset keeps at most 10 countries per name
SOURCES = {name: f"{name}.pkl.gz" for name in NAME_LISTS}
PUNCTUATION = frozenset(" '.-")
# Every printable ASCII character gets an embedding, so a fine-tuned corpus' apostrophes or digits are not <unk>.
VOCAB = [PAD, UNK, *sorted(set(string.printable) - set(string.whitespace) | {" "})]


@dataclass(frozen=True)
class Recipe:
    """What a cache holds: which lists, in which alphabet, without which runs' held-out names."""

    sources: tuple[str, ...] = ("last_names",)
    normalize: str = "ascii"
    min_char_names: int = 50
    left_out_runs: tuple[str, ...] = ()
    left_out_sha256: str = ""  # of the sorted variant keys left out
    left_out: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    @property
    def stem(self) -> str:
        return "last_names" if self.sources == ("last_names",) else "names"

    def record(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items() if k != "left_out"}

    @classmethod
    def leaving_out(cls, keys: Collection[str], runs: Sequence[str], **settings) -> Recipe:
        ordered = sorted(set(keys))
        digest = sha256_of(["\n".join(ordered).encode()]) if ordered else ""
        return cls(left_out_runs=tuple(runs), left_out_sha256=digest, left_out=frozenset(ordered), **settings)


def package_pickle(file: str = "last_names.pkl.gz") -> Path:
    """A pickle inside the installed names-dataset package (its last or first names): the only pickles this
    project opens."""
    import importlib.util

    from nameorigin.base.errors import UserError
    from nameorigin.base.extras import missing_extra

    spec = importlib.util.find_spec("names_dataset")
    if spec is None or not spec.submodule_search_locations:
        raise missing_extra("the surnames corpus", "surnames", "names_dataset")
    path = Path(next(iter(spec.submodule_search_locations))) / "v3" / file
    if not path.is_file():
        raise UserError(f"names-dataset is installed but {path} is missing: reinstall names-dataset==3.3.1")
    return path


def fold(name: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", name.strip()) if not unicodedata.combining(c))


def well_formed(name: str) -> bool:
    """A letter first, then letters, marks (the vowel signs of Indic scripts) and name punctuation only."""
    return (0 < len(name) <= MAX_NAME_LENGTH and name[0].isalpha()
            and all(c in PUNCTUATION or unicodedata.category(c)[0] in "LM" for c in name))


def country_name(code: str) -> str:
    try:
        import pycountry  # a dependency of names-dataset
    except ImportError:
        return code
    country = pycountry.countries.get(alpha_2=code)
    return country.name if country is not None else code


def read_lists(recipe: Recipe, files: dict[str, Path], counts: Counter) -> dict[str, dict[str, float]]:
    """Every kept name with its summed country shares, over the recipe's lists."""
    import pickle

    merged: dict[str, dict[str, float]] = {}
    for source in recipe.sources:
        with gzip.open(files[source], "rb") as f:
            raw = pickle.load(f)  # noqa: S301  (the installed package's own file, never a user's path)
        counts[f"raw_{source}"] += len(raw)
        counts["raw_names"] += len(raw)
        for name, info in raw.items():
            text = fold(name) if recipe.normalize == "ascii" else normalize_name(name, "none")
            if recipe.normalize == "ascii" and not text.isascii():
                counts["dropped_other_script"] += 1
            elif not well_formed(text):
                counts["dropped_other_characters"] += 1
            elif not info.get("country"):
                counts["dropped_no_country"] += 1
            elif recipe.left_out and variant_key(text) in recipe.left_out:
                counts["left_out_held_out"] += 1
            else:
                if text in merged:
                    counts["merged_spellings"] += 1
                shares = merged.setdefault(text, {})
                for code, share in info["country"].items():
                    shares[code] = shares.get(code, 0.0) + float(share)
        del raw
    return merged


def vocabulary(recipe: Recipe, names: list[str], counts: Counter) -> tuple[list[str], list[str]]:
    """The vocabulary (printable ASCII, then every other character at least min_char_names names hold) and the
    names it spells out whole."""
    if recipe.normalize == "ascii":
        return list(VOCAB), names
    held = Counter(c for name in names for c in set(name))
    vocab = [*VOCAB, *sorted(c for c, n in held.items() if n >= recipe.min_char_names and c not in VOCAB)]
    known = set(vocab)
    kept = [name for name in names if known.issuperset(name)]
    counts["dropped_rare_characters"] = len(names) - len(kept)
    return vocab, kept


def convert(cache: Path, source: Path | None = None, recipe: Recipe | None = None,
            files: dict[str, Path] | None = None) -> dict:
    """Read the package's pickles and write the npz + json cache. Returns the json's content. `source`: the last
    names' pickle (tests); `files`: a pickle per source."""
    recipe = recipe or Recipe()
    given = {**(files or {}), **({"last_names": source} if source else {})}
    files = {s: given.get(s) or package_pickle(SOURCES[s]) for s in recipe.sources}
    counts: Counter = Counter()
    merged = read_lists(recipe, files, counts)
    countries = sorted({code for shares in merged.values() for code in shares})
    column = {code: i for i, code in enumerate(countries)}
    vocab, names = vocabulary(recipe, sorted(merged), counts)
    top_index = np.full((len(names), TOP), 255, dtype=np.uint8)
    top_share = np.zeros((len(names), TOP), dtype=np.float32)
    for row, name in enumerate(names):
        best = sorted(merged[name].items(), key=lambda item: -item[1])[:TOP]
        total = sum(share for _, share in best) or 1.0
        for j, (code, share) in enumerate(best):
            top_index[row, j], top_share[row, j] = column[code], share / total
    blob = "\n".join(names).encode("utf-8")
    counts.update(kept=len(names), with_space=sum(" " in n for n in names),
                  not_ascii=sum(not n.isascii() for n in names))
    npz = cache / f"{recipe.stem}.npz"

    def write_npz(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, blob=np.frombuffer(blob, dtype=np.uint8), top_index=top_index, top_share=top_share,
                     countries=np.array(countries))

    write_atomically(npz, write_npz)
    record = {"source": "names-dataset 3.3.1 (Apache-2.0), v3/" + ", v3/".join(SOURCES[s] for s in recipe.sources),
              "recipe": recipe.record(), "sha256": file_sha256(npz), "counts": dict(counts), "vocab": vocab,
              "countries": countries, "country_names": [country_name(code) for code in countries],
              "decisions": __doc__.split("Decisions, ")[1].strip()}
    write_atomically(cache / f"{recipe.stem}.json", lambda p: p.write_text(json.dumps(record, indent=1)))
    return record
