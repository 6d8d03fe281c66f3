"""Fine-tuning from a pretrained checkpoint (`model.init_from`): refuse one that does not fit, keep its
vocabulary, load its embedding and cell, keep its country head as features for the new language head, and
build the known-name table from the surnames cache. The `transfer` group makes the surnames model that
`make pretrain` publishes the starting point of a candidate that any run trains beside its plain model, with
validation picking which one is served."""

from __future__ import annotations

import dataclasses
import logging
import shutil
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from nameorigin.base.atomic import write_atomically
from nameorigin.base.checkpoint_io import load_checkpoint
from nameorigin.base.errors import UserError
from nameorigin.base.textnorm import folded_indices
from nameorigin.config import ModelConfig, TransferShape, TransferUse, from_plain, plain, shape_fields
from nameorigin.model.charrnn import SHARED_WEIGHTS, cell_layout
from nameorigin.model.known import KnownNames
from nameorigin.training.settings import changed

log = logging.getLogger(__name__)
# Where the transferred candidate of a use=auto run writes its checkpoints and logs, inside the run folder.
CANDIDATE_FOLDER = "transfer"


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
    # Encoder settings left to the data are the checkpoint's (encoder_settings puts them into the run's settings).
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


def encoder_settings(cfg: DictConfig, checkpoint: dict) -> dict[str, Any]:
    """The encoder settings the run left null (to the data), as the pretrained checkpoint has them: its weights
    decide them ({"model.hidden_size": 256, ...}; `cfg` is only read)."""
    saved = from_plain(ModelConfig, checkpoint["hyper_parameters"]["config"])
    keys = shape_fields(saved, "encoder")
    if cfg.model.get("transfer_features") and saved.ngram_buckets:  # its n-gram head reads n-grams of its length
        keys.append("ngram_max")
    return {f"model.{key}": plain(saved)[key] for key in keys if cfg.model.get(key, "absent") is None}


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


def model_arguments(checkpoint: dict, config: ModelConfig,
                    vocab: list[str]) -> tuple[TransferShape, KnownNames | None]:
    """What the pretrained checkpoint adds to the new model's shape (`vocab`: the run's, the pretrained one grown
    by its training names), and the known-name table (or None)."""
    shape, table = TransferShape(), None
    hp = checkpoint["hyper_parameters"]
    saved = hp["config"]
    if len(vocab) > len(hp["vocab"]):
        shape.source_vocab = len(hp["vocab"])
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
def initialize(net: torch.nn.Module, checkpoint: dict, table: KnownNames | None, vocab: list[str]) -> list[str]:
    """Copy the pretrained pieces into `net` (whose vocabulary is `vocab`); returns the names of what was loaded.
    A character the run's names added to the pretrained vocabulary starts as the one it folds to (é as e, else
    <unk>), so the new model starts by reading every name as the pretrained one did."""
    state, pretrained_vocab = checkpoint["state_dict"], checkpoint["hyper_parameters"]["vocab"]
    as_pretrained = torch.tensor(folded_indices(vocab, pretrained_vocab))
    loaded = []
    for key in loaded_keys(net.config):
        net.get_parameter(key).copy_(state[f"net.{key}"][as_pretrained] if key == "embedding.weight"
                                     else state[f"net.{key}"])
        loaded.append(key)
    parts = net.transfer
    if parts is not None and parts.source_tokens is not None:
        parts.source_tokens.copy_(as_pretrained)
        loaded.append(f"the vocabulary, grown by {len(vocab) - len(pretrained_vocab)} characters")
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


def candidate_config(cfg: DictConfig) -> DictConfig | None:
    """The transferred candidate's settings (a copy of the run's, before anything fills it), or None when this
    run trains no such candidate: transfer.use=never, a run fine-tuning by hand (model.init_from), a resumed run,
    or no starting point yet (then train.log says how to build one)."""
    settings = cfg.transfer
    if settings.use == TransferUse.never or cfg.model.get("init_from") or cfg.get("ckpt_path"):
        return None
    path = Path(settings.starting_point)
    if not path.is_file():
        if settings.use == TransferUse.always:
            raise UserError(f"transfer.use=always but transfer.starting_point={path} does not exist: build it once "
                            "with `make pretrain`, or pass transfer.use=auto")
        log.info("transfer: no starting point at %s, so the plain model alone (`make pretrain` builds it once; "
                 "then validation decides per table whether the surnames model helps)", path)
        return None
    differs = fixed_differences(cfg, str(path))
    if differs and settings.use == TransferUse.auto:
        log.info("transfer: the starting point fixes settings this run sets otherwise (%s), so the plain model "
                 "alone, no candidate from the starting point (leave those settings to the data to try it)",
                 ", ".join(differs))
        return None
    cache = settings.known_names_cache
    if cache and not Path(cache).is_dir():
        raise UserError(f"transfer.known_names_cache={cache} does not exist: it is written by `make pretrain` "
                        "beside the starting point; pass transfer.known_names_cache=null to go without the lookup")
    values = {"model.init_from": str(path), "model.transfer_features": True, "model.known_names_cache": cache,
              "model.evidence_hidden": settings.evidence_hidden,
              "model.pretrained_lr_scale": settings.pretrained_lr_scale,
              "refit.enabled": False}  # validation picked it against the plain model: train alone, as compared
    if settings.use == TransferUse.auto:
        values["paths.output_dir"] = str(Path(cfg.paths.output_dir) / CANDIDATE_FOLDER)
    return changed(cfg, values)


def fixed_differences(cfg: DictConfig, path: str) -> list[str]:
    """The settings the starting point fixes that this run sets to other values ("model.hidden_size=64 (starting
    point: 256)"): its encoder's, and the n-gram order its n-gram head reads (the transferred model keeps that
    head as features). Settings left to the data take the starting point's."""
    saved = from_plain(ModelConfig, load_checkpoint(path, setting="transfer.starting_point")["hyper_parameters"]
                       ["config"])
    keys = shape_fields(saved, "encoder") + (["ngram_max"] if saved.ngram_buckets else [])
    return [f"model.{key}={cfg.model.get(key)} (starting point: {getattr(saved, key)})" for key in keys
            if cfg.model.get(key) is not None and cfg.model.get(key) != getattr(saved, key)]


def setting_differences(plain_run: Any, transferred: Any) -> list[str]:
    """The settings shaping the weights on which the two candidates differ ("model.ngram_max: 5 plain, 4 from the
    starting point"), for the results block and the card."""
    one, other = plain(plain_run.settings.model), plain(transferred.settings.model)
    return [f"model.{key}: {one[key]} plain, {other[key]} from the starting point"
            for key in [*shape_fields(plain_run.settings.model, "encoder"), "ngram_buckets", "ngram_max"]
            if one[key] != other[key]]


def choose(fitted: list) -> tuple[Any, dict[str, float], list[str]]:
    """The plain and the transferred candidate (pipeline.Fitted, in that order) -> the one with the higher best
    validation accuracy (the plain one on a tie), both candidates' figures for the results and the card, and the
    settings on which they differ. The other's checkpoints are removed, so the run folder holds one model."""
    plain_run, transferred = fitted
    score = {"plain": best_score(plain_run), "transferred": best_score(transferred)}
    chosen = transferred if score["transferred"] > score["plain"] else plain_run
    log.info("transfer: validation accuracy %.4f plain, %.4f from the surnames model (%.0f s and %.0f s of "
             "training): the %s model is served", score["plain"], score["transferred"],
             plain_run.metrics["time/fit_s"], transferred.metrics["time/fit_s"],
             "transferred" if chosen is transferred else "plain")
    for run in fitted:
        if run is not chosen:
            shutil.rmtree(Path(run.cfg.paths.output_dir) / "checkpoints", ignore_errors=True)
    differences = setting_differences(plain_run, transferred)
    if differences:
        log.info("transfer: the candidates differ in %s", "; ".join(differences))
    figures = {"transfer/val_acc_plain": score["plain"], "transfer/val_acc_transferred": score["transferred"],
               "transfer/fit_s_plain": plain_run.metrics["time/fit_s"],
               "transfer/fit_s_transferred": transferred.metrics["time/fit_s"],
               "transfer/chosen": float(chosen is transferred)}
    return chosen, figures, differences


def refused(plain_run: Any, error: UserError) -> dict[str, Any]:
    """The candidate from the starting point was refused after the plain model had trained: the plain model is
    served and the run says why (the refused candidate's folder goes)."""
    log.warning("transfer: the candidate from the starting point was refused (%s): the plain model is served", error)
    shutil.rmtree(Path(plain_run.cfg.paths.output_dir) / CANDIDATE_FOLDER, ignore_errors=True)
    return {"refused": str(error)}


def best_score(run: Any) -> float:
    """A candidate's best validation accuracy (best.ckpt's), -inf when it kept no checkpoint."""
    callback = run.trainer.checkpoint_callback
    score = callback.best_model_score if callback is not None else None
    return float(score) if score is not None else float("-inf")


def publish(model: str, destination: str) -> None:
    """A pretraining's served model copied to where runs look for their starting point (transfer.publish)."""
    write_atomically(Path(destination), lambda path: shutil.copyfile(model, path))
    log.info("starting point published: %s (runs with transfer.use=auto now try it on validation)", destination)
