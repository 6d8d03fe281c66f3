"""A run's plan, resolved once in `pipeline.prepare` and frozen: the composed config checked, what the run left to
the data filled in (the starting point's encoder, the rule's tiers, the search's pick), then turned into typed
values. Every step after `prepare` reads the plan, never the composed config: each group with a schema is its
dataclass (nameorigin.config), the groups Hydra instantiates (trainer, callbacks, logger) and the paths are plain
dicts with every interpolation resolved, and the starting point is the one value read from disk once.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from nameorigin.config import SCHEMAS, ModelConfig, TrainConfig, check_run
from nameorigin.model.cells import check_cell
from nameorigin.training.starting_point import StartingPoint

# The groups with a schema (nameorigin.config.SCHEMAS), beside model, which checked() returns typed.
GROUPS = tuple(dict.fromkeys(group for group, _ in SCHEMAS if group not in (None, "model")))


def checked(cfg: DictConfig) -> ModelConfig:
    """The rules across groups (the run's seed first: data.order_seed follows it), then every group with a schema
    turned into its dataclass, which checks its ranges and rules (__post_init__): all before anything is built or
    read. Returns the model's config."""
    check_run(cfg)
    for group in GROUPS:
        OmegaConf.to_object(cfg[group])
    model_config = OmegaConf.to_object(cfg.model)
    check_cell(model_config)
    return model_config


def changed(cfg: DictConfig, values: dict[str, Any]) -> DictConfig:
    """A new, read-only config: `cfg` with each dotted key set to its value (`cfg` itself is left as it was)."""
    new = copy.deepcopy(cfg)  # typed: each group keeps its schema
    OmegaConf.set_readonly(new, False)
    with open_dict(new):
        for key, value in values.items():
            OmegaConf.update(new, key, value, merge=False)
    OmegaConf.set_readonly(new, True)
    return new


def typed(cfg: DictConfig) -> TrainConfig:
    """The run's settings as TrainConfig, every interpolation resolved (Hydra's own node, where a config carries
    it, is no setting of the run)."""
    values = {}
    for field in dataclasses.fields(TrainConfig):
        if field.name in cfg:
            node = cfg[field.name]
            values[field.name] = OmegaConf.to_object(node) if isinstance(node, DictConfig | ListConfig) else node
    return TrainConfig(**values)


@dataclass(frozen=True)
class RunPlan:
    """What one training run reads from `prepare` on: its settings typed (TrainConfig, every null the data decided
    filled), what was picked from the data or searched (sizing.Pick, search.Candidate), and the starting point it
    fine-tunes from (or None)."""

    settings: TrainConfig
    picks: tuple = ()
    candidates: tuple = ()
    starting_point: StartingPoint | None = None

    @classmethod
    def resolved(cls, cfg: DictConfig, picks: list | tuple = (), candidates: list | tuple = (),
                 starting_point: StartingPoint | None = None) -> RunPlan:
        """The plan of `cfg` with the picks' values in it, checked once more as a whole, then typed."""
        final = changed(cfg, {pick.key: pick.value for pick in picks})
        checked(final)
        return cls(typed(final), tuple(picks), tuple(candidates), starting_point)

    @property
    def model(self) -> ModelConfig:
        return self.settings.model

    @property
    def output_dir(self) -> Path:
        return Path(self.settings.paths["output_dir"])

    def without_refit(self) -> RunPlan:
        """The same plan, trained on the training split alone (an ensemble's members were compared on
        validation)."""
        settings = dataclasses.replace(self.settings, refit=dataclasses.replace(self.settings.refit, enabled=False))
        return dataclasses.replace(self, settings=settings)

    def flat(self) -> dict[str, Any]:
        """The settings as nested plain values (dataclasses to dicts), for the trackers' parameters."""
        return dataclasses.asdict(self.settings)
