"""A run's settings are resolved once (nameorigin.training.settings): the composed config is only read, the rule's
and the search's picks go into one read-only value, and every later step (the refit included) reads that value."""

from __future__ import annotations

import pytest
from conftest import TINY, write_corpus
from omegaconf import OmegaConf
from omegaconf.errors import ReadonlyConfigError
from test_config import composed

from nameorigin.config import LEFT_TO_DATA
from nameorigin.training import pipeline
from nameorigin.training.search import DEFAULT_SPACE
from nameorigin.training.settings import RunSettings, changed
from nameorigin.training.sizing import KEYS, TIERS


def test_the_settings_left_to_the_data_are_declared_once():
    """The rule sets every one of them and nothing else; the search's default space draws from them."""
    assert set(KEYS.values()) == set(LEFT_TO_DATA)
    tier_fields = {name for name in TIERS[0].__dataclass_fields__ if name in KEYS}
    assert tier_fields == set(KEYS)
    assert set(DEFAULT_SPACE) <= set(LEFT_TO_DATA)


def test_changed_returns_a_new_read_only_config_and_leaves_its_source_alone():
    cfg = OmegaConf.create({"model": {"hidden_size": None}, "seed": 0})
    new = changed(cfg, {"model.hidden_size": 64, "seed": 3})
    assert (new.model.hidden_size, new.seed) == (64, 3) and (cfg.model.hidden_size, cfg.seed) == (None, 0)
    with pytest.raises(ReadonlyConfigError):
        new.model.hidden_size = 32
    assert changed(new, {"seed": 4}).seed == 4 and new.seed == 3


def test_a_run_resolves_its_settings_once_and_leaves_the_composed_config_as_it_was(tmp_path, monkeypatch):
    """The composed config keeps its nulls after a run with a refit; the settings the run trained and refitted
    with were resolved once, with the rule's picks in them, and nothing could write into them after."""
    corpus = write_corpus(tmp_path / "names", per_language=20)
    cfg = composed(f"data.root={corpus}", *TINY, f"paths.output_dir={tmp_path / 'run'}", "transfer.use=never",
                   "margin.enabled=false", "card.enabled=false", "trainer.max_epochs=1")
    before = OmegaConf.to_yaml(cfg)
    resolved, refitted_with = [], []
    resolve = RunSettings.resolved.__func__

    def counted(cls, *args, **kwargs):
        resolved.append(resolve(cls, *args, **kwargs))
        return resolved[-1]

    monkeypatch.setattr(RunSettings, "resolved", classmethod(counted))
    refit_model = pipeline.refit_model

    def recorded_refit(cfg, model_config, *args, **kwargs):
        refitted_with.append((cfg, model_config))
        return refit_model(cfg, model_config, *args, **kwargs)

    monkeypatch.setattr(pipeline, "refit_model", recorded_refit)
    metrics = pipeline.train(cfg)
    assert metrics["model_checkpoint"].endswith("refit.ckpt")
    assert OmegaConf.to_yaml(cfg) == before and cfg.model.dropout is None and cfg.trainer.val_check_interval is None
    (settings,) = resolved
    assert OmegaConf.is_readonly(settings.cfg)
    assert settings.cfg.model.dropout == 0.3 and settings.model.dropout == 0.3  # the small tier's pick
    assert {pick.key for pick in settings.picks} >= {"model.dropout", "model.optimizer.lr"}
    ((refit_cfg, refit_config),) = refitted_with
    assert refit_cfg is settings.cfg and refit_config is settings.model
