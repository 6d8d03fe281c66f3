"""The names corpus on disk: which files are labels, reading them, and the leakage-free split. No training
framework is imported here, so evaluation and serving-side analysis can rebuild a checkpoint's split quickly."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from nameorigin.base.digest import sha256_of
from nameorigin.base.errors import UserError
from nameorigin.base.textnorm import normalize_name, variant_key

NOT_LABELS = ("README", "LICENSE", "SHA256")  # documentation beside a corpus, even when saved as .txt


def is_label_file(path: Path) -> bool:
    """A label file is `<Language>.txt`; hidden files, READMEs, licenses and checksum lists are not labels."""
    return path.suffix == ".txt" and not path.name.startswith(".") and not path.stem.upper().startswith(NOT_LABELS)


def shipped_corpus() -> Path:
    """The PyTorch tutorial corpus installed with the package (nameorigin/data/tutorial_names, BSD-3-Clause)."""
    return Path(str(resources.files("nameorigin.data") / "tutorial_names"))


def label_files(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*.txt") if p.is_file() and is_label_file(p))


def read_label_file(path: Path, normalize: str = "ascii") -> list[str]:
    """Names of one file, in file order, normalized; raises UserError naming the file and line on bad bytes."""
    names = []
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise UserError(f"{path}:{number} is not UTF-8: re-save the file as UTF-8") from None
        name = normalize_name(line, normalize)
        if name:
            names.append(name)
    if not names:
        raise UserError(f"{path} holds no names: delete it or add one name per line")
    return names


def read_corpus(root: str | Path, normalize: str = "ascii") -> tuple[list[tuple[str, str]], str]:
    """All (name, language) pairs with duplicates dropped, sorted, and the sha256 of the raw files."""
    root = Path(root)
    if not root.is_dir():
        state = "is a file" if root.exists() else "does not exist"
        raise UserError(f"data.root={root} {state}: pass data.root=<folder of <Language>.txt files>")
    files = label_files(root)
    if not files:
        raise UserError(f"data.root={root} holds no <Language>.txt files: put the corpus there or fix data.root")
    pairs = {(name, path.stem) for path in files for name in read_label_file(path, normalize)}
    return sorted(pairs), sha256_of(path.name.encode() + b"\0" + path.read_bytes() + b"\0" for path in files)


def split_by_name(
    pairs: Sequence[tuple[str, str]], fractions: Sequence[float], seed: int, group_variants: bool = True
) -> dict[str, list[tuple[str, str]]]:
    """Split so every name string lives in exactly one split, stratified by language.

    A name with several languages is grouped under its rarest language, so rare classes keep their share. With
    group_variants, spellings of one name that differ only in case, spaces or punctuation (O'Neill and Oneill,
    Avak'Yan and Avakyan) then join the first split, in train, val, test order, that holds one of them, so no
    held-out name has a variant in training.
    """
    languages_of: dict[str, list[str]] = defaultdict(list)
    for name, language in pairs:
        languages_of[name].append(language)
    language_size = Counter(language for _, language in pairs)
    strata: dict[str, list[str]] = defaultdict(list)
    for name, languages in languages_of.items():
        strata[min(languages, key=lambda lang: (language_size[lang], lang))].append(name)
    rng = random.Random(seed)
    names_in: dict[str, list[str]] = {"train": [], "val": [], "test": []}
    for stratum in sorted(strata):
        names = sorted(strata[stratum])
        rng.shuffle(names)
        n_val, n_test = (round(len(names) * f) for f in fractions[1:])
        if len(names) >= 3:  # keep at least one name of each language in val and test when possible
            n_val, n_test = max(n_val, 1), max(n_test, 1)
        names_in["val"] += names[:n_val]
        names_in["test"] += names[n_val : n_val + n_test]
        names_in["train"] += names[n_val + n_test :]
    if group_variants:
        first: dict[str, str] = {}
        for split, names in names_in.items():
            for name in names:
                first.setdefault(variant_key(name), split)
        everything = [name for names in names_in.values() for name in names]
        names_in = {split: [name for name in everything if first[variant_key(name)] == split] for split in names_in}
    return {
        split: sorted((name, lang) for name in names for lang in languages_of[name])
        for split, names in names_in.items()
    }
