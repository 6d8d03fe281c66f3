"""The model's linear part (nameorigin.training.linear_mix) and every run's margin over the n-gram baseline
(nameorigin.evaluation.margin): the linear part alone is the regularized linear model scikit-learn fits, the mixture
is one network of the same shape and never below either part on validation, and the margin reaches the results,
the card, the checkpoint and nameorigin evaluate, or nothing when switched off."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import TINY, run_dirs, train, write_confusable_corpus

from nameorigin.config import NetConfig
from nameorigin.data.names import NamesDataModule
from nameorigin.evaluation.linear_fit import design, fit_alone, fit_linear_model, linear_logits, refit_linear_model
from nameorigin.fit.split_logits import logits_in_order
from nameorigin.model.charrnn import CharRNN
from nameorigin.model.ngram_linear import LinearFit, fit_full
from nameorigin.serving.predict import Predictor
from nameorigin.training.linear_mix import mix_into, pick_mix


@pytest.fixture(scope="module")
def confusable(tmp_path_factory):
    corpus = write_confusable_corpus(tmp_path_factory.mktemp("confusable") / "names", per_language=120)
    data = NamesDataModule(root=str(corpus), download=False)
    data.setup()
    return corpus, data


def test_the_linear_part_alone_is_scikit_learns_logistic_regression_on_the_same_features(confusable):
    from scipy.sparse import csr_matrix
    from sklearn.linear_model import LogisticRegression

    _, data = confusable
    vocab, labels = len(data.vocab), len(data.labels)
    train, val = data.datasets["train"], data.datasets["val"]
    x_train, x_val = design(train, vocab, 4, 4096), design(val, vocab, 4, 4096)
    penalty = 3e-3
    weight, bias = fit_full(x_train, train.targets, None, labels, penalty, iterations=500)
    ours = (x_val @ weight + bias).softmax(-1)

    def scipy(matrix: torch.Tensor) -> csr_matrix:
        return csr_matrix((matrix.values().numpy(), matrix.col_indices().numpy(), matrix.crow_indices().numpy()),
                          shape=tuple(matrix.shape))

    # scikit-learn minimizes C * sum(loss) + |W|^2 / 2, the same optimum as mean(loss) + penalty / 2 |W|^2
    reference = LogisticRegression(C=1 / (penalty * len(train)), max_iter=5000, tol=1e-8)
    reference.fit(scipy(x_train), train.targets.numpy())
    theirs = torch.from_numpy(reference.predict_proba(scipy(x_val))).float()
    our_acc = float((ours.argmax(1) == val.targets).double().mean())
    their_acc = float((theirs.argmax(1) == val.targets).double().mean())
    assert 0.55 < their_acc < 0.95  # a table a linear model gets partly wrong
    assert abs(our_acc - their_acc) <= 0.005 and (ours - theirs).abs().max() < 0.02


def test_the_linear_part_fitted_alone_after_a_refit_picks_its_penalty_before_it(confusable):
    """The margin's baseline where the served model mixed no linear part in (a fine-tuned model): fitted as a run
    that mixes it would, its penalty picked on validation by a fit on train alone, then fitted on train +
    validation with that penalty (never picked on names it was trained on)."""
    corpus, _ = confusable
    data = NamesDataModule(root=str(corpus), download=False)
    data.setup()
    picked = fit_linear_model(data, 4096, 4, soft=False)
    before = fit_alone(data, 4096, 4, soft=False)
    assert before.penalty == picked.penalty and torch.equal(before.weight, picked.weight)
    data.add_validation_to_training()
    after = fit_alone(data, 4096, 4, soft=False)
    refit = refit_linear_model(data, 4096, 4, soft=False, penalty=picked.penalty)
    assert after.penalty == picked.penalty and after.val_acc == picked.val_acc
    assert torch.allclose(after.weight, refit.weight) and not torch.allclose(after.weight, picked.weight)


def test_the_sparse_products_gradient_is_autograds():
    from nameorigin.model.ngram_linear import CountsTimesWeight, transpose

    torch.manual_seed(0)
    dense = (torch.rand(50, 30) < 0.1).float() * torch.randint(1, 3, (50, 30)).float()
    counts = dense.to_sparse_csr()
    weight = torch.randn(30, 4, requires_grad=True)
    grad = torch.randn(50, 4)
    (CountsTimesWeight.apply(weight, counts, transpose(counts)) * grad).sum().backward()
    assert torch.allclose(weight.grad, dense.t() @ grad, atol=1e-5)


def test_the_penalties_fall_as_the_table_grows():
    from nameorigin.model.ngram_linear import penalties_for

    assert penalties_for(14_402) == (1e-3, 3e-4, 1e-4, 3e-5, 1e-5)  # the shipped corpus' training split
    assert penalties_for(446_975) == (3e-5, 1e-5, 3e-6, 1e-6, 3e-7)  # first names -> gender
    assert penalties_for(10) == (1e-3,) and penalties_for(10**12) == (3e-8,)  # past the ladder: its nearest end


def test_the_ladder_stops_two_fits_past_the_best():
    from nameorigin.model.ngram_linear import fit_on_validation

    # Training: n-gram A is always label 0, n-gram B label 1 four times in five; validation is all label 0. The
    # strongest penalty leaves the weights near 0 and the (unpenalized) bias says label 0, all right; every weaker
    # one reads B as label 1, half right.
    features = torch.tensor([[1.0, 0.0]] * 10 + [[0.0, 1.0]] * 10).to_sparse_csr()
    labels = torch.tensor([0] * 10 + [1] * 8 + [0] * 2)
    fitted = fit_on_validation((features, labels, None), (features, torch.zeros(20, dtype=torch.long)), 2,
                               penalties=(1e3, 1e-3, 1e-4, 1e-5, 1e-6))
    assert fitted.penalty == 1e3 and fitted.val_acc == {1e3: 1.0, 1e-3: 0.5, 1e-4: 0.5}


def test_the_ladder_picks_by_the_score_it_is_given():
    from nameorigin.evaluation.baselines import person_weighted_accuracy
    from nameorigin.model.ngram_linear import fit_on_validation

    # The table above, but validation weighs each B name ten times and gives it label 1: by the people behind the
    # names, reading B as label 1 is right, so the weakest penalty that does wins where plain accuracy (label 0
    # everywhere) kept the strongest.
    features = torch.tensor([[1.0, 0.0]] * 10 + [[0.0, 1.0]] * 10).to_sparse_csr()
    labels = torch.tensor([0] * 10 + [1] * 8 + [0] * 2)
    shares, weights = np.eye(2)[[0] * 10 + [1] * 10], np.array([1.0] * 10 + [10.0] * 10)
    fitted = fit_on_validation((features, labels, None), (features, None), 2, penalties=(1e3, 1e-3, 1e-4),
                               score=lambda predicted: person_weighted_accuracy(shares, weights, predicted.numpy()))
    assert fitted.penalty == 1e-3 and fitted.val_acc[1e3] == 10 / 110 and fitted.val_acc[1e-3] == 1.0


def test_the_mixture_is_one_network_of_the_same_shape():
    torch.manual_seed(0)
    net = CharRNN(NetConfig(hidden_size=8, embedding_dim=4, ngram_buckets=64, ngram_max=3), 12, 3).eval()
    torch.nn.init.normal_(net.ngram.weight)
    tokens, lengths = torch.randint(1, 12, (20, 7)), torch.randint(1, 8, (20,))
    dataset = type("Rows", (), {"tokens": tokens, "lengths": lengths, "__len__": lambda self: 20,
                                "rows": lambda self, idx: (idx, tokens[idx], lengths[idx])})()
    part = LinearFit(torch.randn(64, 3), torch.randn(3), 1e-4)
    network, linear = logits_in_order(net, dataset, decided=False), linear_logits(part, dataset, 12, 3)
    mix_into(net, part, 0.3)
    assert torch.allclose(logits_in_order(net, dataset, decided=False), 0.7 * linear + 0.3 * network, atol=1e-5)


def test_the_mix_beats_both_parts_where_they_err_apart_and_prefers_the_network_on_a_tie():
    targets = torch.tensor([0, 1, 2, 0])
    # Each part is wrong on one name, the other right there: the mix is right on all four for 1/3 < w < 0.74.
    network = torch.tensor([[2.0, 0, 0], [0, 0, 1], [0, 0, 1], [1, 0, 0]])
    linear = torch.tensor([[0.0, 1, 0], [0, 2.9, 0], [0, 0, 1], [1, 0, 0]])
    w, accuracy = pick_mix(network, linear, targets)
    assert accuracy == {"linear": 0.75, "network": 0.75, "combined": 1.0}
    assert w == 0.7  # the largest network weight of the grid that is right on all four
    assert pick_mix(network, network, targets)[0] == 1.0


@pytest.mark.slow
def test_a_run_mixes_its_parts_and_states_its_margin_everywhere(confusable, tmp_path, capsys):
    from nameorigin.cli.app import main as nameorigin

    corpus, data = confusable
    result = train(tmp_path, f"data.root={corpus}", *TINY[:3], "trainer.max_epochs=4", *TINY[4:])
    assert result.returncode == 0, result.stderr[-2000:]
    (run,) = run_dirs(tmp_path)
    best = torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)
    mixture = best["linear_part"]
    acc = mixture["val_acc"]
    # best.ckpt's network is the mixture: its validation accuracy is the combined one.
    served = Predictor.load(run / "checkpoints" / "best.ckpt", calibrated=False)
    probs = served.probabilities([served.encode(name)[0] for name, _ in data.splits["val"]])
    truth = torch.tensor([data.labels.index(label) for _, label in data.splits["val"]])
    assert float((probs.argmax(1) == truth).double().mean()) == pytest.approx(acc["combined"], abs=1e-9)
    # The margin: in the results block, the card, the checkpoint, and nameorigin evaluate.
    refit = torch.load(run / "checkpoints" / "refit.ckpt", weights_only=True)
    margin = refit["margin"]
    results = result.stdout[result.stdout.index("results:"):]
    test_acc = float(next(line.split()[1] for line in results.splitlines() if line.split()[:1] == ["test/acc"]))
    assert margin["model_acc"] == pytest.approx(test_acc, abs=1e-4)
    assert margin["interval"][0] <= margin["margin"] <= margin["interval"][1]
    assert "margin           " in results and "95% paired interval" in results
    assert "Margin over the n-gram baseline" in refit["model_card"] and "Two parts" in refit["model_card"]
    assert refit["linear_part"]["network_weight"] == mixture["network_weight"]
    # Its baseline is the stronger on validation of the linear part the run fitted and mixed in (the refit's, on
    # train + validation: not fitted again) and the tuned TF-IDF LR; the other is named beside it.
    sides = {margin["kind"]: (margin["setting"], margin["baseline_val_acc"]),
             margin["weaker"]["kind"]: (margin["weaker"]["setting"], margin["weaker"]["val_acc"])}
    assert set(sides) == {"linear_part", "lr"}
    assert sides["linear_part"][0] == f"penalty={mixture['penalty']:g}"
    assert sides["linear_part"][1] == pytest.approx(mixture["val_acc"]["linear"], abs=1e-9)
    assert margin["baseline_val_acc"] >= margin["weaker"]["val_acc"]
    assert "this baseline was picked on validation over the " in results
    # The network alone: the served model with its n-gram table (the linear part mixed in) emptied.
    alone = Predictor.load(run / "checkpoints" / "refit.ckpt")
    with torch.no_grad():
        alone.net.ngram.weight.zero_()
    test_truth = torch.tensor([data.labels.index(label) for _, label in data.splits["test"]])
    probs = alone.probabilities([alone.encode(name)[0] for name, _ in data.splits["test"]])
    assert margin["recurrent_alone"]["acc"] == pytest.approx(float((probs.argmax(1) == test_truth).double().mean()))
    assert f"test/acc_recurrent_alone {margin['recurrent_alone']['acc']:.4f}" in results
    assert margin["trained_on"] == "train+val"
    assert nameorigin(["evaluate", str(run / "checkpoints" / "refit.ckpt"), str(corpus)]) == 0
    assert "margin measured when the run ended: " in capsys.readouterr().out
    # Where the run's time went: each step after fit in train.log, results.json and the results block.
    metrics = json.loads((run / "results.json").read_text())["metrics"]
    steps = {key for key in metrics if key.startswith("time/step_")}
    assert steps == {f"time/step_{name}_s" for name in ("linear_part", "calibration", "refit", "test", "margin")}
    (line,) = [line for line in results.splitlines() if line.startswith("  time ")]
    assert line.split()[1:3] == ["fit", f"{metrics['time/fit_s']:.1f}"]
    assert f"margin {metrics['time/step_margin_s']:.1f} s" in line
    assert f"refit took {metrics['time/step_refit_s']:.1f} s" in (run / "train.log").read_text()


def test_the_time_line_counts_every_network_the_run_trained():
    from nameorigin.fit.timing import time_line

    transfer = {"time/fit_s": 38.9, "transfer/fit_s_plain": 31.0, "transfer/fit_s_transferred": 38.9,
                "time/step_margin_s": 5.9}
    assert time_line(transfer) == "fit 69.9 s (2 networks), margin 5.9 s"
    assert time_line({"time/fit_s": 10.0, "ensemble/members": 3.0, "ensemble/fit_s_others": 20.0}) == \
        "fit 30.0 s (3 networks)"
    assert time_line({"time/fit_s": 10.0}) == "fit 10.0 s" and time_line({}) is None


@pytest.mark.slow
def test_the_switches_turn_the_margin_and_the_linear_part_off(tiny_corpus, tmp_path):
    result = train(tmp_path, f"data.root={tiny_corpus}", *TINY, "margin.enabled=false", "model.linear_part=false")
    assert result.returncode == 0, result.stderr[-2000:]
    (run,) = run_dirs(tmp_path)
    refit = torch.load(run / "checkpoints" / "refit.ckpt", weights_only=True)
    assert "margin" not in refit and "linear_part" not in refit
    assert "  margin " not in result.stdout and "Margin over" not in refit["model_card"]
    assert np.isfinite(float(refit["state_dict"]["net.ngram.weight"].abs().sum()))


def test_names_counted_by_chunks_make_the_matrix_counted_at_once(monkeypatch):
    """NameCounts counts a large table a chunk at a time (its memory); the rows, ids and counts are the same."""
    from nameorigin.base.parts import join_parts
    from nameorigin.model import ngram_linear

    names = ["Nakamura", "O'Neill", "Ng", "Abramovich", join_parts(["Ana", "Silva"]), "Lee", "Zhang", "Mueller"]
    table = ngram_linear.NameCounts(names, buckets=4096)
    whole = table(names).to_dense()
    monkeypatch.setattr(ngram_linear, "COUNT_CHUNK", 3)
    chunked = table(names)
    assert chunked.shape == whole.shape and torch.equal(chunked.to_dense(), whole)
    assert torch.equal(chunked.crow_indices()[1:] - chunked.crow_indices()[:-1], (whole > 0).sum(1))
    assert table([]).shape == (0, 4096)
