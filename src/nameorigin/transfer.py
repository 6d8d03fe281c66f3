"""Fine-tuning from a pretrained checkpoint (`model.init_from`): refuse one that does not fit, keep its
vocabulary, load its embedding and cell, keep its country head as features for the new language head, and
build the known-name table from the surnames cache."""

from __future__ import annotations

from typing import Any

import torch
from omegaconf import DictConfig

from nameorigin.known import KnownNames
from nameorigin.predict import PredictError, load_checkpoint
from nameorigin.textnorm import DataError

MUST_MATCH = ("cell", "hidden_size", "embedding_dim")
LOADED = ("embedding.weight", "cell.weight_ih", "cell.weight_hh", "cell.bias_ih", "cell.bias_hh")


class TransferError(ValueError):
    """A checkpoint that cannot start this model; train.py turns it into one line and exit code 2."""


def load_pretrained(path: str, model_cfg: DictConfig) -> dict:
    """The checkpoint, weights-only, after checking that its cell and sizes are the configured ones."""
    try:
        checkpoint = load_checkpoint(path)
    except PredictError as error:
        raise TransferError(f"model.init_from: {error}") from None
    hp = checkpoint["hyper_parameters"]
    wrong = [f"{key}={model_cfg.get(key)} (checkpoint: {hp[key]})" for key in MUST_MATCH
             if hp[key] != model_cfg.get(key)]
    if wrong:
        raise TransferError(f"model.init_from={path} does not fit: {', '.join(wrong)}; set model.{MUST_MATCH[0]}, "
                            f"model.{MUST_MATCH[1]} and model.{MUST_MATCH[2]} to the checkpoint's values")
    rows = checkpoint["state_dict"].get("net.embedding.weight", torch.empty(0)).shape[0]
    if rows and rows != len(hp["vocab"]):
        raise TransferError(f"model.init_from={path}: its vocabulary ({len(hp['vocab'])} entries) does not match "
                            f"its embedding ({rows} rows): the checkpoint is damaged; pretrain again")
    missing = [key for key in LOADED if f"net.{key}" not in checkpoint["state_dict"]]
    if missing:
        raise TransferError(f"model.init_from={path} has no {', '.join(missing)}: pretrain with an embedding "
                            "(model.embedding_dim > 0)")
    return checkpoint


def check_held_out(path: str, checkpoint: dict, datamodule: Any) -> None:
    """Refuse a starting point trained on this same corpus with another split: its weights have learnt names that
    are validation or test names here, so the new run's held-out scores would not be held out."""
    state = checkpoint.get(type(datamodule).__name__)
    # No state: pretrained on another corpus (the surnames), or saved without its split settings.
    if not state or state.get("corpus_sha256") != datamodule.corpus_sha256:
        return
    other = [f"data.{key}={state[key]}" for key in datamodule.split_differences(state)]
    if other:
        raise TransferError(f"model.init_from={path} was trained on this corpus with another split "
                            f"({', '.join(other)}): it has seen names held out here; start from a surnames "
                            "pretraining, or use its split settings")


def known_names(cache: str, vocab: list[str]) -> KnownNames:
    """The known-name table over the surnames cache, keyed with the pretrained vocabulary."""
    from nameorigin.surnames import Surnames

    corpus = Surnames(cache, convert_if_missing=False)
    table = KnownNames(len(vocab), len(corpus.countries), 0)
    table.fill(vocab, corpus.names, corpus.top_index, corpus.top_share)
    return table


def model_arguments(checkpoint: dict, model_cfg: DictConfig) -> tuple[dict[str, Any], KnownNames | None]:
    """Constructor arguments that come from the pretrained checkpoint, and the known-name table (or None)."""
    arguments: dict[str, Any] = {}
    table = None
    hp = checkpoint["hyper_parameters"]
    if model_cfg.get("transfer_features", True):
        arguments["source_classes"] = len(hp["labels"])
        arguments["source_ngram_buckets"] = hp.get("ngram_buckets", 0)
        if hp.get("ngram_buckets") and hp.get("ngram_max") != model_cfg.get("ngram_max"):
            raise TransferError(f"model.init_from={model_cfg.init_from}: its n-gram head reads "
                                f"1-{hp['ngram_max']}-grams; set model.ngram_max={hp['ngram_max']}")
    cache = model_cfg.get("known_names_cache")
    if cache:
        try:
            table = known_names(cache, checkpoint["hyper_parameters"]["vocab"])
        except DataError as error:
            raise TransferError(f"model.known_names_cache: {error}") from None
        arguments.update(known_names=len(table.fingerprints), known_countries=table.countries)
    return arguments, table


@torch.no_grad()
def initialize(net: torch.nn.Module, checkpoint: dict, table: KnownNames | None) -> list[str]:
    """Copy the pretrained pieces into `net`; returns the names of what was loaded."""
    state = checkpoint["state_dict"]
    loaded = []
    for key in LOADED:
        net.get_parameter(key).copy_(state[f"net.{key}"])
        loaded.append(key)
    if net.source_head is not None:
        net.source_head.weight.copy_(state["net.head.weight"][:, : net.source_head.in_features])
        net.source_head.bias.copy_(state["net.head.bias"])
        loaded.append("source_head (the pretrained country head)")
    if net.source_ngram is not None:
        net.source_ngram.weight.copy_(state["net.ngram.weight"])
        loaded.append("source_ngram (its n-gram head)")
    if table is not None:
        net.known.load_state_dict(table.state_dict())
        loaded.append(f"known names ({len(table.fingerprints)} surnames)")
    return loaded
