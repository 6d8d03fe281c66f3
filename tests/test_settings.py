"""A run's plan is resolved once (nameorigin.training.plan): the composed config is only read, the rule's and the
search's picks go into one frozen, typed value, and every later step (the refit included) reads that value."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import TINY, write_corpus
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ReadonlyConfigError
from test_config import composed

from nameorigin.config import LEFT_TO_DATA, ModelConfig, TrainConfig
from nameorigin.training import pipeline
from nameorigin.training.plan import RunPlan, changed
from nameorigin.training.search import DEFAULT_SPACE
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


def test_a_run_resolves_its_plan_once_and_leaves_the_composed_config_as_it_was(tmp_path, monkeypatch):
    """The composed config keeps its nulls after a run with a refit; the plan the run trained and refitted with was
    resolved once, typed (no DictConfig after prepare), with the rule's picks in it, and frozen."""
    corpus = write_corpus(tmp_path / "names", per_language=20)
    cfg = composed(f"data.root={corpus}", *TINY, f"paths.output_dir={tmp_path / 'run'}", "transfer.use=never",
                   "margin.enabled=false", "card.enabled=false", "trainer.max_epochs=1")
    before = OmegaConf.to_yaml(cfg)
    resolved, refitted_with = [], []
    resolve = RunPlan.resolved.__func__

    def counted(cls, *args, **kwargs):
        resolved.append(resolve(cls, *args, **kwargs))
        return resolved[-1]

    monkeypatch.setattr(RunPlan, "resolved", classmethod(counted))
    refit_model = pipeline.refit_model

    def recorded_refit(plan, *args, **kwargs):
        refitted_with.append(plan)
        return refit_model(plan, *args, **kwargs)

    monkeypatch.setattr(pipeline, "refit_model", recorded_refit)
    metrics = pipeline.train(cfg)
    assert metrics["model_checkpoint"].endswith("refit.ckpt")
    assert OmegaConf.to_yaml(cfg) == before and cfg.model.dropout is None and cfg.trainer.val_check_interval is None
    (plan,) = resolved
    assert isinstance(plan.settings, TrainConfig) and isinstance(plan.model, ModelConfig)
    assert not any(isinstance(value, DictConfig) for value in vars(plan.settings).values())
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.picks = ()
    assert plan.model.dropout == 0.3  # the small tier's pick
    assert {pick.key for pick in plan.picks} >= {"model.dropout", "model.optimizer.lr"}
    assert refitted_with == [plan] and refitted_with[0] is plan
