"""Abstaining with a reason, the target prior, and DataFrames: the rule fitted on held-out names and carried to the
refit, every reason through the command, JSON and tables, Bayes' rule and its EM estimate, and predict_frame."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import ROOT, last_scalars, run_in_process

from nameorigin.data.names import NamesDataModule
from nameorigin.fit.module import NameClassifier
from nameorigin.model.charrnn import batch_tokens
from nameorigin.model.novelty import CharTrigrams, ood_score
from nameorigin.serving.predict import Predictor
from nameorigin.serving.prior import estimate_prior, reweight
from nameorigin.training.calibration import fit_abstention

PREDICT = str(ROOT / "scripts" / "predict.py")


def test_the_rule_is_fitted_on_validation_and_carried_to_the_refit(trained):
    run, corpus, _ = trained
    best = torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)
    refit = torch.load(run / "checkpoints" / "refit.ckpt", weights_only=True)
    rule = best["calibration"]["abstention"]
    assert refit["calibration"]["abstention"] == rule  # carried, as the temperature is
    # Refitted here from the same split and best.ckpt's validation logits: the same threshold.
    data = NamesDataModule(root=str(corpus), download=False)
    data.setup()
    model = NameClassifier(**best["hyper_parameters"])
    model.load_state_dict(best["state_dict"])
    model.net.temperature.fill_(1.0)
    logits, _, _ = model.collect_logits(data.whole_split_loader("val"))
    again, _ = fit_abstention(data, logits / best["calibration"]["temperature"], 0.05, 0.5)
    assert again.threshold == pytest.approx(rule["threshold"], abs=1e-5)
    assert again.val_abstained == pytest.approx(rule["val_abstained"]) and rule["val_abstained"] <= 0.1
    # The Predictor, scoring each validation name on its own, finds the same threshold: each name's letters and
    # logits were paired (a sum of one name's novelty and another's energy gives other quantiles).
    served = Predictor.load(run / "checkpoints" / "best.ckpt")
    codes = [served.encode(name)[0] for name, _ in data.splits["val"]]
    energy = torch.empty(len(codes))
    served.probabilities(codes, energy=energy)
    tokens, lengths = batch_tokens(codes, torch.device("cpu"))
    scores = ood_score(served.novelty.score(tokens, lengths), energy, rule["scale"])
    assert float(torch.quantile(scores.double(), 0.05)) == pytest.approx(rule["threshold"], abs=1e-4)
    assert float(scores.mean()) == pytest.approx(0.0, abs=1e-4)  # both parts standardized on these names
    # On the training names' own letters the novelty is higher than on strings of random letters.
    trigrams = CharTrigrams.from_state(rule["novelty"])
    train = data.datasets["train"]
    rng = np.random.default_rng(0)
    noise = torch.from_numpy(rng.integers(2, len(data.vocab), size=train.tokens.shape)).long()
    assert float(trigrams.score(train.tokens.long(), train.lengths).mean()) > float(
        trigrams.score(noise, train.lengths).mean()) + 1
    assert 0 <= last_scalars(run / "tensorboard")["test/abstained"] <= 0.2  # measured on test, by the module


@pytest.mark.slow
def test_every_reason_in_json_text_and_tables(trained, tmp_path):
    run, _, _ = trained
    checkpoint = str(run / "checkpoints" / "refit.ckpt")
    names = ["Kanemoto", "Zzvkzvkzzvkv", "12Ab3", "   ", "Pavlovsky"]
    answers = json.loads(run_in_process([PREDICT, checkpoint, *names, "--format", "json", "--coverage", "0.95",
                                     "--max-set-size", "1"], cwd=tmp_path).stdout)
    codes = {a["name"]: a.get("reason_code") for a in answers}
    assert codes["12Ab3"] == "unknown_characters" and codes["   "] == "unusable_input"
    assert codes["Zzvkzvkzzvkv"] in ("out_of_distribution", "large_set")
    for answer in answers:
        assert answer["abstained"] == (answer.get("reason_code") is not None)
        assert answer["abstained"] == ("reason" in answer)
        if answer.get("reason_code") not in (None, "unusable_input"):
            assert answer["predictions"], answer  # the scores are still given
    calm = json.loads(run_in_process([PREDICT, checkpoint, "Zzvkzvkzzvkv", "12Ab3", "--format", "json", "--no-abstain"],
                                 cwd=tmp_path).stdout)
    assert [a["abstained"] for a in calm] == [False, False]
    text = run_in_process([PREDICT, checkpoint, "12Ab3"], cwd=tmp_path).stdout
    assert "abstained (unknown_characters):" in text
    table = tmp_path / "people.csv"
    table.write_text("surname\nKanemoto\n12Ab3\n\n", encoding="utf-8")
    rows = run_in_process([PREDICT, checkpoint, "--file", str(table), "--column", "surname"], cwd=tmp_path).stdout
    lines = rows.splitlines()
    assert lines[0].endswith("pred_abstained,pred_reason_code,pred_reason") and lines[2].split(",")[-3] == "true", \
        rows


def test_bayes_rule_divides_out_the_trained_prior_and_em_finds_a_mix():
    torch.manual_seed(0)
    trained, target = torch.tensor([0.7, 0.2, 0.1]), torch.tensor([0.2, 0.3, 0.5])
    probs = torch.softmax(torch.randn(6, 3), -1)
    expected = probs * target / trained
    torch.testing.assert_close(reweight(probs, trained, target), expected / expected.sum(-1, keepdim=True))
    torch.testing.assert_close(reweight(probs, trained, trained), probs)
    # A population drawn at a known mix, scored by an exact Bayes classifier trained on another mix.
    likelihood = torch.tensor([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]])  # p(x | y), 3 kinds of x
    kinds = torch.multinomial(target @ likelihood, 20_000, replacement=True, generator=torch.Generator().manual_seed(1))
    posterior = likelihood.t()[kinds] * trained
    posterior = posterior / posterior.sum(-1, keepdim=True)
    assert float((estimate_prior(posterior, trained) - target).abs().sum() / 2) < 0.02


def test_the_prior_divided_out_is_the_served_probabilities_mean_on_validation(trained):
    run, corpus, _ = trained
    best = Predictor.load(run / "checkpoints" / "best.ckpt")
    refit = Predictor.load(run / "checkpoints" / "refit.ckpt")
    data = NamesDataModule(root=str(corpus), download=False)
    data.setup()
    held_out = best.probabilities([best.encode(name)[0] for name, _ in data.splits["val"]])
    torch.testing.assert_close(best.trained_prior, held_out.mean(0), atol=1e-5, rtol=0)
    torch.testing.assert_close(refit.trained_prior, best.trained_prior)  # carried, as the temperature is
    # So EM on the names it was measured on (the training population's mix) stays there; the label shares would
    # not be a fixed point unless the probabilities were calibrated label by label.
    torch.testing.assert_close(estimate_prior(held_out, best.trained_prior), best.trained_prior, atol=1e-5, rtol=0)
    assert not torch.allclose(best.trained_prior, best.training_shares, atol=1e-3)
    # Without calibration (and for the uncalibrated probabilities) the shares are what they carry.
    raw = Predictor.load(run / "checkpoints" / "best.ckpt", calibrated=False)
    torch.testing.assert_close(raw.trained_prior, best.training_shares)


@pytest.mark.slow
def test_a_table_gets_one_estimated_prior_for_all_its_rows(trained, tmp_path):
    from nameorigin.serving.table import CHUNK_ROWS

    run, corpus, _ = trained
    checkpoint = str(run / "checkpoints" / "refit.ckpt")
    predictor = Predictor.load(checkpoint)
    data = NamesDataModule(root=str(corpus), download=False)
    data.setup()
    by_label: dict[str, list[str]] = {}
    for name, label in data.splits["test"]:
        by_label.setdefault(label, []).append(name)
    first, second = sorted(by_label)[:2]
    # One label's names fill the first chunk, another's the rest: an estimate per chunk would see two mixes.
    names = [by_label[first][i % len(by_label[first])] for i in range(CHUNK_ROWS)]
    names += [by_label[second][i % len(by_label[second])] for i in range(CHUNK_ROWS // 2)] + ["", "NaN"]
    table = tmp_path / "people.csv"
    table.write_text("surname\n" + "\n".join(f'"{name}"' for name in names) + "\n", encoding="utf-8")
    result = run_in_process([PREDICT, checkpoint, "--file", str(table), "--column", "surname", "--prior", "estimate",
                         "--no-abstain"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    found = predictor.answer(names[:-1], top_k=1, abstain=False, prior="estimate")  # "NaN" would be a name here
    expected = sorted(zip(predictor.labels, found.estimated_prior.tolist(), strict=True), key=lambda x: -x[1])
    whole = found.predictions()
    assert result.stderr.strip().splitlines()[-1] == "estimated prior: " + ", ".join(
        f"{label} {share:.3f}" for label, share in expected)
    rows = result.stdout.splitlines()[1:]
    assert len(rows) == len(names)
    for row in (0, CHUNK_ROWS - 1, CHUNK_ROWS, len(names) - 3):  # both sides of the chunk boundary
        label, probability = whole[row].predictions[0]
        cells = rows[row].split(",")
        assert cells[1] == label and float(cells[2]) == pytest.approx(probability, abs=1e-5), (row, cells)


def test_the_prior_check_draws_the_mix_asked_and_refuses_an_unknown_one(trained, tmp_path, capsys):
    from benchmarks.prior_check import main

    run, corpus, _ = trained
    checkpoint = str(run / "checkpoints" / "refit.ckpt")
    assert main([checkpoint, "--corpus", str(corpus), "--mix", "swapped", "--size", "400"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert sum(report["drawn"]) == pytest.approx(1.0) and report["size"] == 400
    for key in ("total_variation", "total_variation_with_the_temperature_fitted_on_test"):
        assert 0 <= report[key] <= report["total_variation_of_the_trained_prior"] + 0.05, report
    for args, message in [(["--mix", "estimate"], "the mix drawn must be known"), (["--size", "0"], "at least one")]:
        with pytest.raises(SystemExit) as exited:
            main([checkpoint, "--corpus", str(corpus), *args])
        out, err = capsys.readouterr()
        assert exited.value.code == 2 and message in err and not out, err


@pytest.mark.slow
def test_priors_and_coverage_refusals_exit_2_with_the_fix(trained, tmp_path, capsys):
    from nameorigin.cli.predict import main  # in this process: the command's own parsing and refusals

    run, _, _ = trained
    checkpoint = str(run / "checkpoints" / "refit.ckpt")
    predictor = Predictor.load(checkpoint)
    good = tmp_path / "prior.json"
    good.write_text(json.dumps({label: 1.0 for label in predictor.labels}), encoding="utf-8")
    uniform, filed = (predictor.predict(["Kanemoto", "Pavlovsky"], prior=prior) for prior in ("uniform", str(good)))
    assert [a.as_dict() for a in uniform] == [a.as_dict() for a in filed]
    listed = tmp_path / "names.txt"
    listed.write_text("Kanemoto\nPavlovsky\n" * 50, encoding="utf-8")  # the fewest names EM is given: 100
    estimated = run_in_process([PREDICT, checkpoint, "--file", str(listed), "--prior", "estimate"], cwd=tmp_path)
    assert estimated.returncode == 0 and estimated.stderr.startswith("estimated prior: ")  # stdout keeps the answers
    assert estimated.stdout.count("Kanemoto") == 50
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"Klingon": 1.0}), encoding="utf-8")
    for args, message in [(["--prior", str(bad)], "Klingon are not labels of this model"),
                          (["--prior", "uniform", "--coverage", "0.9"], "drop one of them"),
                          (["--prior", str(tmp_path / "none.json")], "no such file"),
                          (["--max-set-size", "2"], "use it with coverage"),
                          (["Pavlovsky", "--prior", "estimate"], "at least 100 usable names to estimate a label mix "
                                                                 "from, and got 2")]:
        with pytest.raises(SystemExit) as exited:
            main([checkpoint, "Kanemoto", *args])
        out, err = capsys.readouterr()
        assert exited.value.code == 2 and message in err.strip().splitlines()[-1] and not out, err


def test_predict_frame_keeps_the_index_and_every_row(trained):
    pd = pytest.importorskip("pandas")  # the [frame] extra, which make install includes
    from nameorigin import predict_frame

    run, _, _ = trained
    rng = np.random.default_rng(0)
    base = ["Kanemoto", "Pavlovsky", "Donagh", "Rinelli", "O'Kanemoto"]
    cells = [base[i % 5] for i in range(10_000)]
    for i in rng.choice(10_000, size=500, replace=False):  # 5 % NaN, blank, None and 10,000-character cells
        cells[i] = [np.nan, "", None, "x" * 10_000, "   "][i % 5]
    frame = pd.DataFrame({"surname": cells, "n": range(10_000)}, index=rng.permutation(10_000) + 7)
    scored = predict_frame(frame, "surname", str(run / "checkpoints" / "refit.ckpt"), top_k=2)
    assert list(scored.index) == list(frame.index) and len(scored) == 10_000
    assert list(scored["n"]) == list(frame["n"]) and scored["surname"].equals(frame["surname"])
    blank = frame["surname"].map(lambda c: c is None or (isinstance(c, float) and c != c) or not str(c).strip())
    assert scored.loc[blank, "pred_language"].eq("").all() and scored.loc[blank, "pred_abstained"].all()
    assert set(scored.loc[blank, "pred_reason"]) == {"no usable character after normalization"}
    long = frame["surname"].map(lambda c: isinstance(c, str) and len(c) > 100)
    assert set(scored.loc[long, "pred_reason"]) == {"longer than 64 characters: not one name"}
    answered = ~blank & ~long
    assert scored.loc[answered, "pred_language"].ne("").all() and scored.loc[answered, "pred_probability"].gt(0).all()
