"""The validation and test names of other runs, found by composing each run's settings and splitting its data as
that run would: what the pretraining leaves out (`data.leave_out_of`), so that no figure of those runs is read on a
name the starting point learnt from."""

from __future__ import annotations

import logging
from contextlib import nullcontext
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from nameorigin.base.errors import UserError
from nameorigin.base.textnorm import variant_key
from nameorigin.fit.instantiate import build

log = logging.getLogger(__name__)
CONFIG_DIR = Path(__file__).resolve().parents[3] / "conf"


def held_out_elsewhere(runs: list[str]) -> dict[str, list[str]]:
    """Per run (a string of train.py overrides), the spelling-variant keys of its validation and test names. A
    run whose table is not there is skipped, and the log says how to include it."""
    found: dict[str, list[str]] = {}
    composing = nullcontext() if GlobalHydra.instance().is_initialized() else \
        initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3")
    with composing:
        for run in runs:
            cfg = compose(config_name="train", overrides=run.split())
            try:
                datamodule = build(cfg.data, f"data.leave_out_of: {run}")
                datamodule.setup("fit")
            except UserError as missing:
                log.info("data.leave_out_of: %s is not left out (%s)", run, missing)
                continue
            names = [name for split in ("val", "test") for name, _ in datamodule.manifest()["splits"][split]]
            found[run] = sorted({variant_key(name) for name in names})
            log.info("data.leave_out_of: %s holds %d validation and test names (%d spelling variants)", run,
                     len(set(names)), len(found[run]))
    return found
