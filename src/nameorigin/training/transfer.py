"""Fine-tuning from a pretrained checkpoint (`model.init_from`): refuse one that does not fit, keep its
vocabulary, load its embedding and cell, keep its country head as features for the new language head, and
build the known-name table from the surnames cache."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from omegaconf import DictConfig, open_dict

from nameorigin.base.checkpoint_io import load_checkpoint
from nameorigin.base.errors import UserError
from nameorigin.config import ModelConfig, TransferShape, from_plain, plain, shape_fields
from nameorigin.model.charrnn import SHARED_WEIGHTS, cell_layout
from nameorigin.model.known import KnownNames


def loaded_keys(config: ModelConfig) -> list[str]:
    """What fine-tuning carries over: the embedding and every cell's weights."""
    return ["embedding.weight", *(f"{cell}.{weight}" for names in cell_layout(config.directions, config.layers)
                                  for cell in names for weight in SHARED_WEIGHTS)]


def load_pretrained(path: str, config: ModelConfig) -> dict:
    """The checkpoint, weights-only, after checking that the settings shaping its embedding and cell (the
    schema's "encoder" fields) are the configured ones; the implementation and the labels may differ."""
    checkpoint = load_checkpoint(path, setting="model.init_from")
    hp = checkpoint["hyper_parameters"]
    saved = from_plain(ModelConfig, hp["config"])  # a setting the checkpoint predates takes its default
    keys = shape_fields(config, "encoder")
    # Encoder settings left to the data are the checkpoint's (adopt_encoder puts them into the run's config).
    config = dataclasses.replace(config, **{key: getattr(saved, key) for key in keys if getattr(config, key) is None})
    wrong = [f"{key}={getattr(config, key)} (checkpoint: {getattr(saved, key)})" for key in keys
             if getattr(saved, key) != getattr(config, key)]
    if wrong:
        raise UserError(f"model.init_from={path} does not fit: {', '.join(wrong)}; set "
                        f"{', '.join(f'model.{key}' for key in keys)} to the checkpoint's values")
    rows = checkpoint["state_dict"].get("net.embedding.weight", torch.empty(0)).shape[0]
    if rows and rows != len(hp["vocab"]):
        raise UserError(f"model.init_from={path}: its vocabulary ({len(hp['vocab'])} entries) does not match "
                            f"its embedding ({rows} rows): the checkpoint is damaged; pretrain again")
    missing = [key for key in loaded_keys(config) if f"net.{key}" not in checkpoint["state_dict"]]
    if missing:
        raise UserError(f"model.init_from={path} has no {', '.join(missing)}: pretrain with an embedding "
                            "(model.embedding_dim > 0)")
    return checkpoint


def adopt_encoder(cfg: DictConfig, checkpoint: dict) -> None:
    """Encoder settings the run left null (to the data) are the pretrained checkpoint's: its weights decide them."""
    saved = from_plain(ModelConfig, checkpoint["hyper_parameters"]["config"])
    with open_dict(cfg):
        for key in shape_fields(saved, "encoder"):
            if cfg.model.get(key, "absent") is None:
                cfg.model[key] = plain(saved)[key]


def check_held_out(path: str, checkpoint: dict, datamodule: Any) -> None:
    """Refuse a starting point trained on this same corpus with another split: its weights have learnt names that
    are validation or test names here, so the new run's held-out scores would not be held out."""
    state = checkpoint.get("data")
    # No state: pretrained on another corpus (the surnames), or saved without its split settings.
    if not state or state.get("corpus_sha256") != datamodule.corpus_sha256:
        return
    other = [f"data.{key}={state[key]}" for key in datamodule.split_differences(state)]
    if other:
        raise UserError(f"model.init_from={path} was trained on this corpus with another split "
                            f"({', '.join(other)}): it has seen names held out here; start from a surnames "
                            "pretraining, or use its split settings")


def known_names(cache: str, vocab: list[str]) -> KnownNames:
    """The known-name table over the surnames cache, keyed with the pretrained vocabulary."""
    from nameorigin.data.surnames import Surnames

    corpus = Surnames(cache, convert_if_missing=False, setting="model.known_names_cache")
    table = KnownNames(len(vocab), len(corpus.countries), 0)
    table.fill(vocab, corpus.names, corpus.top_index, corpus.top_share)
    return table


def model_arguments(checkpoint: dict, config: ModelConfig) -> tuple[TransferShape, KnownNames | None]:
    """What the pretrained checkpoint adds to the new model's shape, and the known-name table (or None)."""
    shape, table = TransferShape(), None
    hp = checkpoint["hyper_parameters"]
    saved = hp["config"]
    if config.transfer_features:
        shape.source_classes = len(hp["labels"])
        shape.source_ngram_buckets = saved["ngram_buckets"]
        if saved["ngram_buckets"] and saved["ngram_max"] != config.ngram_max:
            raise UserError(f"model.init_from={config.init_from}: its n-gram head reads 1-{saved['ngram_max']}-grams; "
                            f"set model.ngram_max={saved['ngram_max']}")
    if config.known_names_cache:
        table = known_names(config.known_names_cache, hp["vocab"])
        shape.known_names, shape.known_countries = len(table.fingerprints), table.countries
    return shape, table


@torch.no_grad()
def initialize(net: torch.nn.Module, checkpoint: dict, table: KnownNames | None) -> list[str]:
    """Copy the pretrained pieces into `net`; returns the names of what was loaded."""
    state = checkpoint["state_dict"]
    loaded = []
    for key in loaded_keys(net.config):
        net.get_parameter(key).copy_(state[f"net.{key}"])
        loaded.append(key)
    parts = net.transfer
    if parts is not None and parts.source_head is not None:
        parts.source_head.weight.copy_(state["net.head.weight"][:, : parts.source_head.in_features])
        parts.source_head.bias.copy_(state["net.head.bias"])
        loaded.append("source_head (the pretrained country head)")
    if parts is not None and parts.source_ngram is not None:
        parts.source_ngram.weight.copy_(state["net.ngram.weight"])
        loaded.append("source_ngram (its n-gram head)")
    if table is not None:
        parts.known.load_state_dict(table.state_dict())
        loaded.append(f"known names ({len(table.fingerprints)} surnames)")
    return loaded
