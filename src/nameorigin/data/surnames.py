"""The converted names-dataset names (nameorigin.data.names_dataset) as arrays, and a DataModule for pretraining a
country model against each name's country shares: the surnames alone (the recipe's default), or first and last
names in every alphabet (experiment=surnames_pretrain).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nameorigin.base.digest import file_sha256
from nameorigin.base.errors import UserError
from nameorigin.base.textnorm import encode_names
from nameorigin.config import SurnamesDataConfig
from nameorigin.data.batching import Batch, BucketedDataModule, EncodedRows
from nameorigin.data.corpus import split_by_name
from nameorigin.data.names_dataset import SOURCES, VOCAB, Recipe, convert, fold, package_pickle

__all__ = ["VOCAB", "Surnames", "SurnamesDataModule", "convert", "fold", "package_pickle"]


class Surnames:
    """The cached corpus: names, their top countries and shares, as arrays."""

    def __init__(self, cache: str | Path, convert_if_missing: bool = True, setting: str = "data.cache",
                 recipe: Recipe | None = None, package: str | None = None):
        """`recipe`: what the cache must hold (converted anew when it holds another, from the pickles in
        `package`, else the installed names-dataset's); None: what it holds, the names of both lists where it has
        them, else the surnames."""
        cache = Path(cache)
        stem = recipe.stem if recipe else "names" if (cache / "names.json").is_file() else "last_names"
        meta_path, npz = cache / f"{stem}.json", cache / f"{stem}.npz"
        if not meta_path.is_file() and not convert_if_missing:
            raise UserError(f"{setting}: {meta_path} does not exist: run python train.py "
                            "experiment=surnames_pretrain once (make pretrain), which converts the names-dataset "
                            "names")
        if recipe is not None or not meta_path.is_file():  # without a recipe, whatever the cache holds is read
            ensure_converted(cache, recipe or Recipe(), package)
        self.record = json.loads(meta_path.read_text())
        if not npz.is_file() or file_sha256(npz) != self.record["sha256"]:
            raise UserError(f"{setting}: {npz} is missing or does not match its sha256 in {meta_path.name}: "
                            "delete both files and run again to convert anew")
        with np.load(npz, allow_pickle=False) as arrays:
            self.names = arrays["blob"].tobytes().decode("utf-8").split("\n")
            self.top_index = torch.from_numpy(arrays["top_index"].astype(np.int64))
            self.top_share = torch.from_numpy(arrays["top_share"])
        self.vocab: list[str] = self.record.get("vocab", VOCAB)
        self.countries: list[str] = self.record["countries"]
        self.sha256 = self.record["sha256"]

    def shares(self, rows: torch.Tensor) -> torch.Tensor:
        """Dense [len(rows), countries] share matrix (column `countries` absorbs the empty slots)."""
        dense = torch.zeros(len(rows), len(self.countries) + 1)
        index = self.top_index[rows].clamp(max=len(self.countries))
        return dense.scatter_add_(1, index, self.top_share[rows])[:, :-1]


def ensure_converted(cache: Path, recipe: Recipe, package: str | None = None) -> None:
    """Convert the cache when it is missing or holds another recipe (from the pickles in `package`, else the
    installed names-dataset's), without loading it."""
    meta_path = cache / f"{recipe.stem}.json"
    if meta_path.is_file() and json.loads(meta_path.read_text()).get("recipe", Recipe().record()) == recipe.record():
        return
    convert(cache, recipe=recipe, files={source: Path(package, SOURCES[source]) for source in recipe.sources}
            if package else None)


class EncodedSurnames(EncodedRows):
    """Rows of the cache, encoded once (uint8 tokens while the vocabulary fits, else int16)."""

    def __init__(self, corpus: Surnames, rows: list[int], char_to_index: dict[str, int]):
        self.corpus, self.cache_rows = corpus, torch.tensor(rows, dtype=torch.long)
        self.names = names = [corpus.names[r] for r in rows]
        self.tokens, self.lengths = encode_names(names, char_to_index)

    def collate(self, indices: list[int]) -> Batch:
        """The targets are each name's most common country; the shares, its country shares."""
        idx, tokens, lengths = self.rows(indices)
        shares = self.corpus.shares(self.cache_rows[idx])
        return Batch(tokens, lengths, shares.argmax(1), shares)


class SurnamesDataModule(BucketedDataModule):
    """Surnames -> country shares, split by name string and stratified by each name's most common country."""

    def __init__(self, held_out_elsewhere: dict[str, list[str]] | None = None, **settings: Any):
        """held_out_elsewhere: per run of data.leave_out_of whose table was found, the variant keys of its
        validation and test names (train.py resolves them, nameorigin.training.held_out)."""
        super().__init__()
        self.config = config = SurnamesDataConfig(**settings)
        if config.leave_out_of and held_out_elsewhere is None:
            raise UserError(f"data.leave_out_of={config.leave_out_of}: those runs' held-out names are found by "
                            "python train.py; build this data module through it")
        held_out_elsewhere = held_out_elsewhere or {}
        self.recipe = Recipe.leaving_out({key for keys in held_out_elsewhere.values() for key in keys},
                                         sorted(held_out_elsewhere), sources=tuple(config.sources),
                                         normalize=str(config.normalize), min_char_names=config.min_char_names)
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
        ensure_converted(self.cache, self.recipe, self.config.package)

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        self.corpus = Surnames(self.cache, recipe=self.recipe, package=self.config.package)
        self.vocab = list(self.corpus.vocab)
        self.corpus_sha256 = self.corpus.sha256
        self.labels = self.corpus.countries
        self.label_names = self.corpus.record["country_names"]
        rows = range(len(self.corpus.names))
        if self.limit:  # a deterministic sample, for tests and quick looks
            rows = sorted(np.random.default_rng(self.split_seed).permutation(len(rows))[: self.limit].tolist())
        top = self.corpus.top_index[:, 0].tolist()
        pairs = [(self.corpus.names[r], self.labels[top[r]]) for r in rows]
        by_name = {name: r for r, (name, _) in zip(rows, pairs, strict=True)}
        # The ASCII surnames split by exact string, as their recorded figures were measured (3.4 % of them are
        # spelling variants of another, 'A Ali' and 'Aali'); kept alphabets split by variant (José with Jose).
        named = split_by_name(pairs, self.split_fractions, self.split_seed,
                              group_variants=self.recipe.normalize != "ascii")
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
                "recipe": self.corpus.record.get("recipe", Recipe().record()),
                "split_fractions": self.split_fractions, "split_seed": self.split_seed, "limit": self.limit,
                "sizes": {s: len(r) for s, r in self.splits.items()},
                "held_out": {s: [self.corpus.names[r] for r in self.splits[s]] for s in ("val", "test")}}

    def state_dict(self) -> dict:
        return {"corpus_sha256": self.corpus_sha256, "split_seed": self.split_seed,
                "split_fractions": self.split_fractions, "limit": self.limit, "normalize": self.recipe.normalize}

    def corpus_setting(self) -> str:
        return f"data.cache={self.cache}"
