"""--explain: each prediction's score split into one contribution per character, per n-gram and for known-name
evidence, adding up to the served score minus the baseline; checked on a corpus whose answer is known (the
label is set by the ending) and through the command, the JSON, the tables and the dashboard."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import ENDINGS, NAMEORIGIN, ROOT, TINY, run_dirs, run_in_process, train, write_corpus

from nameorigin.model.charrnn import batch_tokens
from nameorigin.model.explain import explain_batch
from nameorigin.serving.predict import Predictor


@pytest.fixture(scope="module")
def explained(trained):
    """The shared tiny run's model, and its test names with their explanations."""
    run, _, _ = trained
    predictor = Predictor.load(run / "checkpoints" / "refit.ckpt")
    test = sorted({name for name, _ in json.loads((run / "split.json").read_text())["splits"]["test"]})
    return predictor, test, predictor.explain(test)


def test_the_parts_add_up_to_the_served_score_minus_the_baseline(explained):
    predictor, names, answers = explained
    residuals = torch.tensor([a.explanation.residual for a in answers])
    scores = torch.tensor([a.explanation.score for a in answers])
    assert float(residuals.abs().mean()) <= 0.01 * float(scores.abs().mean())
    for answer in answers:
        why = answer.explanation
        parts = sum(value for _, _, value in why.parts)
        assert why.score == pytest.approx(why.baseline + parts + why.residual, abs=1e-4)
        assert sum(why.by_character) == pytest.approx(parts, abs=1e-4)  # n-gram shares spread, not lost
        assert why.label == answer.predictions[0][0]
    # The served score itself: the centred decided logit of the top label, from the fast inference loop.
    tokens, lengths = batch_tokens([predictor.encode(name)[0] for name in names[:8]], torch.device("cpu"))
    logits = predictor.net(tokens, lengths)
    torch.testing.assert_close(explain_batch(predictor.net, tokens, lengths).score,
                               logits.max(-1).values - logits.mean(-1))


def test_parts_that_do_not_add_up_show_in_the_residual(explained, monkeypatch):
    """The check can fail: states that drift from the served loop's (here by 1 %) no longer add up to its score."""
    import nameorigin.model.explain as maths

    predictor, names, _ = explained
    tokens, lengths = batch_tokens([predictor.encode(name)[0] for name in names[:8]], torch.device("cpu"))
    exact = maths.explain_batch(predictor.net, tokens, lengths)
    reference = maths.states_after_each_character
    monkeypatch.setattr(maths, "states_after_each_character", lambda *args: reference(*args) * 1.01)
    drifted = maths.explain_batch(predictor.net, tokens, lengths)
    assert float(drifted.residual.abs().mean()) > 100 * float(exact.residual.abs().mean() + 1e-6)


@pytest.fixture(scope="module")
def ending_model(tmp_path_factory) -> tuple[Predictor, list[str]]:
    """A tiny model on 250 names per label, each label set by its ending, and its 100 held-out test names."""
    work = tmp_path_factory.mktemp("endings")
    corpus = write_corpus(work / "names", per_language=250)
    result = train(work, f"data.root={corpus}", *TINY, "trainer.max_epochs=3", "refit.enabled=false",
                   "card.enabled=false")
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = run_dirs(work)
    test = sorted({name for name, _ in json.loads((run / "split.json").read_text())["splits"]["test"]})
    return Predictor.load(run / "checkpoints" / "best.ckpt"), test


@pytest.mark.slow
def test_the_largest_contribution_falls_inside_the_ending_that_sets_the_label(ending_model):
    """Each character's contribution (its own term plus its share of the n-grams over it) is largest inside the
    ending for at least 90 % of the held-out names (docs/serving.md has the figure, and the parts' own)."""
    predictor, names = ending_model
    hits = total = 0
    for name, answer in zip(names, predictor.explain(names), strict=True):
        ending = next((len(e) for e in ENDINGS.values() if name.endswith(e)), None)
        if ending is None:  # the one name under two labels
            continue
        totals = answer.explanation.by_character
        hits += max(range(len(name)), key=totals.__getitem__) >= len(name) - ending
        total += 1
    assert total >= 95 and hits / total >= 0.9, (hits, total)


@pytest.mark.slow
def test_explain_in_text_json_and_tables_and_refused_with_an_export(trained, tmp_path):
    run, _, _ = trained
    checkpoint = str(run / "checkpoints" / "refit.ckpt")
    text = run_in_process([str(ROOT / "scripts" / "predict.py"), checkpoint, "Bakamoto", "--explain"], cwd=tmp_path)
    assert text.returncode == 0, text.stderr[-2000:]
    assert "why Japanese:" in text.stdout and "residual" in text.stdout and "[" in text.stdout, text.stdout
    answer = json.loads(run_in_process([str(ROOT / "scripts" / "predict.py"), checkpoint, "Bakamoto", "--explain",
                                    "--format", "json"], cwd=tmp_path).stdout)[0]
    assert {"explanation", "explanation_residual", "explanation_score", "explanation_baseline"} <= set(answer)
    assert {"part", "kind", "span", "contribution"} <= set(answer["explanation"][0])
    assert [p["part"] for p in answer["explanation"][:8]] == list("Bakamoto")
    table = tmp_path / "people.csv"
    table.write_text("id,surname\n1,Bakamoto\n2,\n", encoding="utf-8")
    rows = run_in_process([str(ROOT / "scripts" / "predict.py"), checkpoint, "--file", str(table), "--column",
                       "surname", "--explain"], cwd=tmp_path).stdout.splitlines()
    assert rows[0].split(",")[-4:] == ["pred_explanation", "pred_abstained", "pred_reason_code", "pred_reason"]
    assert rows[1].count("(") >= 1 and rows[2].endswith(",no usable character after normalization"), rows



@pytest.mark.slow
def test_evaluate_explain_reports_the_residual_and_the_deletion_check(trained, tmp_path):
    run, corpus, _ = trained
    result = run_in_process([NAMEORIGIN, "evaluate", str(run / "checkpoints" / "refit.ckpt"),
                         str(corpus), "--explain"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    report = result.stdout.split("explanations of the ")[1]
    share = float(report.split(" of the mean |score|")[0].split("= ")[-1])
    assert share <= 0.01 and "the top character: p(label) falls" in report, report
