"""Settings that fit the data (nameorigin.training.sizing): the rule's tiers, and a real run's picks in its log and
card, with what the command line set kept as set."""

from __future__ import annotations

import re

import pytest
import torch
from omegaconf import OmegaConf

from nameorigin.training.sizing import KEYS, TIERS, picks_for, rule, tier_for


def picks_of(train_pairs: int, labels: int = 18, soft: bool = False) -> dict:
    return {pick.key: pick.value for pick in rule(train_pairs, labels, soft)}


def test_the_18_language_corpus_gets_its_tuned_default():
    assert picks_of(14_402) == {
        "model.hidden_size": 256, "model.directions": 1, "model.impl": "bptt", "data.batch_size": 256,
        "trainer.max_epochs": 12, "model.optimizer.lr": 6e-3, "model.ngram_buckets": 65536, "model.ngram_max": 4,
        "model.dropout": 0.3, "model.label_smoothing": 0.1, "trainer.val_check_interval": 1.0}


def test_only_a_large_table_validates_within_its_epochs():
    assert [picks_of(n)["trainer.val_check_interval"] for n in (10_000, 100_000, 900_000)] == [1.0, 1.0, 0.25]


@pytest.mark.parametrize("pairs, tier", [(1, "small"), (50_000, "small"), (50_001, "medium"), (300_000, "medium"),
                                         (300_001, "large"), (890_666, "large")])
def test_tiers_cover_every_size_at_their_bounds(pairs, tier):
    assert tier_for(pairs).name == tier
    assert set(picks_of(pairs)) == set(KEYS.values())


def test_larger_tables_get_more_capacity_and_fewer_epochs():
    small, medium, large = (picks_of(n, labels=175) for n in (10_000, 100_000, 900_000))
    assert small["data.batch_size"] <= medium["data.batch_size"] < large["data.batch_size"]
    assert small["trainer.max_epochs"] > medium["trainer.max_epochs"] > large["trainer.max_epochs"]
    assert small["model.ngram_buckets"] < medium["model.ngram_buckets"] < large["model.ngram_buckets"]
    assert picks_of(900_000, labels=2)["model.ngram_buckets"] == 2**16  # few labels: the small head
    assert small["model.directions"] == medium["model.directions"] == large["model.directions"] == 1
    assert [tier.up_to for tier in TIERS] == sorted(tier.up_to for tier in TIERS)


def test_share_targets_are_not_smoothed_and_many_labels_shrink_the_ngram_table():
    assert picks_of(10_000, soft=True)["model.label_smoothing"] == 0.0
    assert picks_of(900_000, labels=175)["model.ngram_buckets"] == 2**18  # 46M weights: under the limit
    assert picks_of(900_000, labels=175)["trainer.max_epochs"] == 2  # NaNa: validation peaks within two epochs
    assert picks_of(900_000, labels=2)["trainer.max_epochs"] == 10
    assert picks_of(900_000, labels=1000)["model.ngram_buckets"] == 2**16  # halved twice: 65.5M weights
    why = {pick.key: pick.why for pick in rule(900_000, 1000, False)}["model.ngram_buckets"]
    assert "halved" in why and "1000 labels" in why


def test_only_nulls_are_filled():
    cfg = OmegaConf.create({"model": {"hidden_size": None, "dropout": 0.5, "optimizer": {"lr": None}},
                            "data": {"batch_size": 8}, "trainer": {"max_epochs": None}})
    before = OmegaConf.to_yaml(cfg)
    made = picks_for(cfg, 100_000, 5, False)
    assert {pick.key: pick.value for pick in made} == {"model.hidden_size": 256, "model.optimizer.lr": 3e-3,
                                                        "trainer.max_epochs": 6}
    assert OmegaConf.to_yaml(cfg) == before  # only read: the run's settings take the picks


def test_a_run_says_what_the_data_picked_and_keeps_what_it_was_given(trained):
    run, _, _ = trained  # trained with TINY: hidden size, batch size and epochs given on the command line
    log = (run / "train.log").read_text()
    (line,) = [line for line in log.splitlines() if "picked from the data" in line]
    picked = dict(re.findall(r"([a-z_.]+)=([\w.]+)", line))
    assert picked == {"model.directions": "1", "model.impl": "bptt", "model.optimizer.lr": "0.006",
                      "model.ngram_buckets": "65536", "model.ngram_max": "4", "model.dropout": "0.3",
                      "model.label_smoothing": "0.1", "trainer.val_check_interval": "1.0"}
    assert "small tier" in line
    card = (run / "MODEL_CARD.md").read_text()
    assert "Picked from the data" in card and "`model.dropout=0.3`" not in card and "model.dropout=0.3" in card
    config = torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)["hyper_parameters"]["config"]
    assert (config["hidden_size"], config["directions"], config["dropout"]) == (32, 1, 0.3)
