"""The `names-dataset` surnames (983,826 last names with their share of people per country, 105 countries) as
a plain cached file and a DataModule for pretraining a country model against those shares.

Conversion reads only the installed package's own pickle, once, and writes `<cache>/last_names.npz` (numpy
arrays, loaded with allow_pickle=False) and `last_names.json` (counts, decisions, the npz's sha256), each
atomically: an interrupted conversion leaves nothing a later run would read.

Normalization follows the tutorial corpus' rules (NFD, combining marks dropped). Decisions, with their counts
in the JSON and the split manifest: names in other scripts (not ASCII after folding) are dropped, as are names
with characters other than letters, space, apostrophe, hyphen and period; names with spaces are kept (the
vocabulary has a space); names that fold to the same string are merged by averaging their country shares.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
import string
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nameorigin.base.atomic import write_atomically
from nameorigin.base.digest import file_sha256
from nameorigin.base.errors import UserError
from nameorigin.base.extras import missing_extra
from nameorigin.base.textnorm import MAX_NAME_LENGTH, PAD, UNK
from nameorigin.config import SurnamesDataConfig
from nameorigin.data.batching import Batch, BucketedDataModule, EncodedRows
from nameorigin.data.corpus import split_by_name

TOP = 10  # names-dataset keeps at most 10 countries per name
NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z '.\-]*\Z")
# Every printable ASCII character gets an embedding, so a fine-tuned corpus' apostrophes or digits are not <unk>.
VOCAB = [PAD, UNK, *sorted(set(string.printable) - set(string.whitespace) | {" "})]


def package_pickle(file: str = "last_names.pkl.gz") -> Path:
    """A pickle inside the installed names-dataset package (its last or first names): the only pickles this
    project opens."""
    spec = importlib.util.find_spec("names_dataset")
    if spec is None or not spec.submodule_search_locations:
        raise missing_extra("the surnames corpus", "surnames", "names_dataset")
    path = Path(next(iter(spec.submodule_search_locations))) / "v3" / file
    if not path.is_file():
        raise UserError(f"names-dataset is installed but {path} is missing: reinstall names-dataset==3.3.1")
    return path


def fold(name: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", name.strip()) if not unicodedata.combining(c))


def country_name(code: str) -> str:
    try:
        import pycountry  # a dependency of names-dataset
    except ImportError:
        return code
    country = pycountry.countries.get(alpha_2=code)
    return country.name if country is not None else code


def convert(cache: Path, source: Path | None = None) -> dict:
    """Read the package's pickle and write the npz + json cache. Returns the json's content."""
    import pickle

    source = source or package_pickle()
    with gzip.open(source, "rb") as f:
        raw = pickle.load(f)  # noqa: S301  (the installed package's own file, never a user's path)
    counts = Counter(raw_names=len(raw))
    merged: dict[str, dict[str, float]] = {}
    seen: Counter = Counter()
    for name, info in raw.items():
        folded = fold(name)
        if not folded.isascii():
            counts["dropped_other_script"] += 1
        elif not NAME_PATTERN.match(folded) or len(folded) > MAX_NAME_LENGTH:
            counts["dropped_other_characters"] += 1
        elif not info.get("country"):
            counts["dropped_no_country"] += 1
        else:
            shares = merged.setdefault(folded, {})
            for code, share in info["country"].items():
                shares[code] = shares.get(code, 0.0) + float(share)
            seen[folded] += 1
    del raw
    countries = sorted({code for shares in merged.values() for code in shares})
    column = {code: i for i, code in enumerate(countries)}
    names = sorted(merged)
    top_index = np.full((len(names), TOP), 255, dtype=np.uint8)
    top_share = np.zeros((len(names), TOP), dtype=np.float32)
    for row, name in enumerate(names):
        best = sorted(merged[name].items(), key=lambda item: -item[1])[:TOP]
        total = sum(share for _, share in best) or 1.0
        for j, (code, share) in enumerate(best):
            top_index[row, j], top_share[row, j] = column[code], share / total
    blob = "\n".join(names).encode("ascii")
    counts.update(kept=len(names), merged_spellings=sum(n - 1 for n in seen.values()),
                  with_space=sum(" " in n for n in names))
    npz = cache / "last_names.npz"

    def write_npz(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, blob=np.frombuffer(blob, dtype=np.uint8), top_index=top_index, top_share=top_share,
                     countries=np.array(countries))

    write_atomically(npz, write_npz)
    record = {"source": "names-dataset 3.3.1 (Apache-2.0), v3/last_names.pkl.gz", "sha256": file_sha256(npz),
            "counts": dict(counts), "countries": countries,
            "country_names": [country_name(code) for code in countries],
            "decisions": __doc__.split("Decisions, ")[1].strip()}
    write_atomically(cache / "last_names.json", lambda p: p.write_text(json.dumps(record, indent=1)))
    return record


class Surnames:
    """The cached corpus: names, their top countries and shares, as arrays."""

    def __init__(self, cache: str | Path, convert_if_missing: bool = True, setting: str = "data.cache"):
        cache = Path(cache)
        meta_path, npz = cache / "last_names.json", cache / "last_names.npz"
        if not meta_path.is_file():
            if not convert_if_missing:
                raise UserError(f"{setting}: {meta_path} does not exist: run python train.py "
                                "experiment=surnames_pretrain once, which converts the names-dataset corpus")
            convert(cache)
        self.record = json.loads(meta_path.read_text())
        if not npz.is_file() or file_sha256(npz) != self.record["sha256"]:
            raise UserError(f"{setting}: {npz} is missing or does not match its sha256 in {meta_path.name}: "
                            "delete both files and run again to convert anew")
        with np.load(npz, allow_pickle=False) as arrays:
            self.names = arrays["blob"].tobytes().decode("ascii").split("\n")
            self.top_index = torch.from_numpy(arrays["top_index"].astype(np.int64))
            self.top_share = torch.from_numpy(arrays["top_share"])
        self.countries: list[str] = self.record["countries"]
        self.sha256 = self.record["sha256"]

    def shares(self, rows: torch.Tensor) -> torch.Tensor:
        """Dense [len(rows), countries] share matrix (column `countries` absorbs the empty slots)."""
        dense = torch.zeros(len(rows), len(self.countries) + 1)
        index = self.top_index[rows].clamp(max=len(self.countries))
        return dense.scatter_add_(1, index, self.top_share[rows])[:, :-1]


class EncodedSurnames(EncodedRows):
    """Rows of the cache, encoded once as uint8 tokens (the vocabulary is printable ASCII)."""

    def __init__(self, corpus: Surnames, rows: list[int], char_to_index: dict[str, int]):
        self.corpus, self.cache_rows = corpus, torch.tensor(rows, dtype=torch.long)
        self.names = names = [corpus.names[r] for r in rows]
        self.lengths = torch.tensor([len(n) for n in names], dtype=torch.long)
        width = int(self.lengths.max()) if names else 1
        table = np.zeros(256, dtype=np.uint8)
        for char, index in char_to_index.items():
            if len(char) == 1:
                table[ord(char)] = index
        padded = np.frombuffer("".join(n.ljust(width, "\0") for n in names).encode("ascii"), dtype=np.uint8)
        self.tokens = torch.from_numpy(table[padded].reshape(len(names), width))  # "\0" maps to <pad> = 0

    def collate(self, indices: list[int]) -> Batch:
        """The targets are each name's most common country; the shares, its country shares."""
        idx, tokens, lengths = self.rows(indices)
        shares = self.corpus.shares(self.cache_rows[idx])
        return Batch(tokens, lengths, shares.argmax(1), shares)


class SurnamesDataModule(BucketedDataModule):
    """Surnames -> country shares, split by name string and stratified by each name's most common country."""

    def __init__(self, **settings: Any):
        super().__init__()
        self.config = config = SurnamesDataConfig(**settings)
        if Path(config.cache).exists() and not Path(config.cache).is_dir():  # now, not after minutes of conversion
            raise UserError(f"data.cache={config.cache} is a file: pass a folder for the converted names (default "
                            "data/surnames)")
        if config.exclude:
            raise UserError("data.exclude leaves rows of a labelled table out of training: use it with data=names "
                            "or data=table (surnames carry country shares, not one label a row)")
        self.cache, self.split_seed, self.order_seed = Path(config.cache), config.split_seed, config.order_seed
        self.split_fractions = config.split_fractions
        self.batch_size, self.limit, self.num_workers = config.batch_size, config.limit, config.num_workers
        self.vocab, self.splits = list(VOCAB), {}
        self.label_name = config.label_name
        self.soft_labels = True  # the targets are each name's country shares

    def prepare_data(self) -> None:
        """Convert the package's files once (rank 0 only under DDP; the others then read the cache)."""
        if not (self.cache / "last_names.json").is_file():
            convert(self.cache)

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        self.corpus = Surnames(self.cache)
        self.corpus_sha256 = self.corpus.sha256
        self.labels = self.corpus.countries
        self.label_names = self.corpus.record["country_names"]
        rows = range(len(self.corpus.names))
        if self.limit:  # a deterministic sample, for tests and quick looks
            rows = sorted(np.random.default_rng(self.split_seed).permutation(len(rows))[: self.limit].tolist())
        top = self.corpus.top_index[:, 0].tolist()
        pairs = [(self.corpus.names[r], self.labels[top[r]]) for r in rows]
        by_name = {name: r for r, (name, _) in zip(rows, pairs, strict=True)}
        # Exact strings here: the pretraining figures were measured on this split (docs/pretraining.md: 3.4 % of
        # surnames are spelling variants of another, e.g. 'A Ali' and 'Aali', each with its own country shares).
        named = split_by_name(pairs, self.split_fractions, self.split_seed, group_variants=False)
        self.splits = {s: [by_name[name] for name, _ in p] for s, p in named.items()}
        char_to_index = {c: i for i, c in enumerate(self.vocab)}
        self.datasets = {s: EncodedSurnames(self.corpus, r, char_to_index) for s, r in self.splits.items()}

    def class_prior(self) -> list[float]:
        counts = torch.bincount(self.corpus.top_index[self.splits["train"], 0], minlength=len(self.labels))
        return (counts.clamp_min(1) / counts.clamp_min(1).sum()).tolist()

    def manifest(self) -> dict:
        """Settings, counts and the held-out names (train is every other kept name of the cache)."""
        return {"cache": str(self.cache), "corpus_sha256": self.corpus_sha256,
                "conversion": self.corpus.record["counts"], "decisions": self.corpus.record["decisions"],
                "split_fractions": self.split_fractions, "split_seed": self.split_seed, "limit": self.limit,
                "sizes": {s: len(r) for s, r in self.splits.items()},
                "held_out": {s: [self.corpus.names[r] for r in self.splits[s]] for s in ("val", "test")}}

    def state_dict(self) -> dict:
        return {"corpus_sha256": self.corpus_sha256, "split_seed": self.split_seed,
                "split_fractions": self.split_fractions, "limit": self.limit, "normalize": "ascii"}

    def corpus_setting(self) -> str:
        return f"data.cache={self.cache}"
