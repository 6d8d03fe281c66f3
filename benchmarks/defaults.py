"""The settings an output of the default model depends on, kept with it so the docs cannot show it once they change.

A result recorded with `benchmarks.record --defaults` keeps today's composed settings of `python train.py` (the
default run) and of `make pretrain` (which builds the starting point that run tries), flattened to dotted keys.
`benchmarks.figures` compares them with the settings composed from conf/ when it writes a page (cog, so `make
lint`): a setting whose default changed since the recording makes the page fail until the result is recorded
again. Only settings both sides have are compared, so a setting added later leaves earlier results current.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# What each recorded output depends on: the default run, and the pretraining that builds its starting point.
RUNS = {"default": [], "pretraining": ["experiment=surnames_pretrain"]}


class StaleResult(Exception):
    """A result recorded under defaults that have changed since."""


def current(conf: Path = ROOT / "conf") -> dict[str, dict[str, Any]]:
    """Today's composed settings of each run in RUNS, from `conf` (Hydra's own section left out)."""
    text = "\0".join(f"{path}\0{path.read_text(encoding='utf-8')}" for path in sorted(conf.rglob("*.yaml")))
    return composed(conf, hashlib.sha256(text.encode()).hexdigest())


@functools.cache
def composed(conf: Path, digest: str) -> dict[str, dict[str, Any]]:
    """current() for one state of conf/ (`digest`: its files' text), composed once per process."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from nameorigin.config import flat_settings, register

    register()  # the typed schemas, as train.py registers them before composing
    settings = {}
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        for run, overrides in RUNS.items():
            settings[run] = flat_settings(OmegaConf.to_container(compose("train", overrides=overrides),
                                                    resolve=False))
    return settings


def changes(recorded: dict[str, dict[str, Any]], conf: Path = ROOT / "conf") -> list[str]:
    """The settings whose default differs from the recorded one ("default: model.hidden_size 256 -> 128")."""
    today = current(conf)
    return [f"{run}: {key} {value!r} -> {today[run][key]!r}" for run, values in recorded.items()
            for key, value in values.items() if run in today and key in today[run] and today[run][key] != value]


def check(name: str, result: dict, conf: Path = ROOT / "conf") -> None:
    """Refuse a result recorded under other defaults: its file, what changed, and the command to record it again."""
    if "defaults" not in result or not conf.is_dir():
        return
    changed = changes(result["defaults"], conf)
    if changed:
        raise StaleResult(f"docs/results/{name}.json was recorded under other defaults ({'; '.join(changed[:3])}"
                          f"{'; ...' if len(changed) > 3 else ''}): record it again with `python -m benchmarks.record "
                          f"{name} --defaults -- {result['command']}`")
