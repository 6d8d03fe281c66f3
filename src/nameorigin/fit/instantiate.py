"""Config groups built into objects (Hydra's instantiate), with a constructor's refusal turned into one line
naming the group."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from pytorch_lightning.utilities.exceptions import MisconfigurationException

from nameorigin.base.errors import UserError


def build(spec: Any, group: str, **kwargs: Any) -> Any:
    """Instantiate one config group from its settings (a dict with a _target_, or its schema's dataclass); a
    constructor's refusal becomes a UserError naming the group."""
    try:
        return instantiate(spec, **kwargs)
    except InstantiationException as error:
        raise instantiation_error(error, group) from None


def instantiation_error(error: InstantiationException, group: str) -> Exception:
    cause = error.__cause__
    if isinstance(cause, UserError):
        return cause
    unknown = re.match(r"Error locating target '([^']*)'(?:.*\nfull_key: (\S+))?", str(error), re.DOTALL)
    if unknown:  # a misspelled _target_: Hydra's own message is three lines and a hint about HYDRA_FULL_ERROR
        target, key = unknown.groups()
        return UserError(f"{key or group}._target_={target} cannot be imported: give the dotted path of an "
                         "importable class, e.g. torch.optim.AdamW for an optimizer")
    # MisconfigurationException: Lightning's refusals; ModuleNotFoundError: an accelerator or logger whose
    # package is missing (trainer.accelerator=tpu needs torch_xla).
    if isinstance(cause, ValueError | TypeError | MisconfigurationException | ModuleNotFoundError):
        return UserError(f"{group}: {cause}")
    return error


def instantiate_all(group: Mapping | None, name: str) -> list[Any]:
    """Every entry of a group like callbacks/logger (`name`) that has a _target_."""
    return [build(entry, f"{name}.{key}") for key, entry in (group or {}).items()
            if isinstance(entry, Mapping) and "_target_" in entry]
