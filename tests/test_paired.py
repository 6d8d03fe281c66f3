"""The paired comparison with the n-gram baseline: its statistics, and nameorigin evaluate --baseline on a real
(tiny) checkpoint."""

from __future__ import annotations

import csv
import json
import re

import pytest
import torch
from conftest import NAMEORIGIN, ROOT, run_in_process

from nameorigin.analysis.evaluate import checkpoint_splits, evaluate
from nameorigin.analysis.paired import compare_with_baseline
from nameorigin.evaluation.baselines import fit_tfidf_baseline
from nameorigin.evaluation.margin import bootstrap_margin, margin_line, mcnemar_p
from nameorigin.serving.predict import Predictor

PREDICT = str(ROOT / "scripts" / "predict.py")


def test_mcnemar_exact_p_values():
    assert mcnemar_p(10, 0) == pytest.approx(2 * 0.5**10)  # all ten disagreements one way
    assert mcnemar_p(0, 10) == mcnemar_p(10, 0)
    assert mcnemar_p(7, 3) == pytest.approx(2 * (1 + 10 + 45 + 120) / 1024)
    assert mcnemar_p(5, 5) == 1.0 and mcnemar_p(0, 0) == 1.0


def test_bootstrap_interval_matches_resampling_the_names():
    generator = torch.Generator().manual_seed(3)
    first = torch.rand(1500, generator=generator) < 0.85
    second = torch.where(torch.rand(1500, generator=generator) < 0.9, first, ~first)
    low, high = bootstrap_margin(first, second, samples=20_000)
    rows = torch.randint(0, 1500, (20_000, 1500), generator=generator)
    margins = first[rows].double().mean(1) - second[rows].double().mean(1)
    naive_low, naive_high = torch.quantile(margins, torch.tensor([0.025, 0.975], dtype=torch.double)).tolist()
    assert low == pytest.approx(naive_low, abs=2e-3) and high == pytest.approx(naive_high, abs=2e-3)
    assert low < (first.double().mean() - second.double().mean()) < high
    assert bootstrap_margin(torch.ones(50, dtype=torch.bool), torch.zeros(50, dtype=torch.bool)) == (1.0, 1.0)
    with pytest.raises(ValueError, match="equally long"):
        bootstrap_margin(first, second[:-1])


@pytest.mark.slow
def test_predict_compares_the_checkpoint_with_the_baseline_name_by_name(trained):
    run, corpus, _ = trained
    checkpoint = run / "checkpoints" / "refit.ckpt"
    predictor = Predictor.from_checkpoint(checkpoint)
    splits = checkpoint_splits(predictor, corpus)
    # The model trained on train + val (the refit), so the baseline it is compared with does too.
    ours, baseline = evaluate(predictor, corpus), fit_tfidf_baseline(splits, refit=True)
    result = compare_with_baseline(predictor, corpus)
    assert result["size"] == len(splits["test"]) == len(ours["correct"]) == len(baseline["test_predictions"])
    assert result["model_acc"] == ours["accuracy"] and result["baseline_acc"] == baseline["test_acc"]
    # The margin is exactly what the disagreements say, and the interval holds it.
    assert result["margin"] == pytest.approx((result["only_model"] - result["only_baseline"]) / result["size"])
    assert result["interval"][0] <= result["margin"] <= result["interval"][1]
    assert result["p"] == mcnemar_p(result["only_model"], result["only_baseline"])

    shown = run_in_process([NAMEORIGIN, "evaluate", str(checkpoint), str(corpus), "--baseline", "lr"], cwd=run)
    assert shown.returncode == 0, shown.stderr[-2000:]
    # One formatter: the run's margin line, for the comparison fitted now.
    assert f"fitted now: {margin_line(result)}\n" in shown.stdout
    margin = re.search(r"fitted now: ([+-]\d+\.\d+) points", shown.stdout)
    assert margin and float(margin.group(1)) == pytest.approx(100 * result["margin"], abs=0.006)
    assert f"n-gram LR (C={baseline['C']:g}; refitted on train + validation, as the model was, " \
           f"{baseline['test_acc']:.4f} on the same" in shown.stdout
    best = run_in_process([NAMEORIGIN, "evaluate", str(run / "checkpoints" / "best.ckpt"), str(corpus),
                           "--baseline", "lr"], cwd=run)
    assert best.returncode == 0 and "n-gram LR (C=" in best.stdout and "refitted" not in best.stdout


def test_baseline_is_evaluates_not_predicts(trained):
    run, _, _ = trained
    result = run_in_process([PREDICT, str(run / "checkpoints" / "best.ckpt"), "--baseline"], cwd=run)
    assert result.returncode == 2 and "No such option: --baseline" in result.stderr
    assert "Traceback" not in result.stderr


def test_precision_at_k_sets_and_the_hashed_baseline_on_the_same_pairs(trained):
    """precision@K counts each test pair once, as name2nat does; --baseline ngram is scored on the same pairs."""
    run, corpus, _ = trained
    checkpoint = run / "checkpoints" / "refit.ckpt"
    predictor = Predictor.from_checkpoint(checkpoint)
    test = checkpoint_splits(predictor, corpus)["test"]
    ours = evaluate(predictor, corpus)
    at = ours["precision_at"]
    assert list(at) == [1, 2, 3, 4] and at[1] == pytest.approx(ours["accuracy"]) and at[4] == 1.0  # 4 labels
    assert all(at[k] <= at[k + 1] for k in (1, 2, 3)) and 0 <= ours["ece"] < 0.5
    answers = predictor.predict([name for name, _ in test], coverage=0.9, abstain=False)
    covered = [label in answer.prediction_set for answer, (_, label) in zip(answers, test, strict=True)]
    assert ours["set_coverage"] == pytest.approx(sum(covered) / len(test))
    assert ours["set_size"] == pytest.approx(sum(len(a.prediction_set) for a in answers) / len(test))
    top2 = [label in [lang for lang, _ in answer.predictions[:2]] for answer, (_, label) in
            zip(predictor.predict([name for name, _ in test], top_k=2, abstain=False), test, strict=True)]
    assert at[2] == pytest.approx(sum(top2) / len(test))

    result = compare_with_baseline(predictor, corpus, ours=ours, kind="ngram")
    assert result["setting"].startswith("penalty=") and result["trained_on"] == "train+val"
    assert result["baseline_precision_at"][1] == pytest.approx(result["baseline_acc"])
    assert result["margin"] == pytest.approx((result["only_model"] - result["only_baseline"]) / result["size"])
    shown = run_in_process([NAMEORIGIN, "evaluate", str(checkpoint), str(corpus), "--baseline", "ngram"], cwd=run)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert f"precision@K  1: {at[1]:.4f}  2: {at[2]:.4f}" in shown.stdout and "90% sets  coverage" in shown.stdout
    assert f"over the hashed n-gram softmax ({result['setting']}; refitted" in shown.stdout
    assert f"precision@1-4 {' '.join(f'{at[k]:.4f}' for k in (1, 2, 3, 4))} vs " \
           f"{result['baseline_precision_at'][1]:.4f} " in shown.stdout
    as_json = run_in_process([NAMEORIGIN, "evaluate", str(checkpoint), str(corpus), "--baseline", "ngram", "--format",
                              "json"], cwd=run)
    assert as_json.returncode == 0, as_json.stderr[-2000:]
    report = json.loads(as_json.stdout)
    assert report["accuracy"] == pytest.approx(ours["accuracy"]) and report["baseline"]["kind"] == "ngram"
    assert report["baseline"]["margin"] == pytest.approx(result["margin"])
    assert report["baseline"]["baseline_precision_at"]["1"] == pytest.approx(result["baseline_acc"])


def test_the_hashed_baseline_scores_a_two_label_table(monkeypatch):
    """A two-label table (the margin of a first-name -> gender run): precision@K and the predictions come out per
    label; the penalty is picked on validation from the ladder. Past the full fit's size the batch fit stands in,
    its epochs picked on validation."""
    from nameorigin.evaluation.baselines import fit_hashed_baseline
    from nameorigin.model import ngram_linear

    names = {"F": ["Anna", "Maria", "Sofia", "Julia", "Elena", "Laura", "Clara", "Paula"],
             "M": ["Mark", "Peter", "John", "Frank", "Oscar", "Hugo", "Ivan", "Paul"]}
    pairs = [(n + suffix, label) for label, group in names.items() for n in group for suffix in ("", "x", "y")]
    splits = {"train": pairs[::3] + pairs[1::3], "val": pairs[2::6], "test": pairs[5::6]}
    result = fit_hashed_baseline(splits)
    assert len(result["test_predictions"]) == len(splits["test"]) and set(result["test_predictions"]) <= {"F", "M"}
    assert result["precision_at"][1] == pytest.approx(result["test_acc"]) and result["precision_at"][2] == 1.0
    assert result["setting"] == "penalty=0.001" and result["val_acc"] > 0.5  # 32 names: the ladder's strongest end
    monkeypatch.setattr(ngram_linear, "FIT_LIMIT", 0)
    batched = fit_hashed_baseline(splits, refit=True)
    assert batched["setting"].startswith("epochs=") and batched["trained_on"] == "train+val"
    assert batched["precision_at"][1] == pytest.approx(batched["test_acc"]) and batched["test_acc"] >= 0.5


def test_the_nine_runs_pooled_lead_resamples_each_splits_names_once_for_its_runs():
    """benchmarks.seeds: the mean of the runs' leads, its interval from resampling each split's test names with one
    draw shared by that split's runs. Runs that agree with the baseline lead by 0 with no spread; a lead measured on
    shared names is as uncertain as one run's, not a third as uncertain."""
    import numpy as np

    from benchmarks.seeds import pooled

    rng = np.random.default_rng(0)
    baseline = {split: rng.random(400) < 0.8 for split in range(3)}
    same = {split: [baseline[split].copy() for _ in range(3)] for split in range(3)}
    assert pooled(same, baseline, samples=500) == (0.0, [0.0, 0.0])
    better = {split: [baseline[split] | (rng.random(400) < 0.1) for _ in range(1)] * 3 for split in range(3)}
    mean, (low, high) = pooled(better, baseline, samples=2000)
    one_run = {split: rows[:1] for split, rows in better.items()}
    _, (one_low, one_high) = pooled(one_run, baseline, samples=2000)
    assert 0 < low < mean < high and abs((high - low) - (one_high - one_low)) < 0.2 * (one_high - one_low)


def test_the_runs_margin_ranks_both_sides_when_the_baseline_ranks():
    """A run on a table past HASHED_PAST states precision@K of the model beside the hashed baseline's: a pair counts
    at K when its label is among the model's top K logits."""
    import torch

    from nameorigin.evaluation.margin import ranked_precision

    logits = torch.tensor([[3.0, 2.0, 1.0], [1.0, 3.0, 2.0], [2.0, 1.0, 3.0], [1.0, 2.0, 3.0]])
    truth = ["a", "c", "b", "c"]  # ranks 0, 1, 2, 0
    result = ranked_precision(logits, truth, ["a", "b", "c"], {"precision_at": {1: 0.25, 2: 0.5, 3: 1.0}})
    assert result["model_precision_at"] == {"1": 0.5, "2": 0.75, "3": 1.0}  # keys as the JSON gives them back
    assert result["baseline_precision_at"] == {"1": 0.25, "2": 0.5, "3": 1.0}


def test_the_margin_is_stated_over_the_stronger_baseline_on_validation(monkeypatch):
    """The run's own baseline against the tuned TF-IDF LR: the higher validation accuracy is stated, the other kept
    beside it; a tie keeps the run's own; past LR_PAST the LR is not fitted."""
    from nameorigin.evaluation import margin

    stems = (("kowal", "Polish"), ("nakam", "Japanese"), ("smith", "English"))
    tails = ("a", "ski", "ura", "son", "i", "o", "er", "y", "an", "ek")
    pairs = [(f"{stem}{tail}", lang) for stem, lang in stems for tail in tails]
    splits = {"train": pairs[::2], "val": pairs[1::4], "test": pairs[3::4]}
    lr = margin.fitted_baseline("lr", splits, refit=False)

    def own(val_acc: float) -> dict:
        return {"setting": "penalty=1e-05", "val_acc": val_acc, "test_acc": 0.5}

    kind, stated = margin.stronger_on_validation("linear_part", own(lr["val_acc"] - 0.01), splits, refitted=False)
    assert kind == "lr" and stated["setting"] == lr["setting"]
    assert stated["weaker"] == {"kind": "linear_part", "setting": "penalty=1e-05", "val_acc": lr["val_acc"] - 0.01,
                                "test_acc": 0.5}
    kind, stated = margin.stronger_on_validation("linear_part", own(lr["val_acc"]), splits, refitted=False)
    assert kind == "linear_part" and stated["weaker"]["kind"] == "lr" and stated["weaker"]["setting"] == lr["setting"]
    monkeypatch.setattr(margin, "LR_PAST", len(splits["train"]) * 3 - 1)
    assert margin.stronger_on_validation("ngram", own(0.0), splits, refitted=False) == ("ngram", own(0.0))


def test_baseline_strength_scores_both_baselines_on_a_tables_sample(tmp_path):
    """benchmarks.baseline_strength on a small table: a seeded sample, split as a run splits it, and the linear
    part and the LR each picked on validation and read on the same test names."""
    from conftest import write_parts_table

    from benchmarks.baseline_strength import measure

    table = write_parts_table(tmp_path / "parts.csv", per_label=60)
    overrides = ["data=table", f"data.path={table}", "data.name_column=given", "data.label_column=origin"]
    result = measure(150, overrides, tmp_path / "sample")
    sampled = (tmp_path / "sample" / "parts_150.csv").read_text().splitlines()[1:]
    assert len(sampled) == 150 and 0.9 * 150 <= sum(result["pairs"].values()) <= 150  # less duplicates' rows
    assert result["labels"] >= 2
    for side in ("linear_part", "lr"):
        assert 0 < result[side]["val_acc"] <= 1 and 0 < result[side]["test_acc"] <= 1
    assert result["test_gap"] == pytest.approx(result["linear_part"]["test_acc"] - result["lr"]["test_acc"])
    assert result["lr"]["setting"].startswith("C=")
    # A table of shares (first name -> gender's kind) has no label column to drop rare labels by.
    with table.open(newline="") as f:
        rows = list(csv.DictReader(f))
    shares = tmp_path / "shares.csv"
    first = {row["given"]: 0.9 if row["origin"] in ("Irish", "Italian") else 0.2 for row in rows}
    with shares.open("w", newline="") as f:
        csv.writer(f).writerows([["given", "A", "B"], *[[name, a, round(1 - a, 2)] for name, a in first.items()]])
    result = measure(150, ["data=table", f"data.path={shares}", "data.name_column=given", "data.share_columns=[A,B]"],
                     tmp_path / "sample")
    assert result["labels"] == 2 and 0 < result["linear_part"]["test_acc"] <= 1


def test_the_lr_grid_fits_the_same_models_side_by_side_as_in_turn(monkeypatch):
    """fit_grid's processes (past PARALLEL_PAST names) give the very models its one-thread loop gives."""
    import numpy as np

    from nameorigin.evaluation import baselines

    tails = ("a", "ski", "ura", "son", "er")
    names = [f"{stem}{tail}" for stem in ("kowal", "nakam", "smith", "dubois") for tail in tails]
    labels = [name[:2] for name in names]
    features = baselines.tfidf_ngrams().fit_transform(names)
    in_turn = baselines.fit_grid(features, labels)
    monkeypatch.setattr(baselines, "PARALLEL_PAST", 0)
    side_by_side = baselines.fit_grid(features, labels)
    assert [m.C for m in side_by_side] == list(baselines.LR_GRID)
    for one, other in zip(in_turn, side_by_side, strict=True):
        assert np.array_equal(one.coef_, other.coef_) and np.array_equal(one.intercept_, other.intercept_)
