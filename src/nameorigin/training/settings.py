"""A run's settings, resolved once: the composed config checked, then what the run left to the data filled in (the
pretrained encoder's shape, the rule's tiers, the search's pick), each step returning a new config, never writing
into the one it was given. The result is one frozen value that every later step reads: the config made read-only,
its model group as the typed ModelConfig, and the picks with their reasons for the log and the card.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from nameorigin.config import SCHEMAS, ModelConfig, check_run
from nameorigin.model.cells import check_cell

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


@dataclass(frozen=True)
class RunSettings:
    """What one training run reads from here on: its config with every null the data decided filled (read-only),
    that config's model group typed, and what was picked from the data or searched (sizing.Pick, search.Candidate)."""

    cfg: DictConfig
    model: ModelConfig
    picks: tuple = ()
    candidates: tuple = ()

    @classmethod
    def resolved(cls, cfg: DictConfig, picks: list | tuple = (), candidates: list | tuple = ()) -> RunSettings:
        """The settings of `cfg` with the picks' values in it, checked once more as a whole."""
        final = changed(cfg, {pick.key: pick.value for pick in picks})
        return cls(final, checked(final), tuple(picks), tuple(candidates))
