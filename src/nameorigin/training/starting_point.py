"""The pretrained model a run fine-tunes from (`model.init_from`, or the transfer group's starting point), read
from disk once into a StartingPoint: its settings, vocabulary, labels, weights and split, plus the known-name table
when the run asks for one. Everything the run needs of it (whether it fits, the encoder settings it fixes, the new
model's extra shape, the weights to copy in) is read from that value, never from the file again."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

import torch

from nameorigin.base.checkpoint_io import load_checkpoint
from nameorigin.base.errors import UserError
from nameorigin.base.textnorm import folded_indices
from nameorigin.config import ModelConfig, TransferShape, from_plain, plain, shape_fields
from nameorigin.model.charrnn import SHARED_WEIGHTS, cell_layout
from nameorigin.model.known import KnownNames

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StartingPoint:
    """A pretrained checkpoint as plain values: where it was read from and under which setting, its model settings
    (through the schema: a setting it predates takes its default), vocabulary, labels, weights, its split state
    (None: pretrained on another corpus), and the known-name table over the surnames cache (None: not asked)."""

    path: str
    setting: str
    config: ModelConfig
    vocab: tuple[str, ...]
    labels: tuple[str, ...]
    weights: dict[str, torch.Tensor]
    split: dict | None = None
    known_names: KnownNames | None = None

    @classmethod
    def read(cls, path: str, setting: str) -> StartingPoint:
        """The checkpoint at `path`, weights-only (a bad file is one line naming `setting`)."""
        checkpoint = load_checkpoint(path, setting=setting)
        hp = checkpoint["hyper_parameters"]
        point = cls(str(path), setting, from_plain(ModelConfig, hp["config"]), tuple(hp["vocab"]),
                    tuple(hp["labels"]), checkpoint["state_dict"], checkpoint.get("data"))
        rows = point.weights.get("net.embedding.weight", torch.empty(0)).shape[0]
        if rows and rows != len(point.vocab):
            raise UserError(f"{setting}={path}: its vocabulary ({len(point.vocab)} entries) does not match its "
                            f"embedding ({rows} rows): the checkpoint is damaged; pretrain again")
        return point

    def record(self) -> dict[str, Any]:
        """What a run records of the starting point it tried: its path and the sha256 of the corpus it learnt from
        (the pretraining's cache, which changes with what the pretraining left out), so that a figure read from a
        transferred candidate names the starting point behind it, as a pretraining's results name the one they
        published (tests/test_generated_figures.py holds the shipped records to one)."""
        return {"path": self.path, "corpus_sha256": (self.split or {}).get("corpus_sha256")}

    def with_known_names(self, cache: str | None) -> StartingPoint:
        """The same starting point with the known-name table over the surnames `cache`, keyed with its vocabulary
        (itself when `cache` is None, or when it holds the table already)."""
        if not cache or self.known_names is not None:
            return self
        from nameorigin.data.surnames import Surnames

        corpus = Surnames(cache, convert_if_missing=False, setting="model.known_names_cache")
        table = KnownNames(len(self.vocab), len(corpus.countries), 0)
        table.fill(list(self.vocab), corpus.names, corpus.top_index, corpus.top_share)
        return dataclasses.replace(self, known_names=table)

    def fixed_keys(self, with_ngram_head: bool = True) -> list[str]:
        """The model settings this starting point fixes: its encoder's and, when it has an n-gram head that the
        new model keeps as features, the n-gram order that head reads."""
        return shape_fields(self.config, "encoder") + (["ngram_max"] if with_ngram_head and self.config.ngram_buckets
                                                       else [])

    def fixed_differences(self, model: Any) -> list[str]:
        """The settings it fixes that `model` (the run's model group) sets to other values ("model.hidden_size=64
        (starting point: 256)"); settings left to the data (null) take the starting point's."""
        return [f"model.{key}={model.get(key)} (starting point: {getattr(self.config, key)})"
                for key in self.fixed_keys() if model.get(key) is not None
                and model.get(key) != getattr(self.config, key)]

    def encoder_settings(self, model: Any, transfer_features: bool) -> dict[str, Any]:
        """The settings it fixes that the run left null, as it has them ({"model.hidden_size": 256, ...})."""
        saved = plain(self.config)
        return {f"model.{key}": saved[key] for key in self.fixed_keys(transfer_features)
                if model.get(key, "absent") is None}

    def check_fits(self, config: ModelConfig) -> None:
        """Refuse a starting point whose encoder is not the configured one, or that has no embedding to load."""
        keys = shape_fields(config, "encoder")
        wrong = [f"{key}={getattr(config, key)} (checkpoint: {getattr(self.config, key)})" for key in keys
                 if getattr(self.config, key) != getattr(config, key)]
        if wrong:
            raise UserError(f"{self.setting}={self.path} does not fit: {', '.join(wrong)}; set "
                            f"{', '.join(f'model.{key}' for key in keys)} to the checkpoint's values")
        missing = [key for key in loaded_keys(config) if f"net.{key}" not in self.weights]
        if missing:
            raise UserError(f"{self.setting}={self.path} has no {', '.join(missing)}: pretrain with an embedding "
                            "(model.embedding_dim > 0)")

    def check_held_out(self, datamodule: Any) -> None:
        """Refuse a starting point trained on this same corpus with another split: its weights have learnt names
        that are validation or test names here, so the new run's held-out scores would not be held out."""
        state = self.split
        # No state: pretrained on another corpus (the surnames), or saved without its split settings.
        if not state or state.get("corpus_sha256") != datamodule.corpus_sha256:
            return
        other = [f"data.{key}={state[key]}" for key in datamodule.split_differences(state)]
        if other:
            raise UserError(f"{self.setting}={self.path} was trained on this corpus with another split "
                            f"({', '.join(other)}): it has seen names held out here; start from a surnames "
                            "pretraining, or use its split settings")

    def shape(self, config: ModelConfig, vocab: list[str]) -> TransferShape:
        """What it adds to the new model's shape (`vocab`: the run's, its own grown by the training names)."""
        shape = TransferShape()
        if len(vocab) > len(self.vocab):
            shape.source_vocab = len(self.vocab)
        if config.transfer_features:
            shape.source_classes = len(self.labels)
            shape.source_ngram_buckets, shape.source_ngram_hash = self.config.ngram_buckets, self.config.ngram_hash
            if self.config.ngram_buckets and self.config.ngram_max != config.ngram_max:
                raise UserError(f"{self.setting}={self.path}: its n-gram head reads 1-{self.config.ngram_max}-grams; "
                                f"set model.ngram_max={self.config.ngram_max}")
        if self.known_names is not None:
            shape.known_names, shape.known_countries = len(self.known_names.fingerprints), self.known_names.countries
        return shape

    @torch.no_grad()
    def initialize(self, net: torch.nn.Module, vocab: list[str]) -> list[str]:
        """Copy its pieces into `net` (whose vocabulary is `vocab`); returns the names of what was loaded. A
        character the run's names added to its vocabulary starts as the one it folds to (é as e, else <unk>), so
        the new model starts by reading every name as the pretrained one did."""
        state = self.weights
        as_pretrained = torch.tensor(folded_indices(vocab, list(self.vocab)))
        loaded = []
        for key in loaded_keys(net.config):
            net.get_parameter(key).copy_(state[f"net.{key}"][as_pretrained] if key == "embedding.weight"
                                         else state[f"net.{key}"])
            loaded.append(key)
        layers = net.transfer
        if layers is not None and layers.source_tokens is not None:
            layers.source_tokens.copy_(as_pretrained)
            loaded.append(f"the vocabulary, grown by {len(vocab) - len(self.vocab)} characters")
        if layers is not None and layers.source_head is not None:
            layers.source_head.weight.copy_(state["net.head.weight"][:, : layers.source_head.in_features])
            layers.source_head.bias.copy_(state["net.head.bias"])
            loaded.append("source_head (the pretrained country head)")
        if layers is not None and layers.source_ngram is not None:
            layers.source_ngram.weight.copy_(state["net.ngram.weight"])
            loaded.append("source_ngram (its n-gram head)")
        if self.known_names is not None:
            layers.known.load_state_dict(self.known_names.state_dict())
            loaded.append(f"known names ({len(self.known_names.fingerprints)} surnames)")
        return loaded


def loaded_keys(config: ModelConfig) -> list[str]:
    """What fine-tuning carries over: the embedding and every cell's weights."""
    return ["embedding.weight", *(f"{cell}.{weight}" for names in cell_layout(config.directions, config.layers)
                                  for cell in names for weight in SHARED_WEIGHTS)]
