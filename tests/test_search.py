"""The budgeted search on the validation split (nameorigin.training.search): the rule's picks are its first
candidate, a planted better setting is found within the budget, the candidates reach train.log and the card, the
user's own space (hparams_search=optuna) runs on the current Optuna, and bad settings are one line."""

from __future__ import annotations

import csv

import pytest
import torch
from conftest import TINY, run_dirs, train, train_refused, write_corpus


def tiny_table(tmp_path):
    corpus = write_corpus(tmp_path / "names")
    path = tmp_path / "people.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["name", "language"])
        for file in sorted(corpus.glob("*.txt")):
            writer.writerows([name, file.stem] for name in file.read_text().splitlines())
    return path


def searched_run(tmp_path, *overrides):
    result = train(tmp_path, "data=table", f"data.path={tiny_table(tmp_path)}", "data.label_column=language", *TINY,
                   "margin.enabled=false", "refit.enabled=false", *overrides)
    assert result.returncode == 0, result.stderr[-2000:]
    (run,) = run_dirs(tmp_path)
    return run, torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)


@pytest.mark.slow
def test_the_search_finds_a_planted_better_setting_within_its_budget(tmp_path):
    # A learning rate of 1e-5 learns nothing in three epochs; 1e-2 learns the endings.
    run, checkpoint = searched_run(tmp_path, "trainer.max_epochs=3", "search.budget_minutes=1",
                                   "search.space={model.optimizer.lr:[0.00001,0.01]}", "search.max_trials=4")
    candidates = checkpoint["search"]
    assert {c["settings"]["model.optimizer.lr"] for c in candidates} == {1e-5, 1e-2}
    slow = max(c["val_acc"] for c in candidates if c["settings"]["model.optimizer.lr"] == 1e-5)
    fast = max(c["val_acc"] for c in candidates if c["settings"]["model.optimizer.lr"] == 1e-2)
    assert fast > slow + 0.2
    assert checkpoint["hyper_parameters"]["config"]["optimizer"]["lr"] == 1e-2  # the run trained with the pick
    assert len(candidates) <= 4  # search.max_trials
    log = (run / "train.log").read_text()
    assert log.count("search: candidate ") == len(candidates) and "search: picked candidate" in log
    card = (run / "MODEL_CARD.md").read_text()
    assert "## Settings searched on validation" in card and "searched on validation: candidate" in card


@pytest.mark.slow
def test_the_budget_stops_a_candidate_mid_training_and_starts_no_other(tmp_path):
    # A budget shorter than the first candidate's five tiny epochs: it is stopped within its first epochs, none other
    # starts, and the run keeps the rule's settings (a partial figure is never the pick).
    run, checkpoint = searched_run(tmp_path, "trainer.max_epochs=5", "search.budget_minutes=0.001",
                                   "search.max_trials=4")
    (only,) = checkpoint["search"]
    assert only["state"] == "stopped at the budget" and only["epochs"] < 5, only
    log = (run / "train.log").read_text()
    assert "search: no candidate finished within" in log and "the rule's settings stay" in log
    assert checkpoint["hyper_parameters"]["config"]["optimizer"]["lr"] == 6e-3  # the small tier's


@pytest.mark.slow
def test_the_rules_picks_are_the_first_candidate(tmp_path):
    _, checkpoint = searched_run(tmp_path, "search.budget_minutes=1", "search.max_trials=1")
    (first,) = checkpoint["search"]
    # TINY gives hidden size and batch on the command line: the rest of the rule's picks are searched.
    assert first["settings"] == {"model.optimizer.lr": 6e-3, "model.dropout": 0.3, "model.label_smoothing": 0.1,
                                 "model.ngram_max": 4, "model.ngram_buckets": 2**16}
    assert first["state"] == "complete" and first["epochs"] == 2


@pytest.mark.slow
def test_reports_within_an_epoch_let_the_pruner_work_on_quarters(tmp_path):
    # A large table's epoch is minutes: four validation reports per epoch, so a candidate's figure is a quarter's.
    run, checkpoint = searched_run(tmp_path, "trainer.max_epochs=1", "search.budget_minutes=1",
                                   "search.max_trials=1", "search.reports_per_epoch=4")
    (first,) = checkpoint["search"]
    assert first["state"] == "complete" and first["epochs"] == 1
    assert "after 1 epochs" in (run / "train.log").read_text()
    assert first["val_acc"] is not None


@pytest.mark.slow
def test_hparams_search_runs_the_users_own_space_on_the_current_optuna(tmp_path):
    import optuna

    assert int(optuna.__version__.split(".")[0]) >= 4
    corpus = write_corpus(tmp_path / "names")
    result = train(tmp_path, "hparams_search=optuna", "search.max_trials=2", f"data.root={corpus}", *TINY,
                   "trainer.max_epochs=1", "margin.enabled=false")
    assert result.returncode == 0, result.stderr[-2000:]
    (run,) = run_dirs(tmp_path)
    candidates = torch.load(run / "checkpoints" / "refit.ckpt", weights_only=True)["search"]
    # model.hidden_size is in the space too, but TINY gives it on the command line, which keeps it as given.
    assert len(candidates) == 2
    assert all(set(c["settings"]) == {"model.optimizer.lr", "model.dropout", "model.cell"} for c in candidates)


@pytest.mark.parametrize(("override", "message"), [
    ("search.space={model.nosuch:[1,2]}", "search.space: model.nosuch is not a setting of this run"),
    ("search.space={model.dropout:{low:0.5,high:0.1}}", "search.space.model.dropout: give a list of choices"),
    ("search.budget_minutes=-1", "search.budget_minutes=-1.0 must be a number of minutes"),
    ("search.reports_per_epoch=0", "search.reports_per_epoch"),
])
def test_bad_search_settings_are_one_line(tiny_corpus, tmp_path, override, message):
    budget = [] if "budget" in override else ["search.budget_minutes=1"]
    result = train_refused(tmp_path, f"data.root={tiny_corpus}", *TINY, *budget, override)
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_on_a_table_with_counts_and_shares_the_search_compares_candidates_on_the_share_of_people_right(tmp_path):
    from test_surnames import max_scalar
    from test_table_shares import gender_table

    table = gender_table(tmp_path / "first.csv")
    result = train(tmp_path, "data=table", f"data.path={table}", "data.name_column=first",
                   "data.share_columns=[F,M]", "data.weight_column=people", *TINY, "margin.enabled=false",
                   "refit.enabled=false", "search.budget_minutes=1", "search.max_trials=1")
    assert result.returncode == 0, result.stderr[-2000:]
    (run,) = run_dirs(tmp_path)
    (first,) = torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)["search"]
    # The candidate trained as the run then did (same settings and seed): its figure is the run's best
    # val/person_acc, not its accuracy.
    person, names = (max_scalar(run / "tensorboard", tag) for tag in ("val/person_acc", "val/acc"))
    assert first["val_acc"] == pytest.approx(person, abs=1e-6) and person != pytest.approx(names, abs=1e-6)
