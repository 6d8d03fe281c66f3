"""The names corpus: reading, download, leakage-free split and manifest (batches: batching.py)."""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from nameorigin.base.errors import UserError
from nameorigin.base.parts import boundary_index
from nameorigin.base.textnorm import build_vocab, encode_names, grow_vocab
from nameorigin.config import NamesDataConfig
from nameorigin.data.batching import TRAINED_ON, Batch, BucketedDataModule, EncodedRows
from nameorigin.data.corpus import label_files, read_corpus, shipped_corpus, split_by_name
from nameorigin.data.download import download_corpus

log = logging.getLogger(__name__)


class EncodedNames(EncodedRows):
    """Names encoded once up front so the loader only slices tensors: one row per (name, label) pair.

    `shares` (float [pairs, labels], one pair per name under its majority label) replaces the pairs' own labels as
    the targets' distribution: a share table's columns. `weights` ([pairs]) is each row's weight in the training
    loss (data.weight_column)."""

    def __init__(self, pairs: Sequence[tuple[str, str]], char_to_index: dict[str, int], labels: list[str],
                 shares: torch.Tensor | None = None, weights: torch.Tensor | None = None, boundary: int = -1):
        label_index = {label: i for i, label in enumerate(labels)}
        self.boundary = boundary  # the parts' boundary token, for names of parts (nameorigin.base.parts)
        self.names = [name for name, _ in pairs]
        self.tokens, self.lengths = encode_names(self.names, char_to_index)
        self.targets = torch.tensor([label_index[lang] for _, lang in pairs], dtype=torch.long)
        self.weights = weights
        if shares is not None:
            self.languages = shares
            return
        # Every language of each pair's name (a name's pairs always share a split): for soft targets and for
        # accuracy that counts any of a name's languages as right. Most names have one: only the others loop.
        self.languages = torch.zeros(len(pairs), len(labels), dtype=torch.bool)
        self.languages[torch.arange(len(pairs)), self.targets] = True
        several = {name for name, count in Counter(self.names).items() if count > 1}
        languages_of: dict[str, list[int]] = defaultdict(list)
        for row, name in enumerate(self.names):
            if name in several:
                languages_of[name].append(int(self.targets[row]))
        for row, name in enumerate(self.names):
            if name in several:
                self.languages[row, languages_of[name]] = True

    def collate(self, indices: list[int]) -> Batch:
        """languages[i, k] is True when language k is one of name i's (or label k's share of name i)."""
        idx, tokens, lengths = self.rows(indices)
        return Batch(tokens, lengths, self.targets[idx], self.languages[idx],
                     None if self.weights is None else self.weights[idx])


class NamesDataModule(BucketedDataModule):
    """Reads `<Language>.txt` files under `root`, splits leakage-free, and serves length-bucketed batches."""

    def __init__(self, pretrained_vocab: Sequence[str] | None = None, **settings: Any):
        super().__init__()
        config = NamesDataConfig(**settings)
        self.adopt(config, Path(config.root) if config.root is not None else shipped_corpus(), pretrained_vocab)
        self.url, self.download = config.url, config.download

    def adopt(self, config: Any, root: Path, pretrained_vocab: Sequence[str] | None = None) -> None:
        """The settings every reader of (name, label) pairs shares, from its typed config; `pretrained_vocab`: the
        vocabulary of the model a run fine-tunes, which the training names grow (accents on an ASCII model)."""
        self.config, self.root, self.normalize = config, root, config.normalize.value
        self.split_fractions, self.split_seed = config.split_fractions, config.split_seed
        self.order_seed = config.order_seed
        self.batch_size, self.num_workers, self.label_name = config.batch_size, config.num_workers, config.label_name
        self.exclude, self.excluded = config.exclude, 0
        self.splits: dict[str, list[tuple[str, str]]] = {}
        self.pretrained_vocab = list(pretrained_vocab) if pretrained_vocab else None
        self.trained_on = "train"  # "train+val" once add_validation_to_training() ran (the refit)
        self.soft_labels = False  # hard labels: a share table's columns make them soft

    def prepare_data(self) -> None:
        if self.root.exists() and not self.root.is_dir():
            raise UserError(f"data.root={self.root} is a file: pass the folder of <Language>.txt files")
        if not (self.root.is_dir() and label_files(self.root)):
            if not self.download:
                state = "holds no <Language>.txt files" if self.root.is_dir() else "does not exist"
                raise UserError(f"data.root={self.root} {state}: pass a folder of <Language>.txt files, or add "
                                "data.download=true to fetch the tutorial corpus into it")
            download_corpus(self.root, self.url)

    def read_pairs(self) -> tuple[list[tuple[str, str]], str]:
        """(name, label) pairs, duplicates dropped and sorted, and the sha256 of what they were read from."""
        return read_corpus(self.root, self.normalize)

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        started = time.perf_counter()
        pairs, self.corpus_sha256 = self.read_pairs()
        self.labels = self.label_set(pairs)
        if len(self.labels) < 2:
            raise UserError(f"{self.corpus_setting()} holds one label ({', '.join(self.labels)}): a classifier "
                            "needs at least two")
        read = time.perf_counter()
        self.splits = split_by_name(pairs, self.split_fractions, self.split_seed)
        if not self.splits["train"]:
            raise UserError(f"{self.corpus_setting()} is too small to split: add names")
        self.check_every_label_is_split()
        if self.exclude:
            self.leave_out_of_training(self.exclude)
        split = time.perf_counter()
        train_names = [name for name, _ in self.as_read(self.splits["train"])]
        self.vocab = grow_vocab(self.pretrained_vocab, train_names) if self.pretrained_vocab else build_vocab(
            train_names)
        self.datasets = {s: self.encode(p) for s, p in self.splits.items()}
        self.setup_seconds = {"read": read - started, "split": split - read, "encode": time.perf_counter() - split}

    def leave_out_of_training(self, path: str) -> None:
        """Drop the (name, label) rows listed in `path` from the training split alone."""
        from nameorigin.base.tables import TableReader

        reader = TableReader(path, f"data.exclude={path}")
        for column in ("name", "given_label"):
            reader.require_text(column, f"data.exclude={path}: its column {column}")
        listed = {(name, label) for chunk in reader.chunks(["name", "given_label"])
                  for name, label in zip(chunk.cells("name"), chunk.cells("given_label"), strict=True)}
        kept = [pair for pair in self.splits["train"] if pair not in listed]
        self.excluded = len(self.splits["train"]) - len(kept)
        log.info("data.exclude: %d training pairs left out (validation and test keep theirs)", self.excluded)
        self.splits["train"] = kept

    def label_set(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        """The labels, in the order of the model's outputs."""
        return sorted({language for _, language in pairs})

    def encode(self, pairs: Sequence[tuple[str, str]]) -> EncodedNames:
        """One split's pairs as tensors (a share table adds its shares and weights)."""
        return EncodedNames(pairs, {c: i for i, c in enumerate(self.vocab)}, self.labels, boundary=self.boundary)

    def as_read(self, pairs: Sequence[tuple[str, str]]) -> Sequence[tuple[str, str]]:
        """The pairs as the model reads their names (a table's parts may be glued into one string)."""
        return pairs

    @property
    def name_parts(self) -> dict | None:
        """The parts a name is read as ({"names": [...], "join": ...}, for the checkpoint), None for one string."""
        return None

    @property
    def boundary(self) -> int:
        return boundary_index(self.vocab, self.name_parts)

    def check_every_label_is_split(self) -> None:
        """Hook for readers that refuse a label missing from train, validation or test (the table reader)."""

    def add_validation_to_training(self) -> None:
        """The refit's training set: train and validation pairs together, encoded with the vocabulary built from
        train. The splits themselves (and split.json) keep saying which names were validation."""
        self.datasets["train"] = self.encode(sorted(self.splits["train"] + self.splits["val"]))
        self.trained_on = TRAINED_ON

    def class_weights(self, mode: str) -> list[float]:
        """Loss weights per label from training counts: "balanced" = n / (k * count), "sqrt" = its square root."""
        counts = Counter(language for _, language in self.splits["train"])
        total = sum(counts.values())
        weights = [total / (len(self.labels) * max(counts[label], 1)) for label in self.labels]
        return [w**0.5 for w in weights] if mode == "sqrt" else weights

    def class_prior(self) -> list[float]:
        """Each label's share of the pairs trained on (train, or train + validation for the refit; at least one
        count each, so every log is finite)."""
        counts = torch.bincount(self.datasets["train"].targets, minlength=len(self.labels)).clamp_min(1)
        return (counts / counts.sum()).tolist()

    def manifest(self) -> dict:
        """Everything needed to audit or rebuild the split: settings, counts, corpus hash, the names."""
        counts = {s: dict(sorted(Counter(lang for _, lang in p).items())) for s, p in self.splits.items()}
        multi = Counter(name for name, _ in (p for split in self.splits.values() for p in split))
        return {
            "root": str(self.root), "corpus_sha256": self.corpus_sha256, "normalize": self.normalize,
            "split_fractions": self.split_fractions, "split_seed": self.split_seed, "labels": self.labels,
            "sizes": {s: len(p) for s, p in self.splits.items()}, "counts": counts,
            "names_with_several_languages": sum(1 for c in multi.values() if c > 1),
            "spelling_variants": "share a split (same letters and digits, case folded: O'Neill, Oneill)",
            "splits": {s: [list(pair) for pair in p] for s, p in self.splits.items()},
            "trained_on": self.trained_on,
        }

    def state_dict(self) -> dict:
        """Saved in every checkpoint: enough to rebuild the split and to notice a different corpus."""
        state = {"corpus_sha256": self.corpus_sha256, "split_seed": self.split_seed,
                 "split_fractions": list(self.split_fractions), "normalize": self.normalize}
        if self.trained_on != "train":  # only the refit's checkpoint says so; resumable ones keep their old keys
            state["trained_on"] = self.trained_on
        if self.excluded:  # a resumed run must leave out the same rows
            state["excluded"] = self.excluded
        return state

    def corpus_setting(self) -> str:
        return f"data.root={self.root}"
