"""Predictor and scripts/predict.py on a real (tiny) checkpoint: formats, safety, hostile input, evaluation."""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import random
import shutil
from pathlib import Path

import pytest
import torch
from conftest import NAMEORIGIN, ROOT, run_in_process, run_script
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nameorigin.analysis.evaluate import evaluate, format_report
from nameorigin.base.errors import UserError
from nameorigin.fit.module import NameClassifier
from nameorigin.serving.predict import Predictor

PREDICT = str(ROOT / "scripts" / "predict.py")


@pytest.fixture(scope="module")
def checkpoint(trained) -> Path:
    return trained[0] / "checkpoints" / "refit.ckpt"  # the run's model: what users serve


def test_predictor_matches_the_lightning_model(checkpoint):
    predictor = Predictor.from_checkpoint(checkpoint)
    ckpt = torch.load(checkpoint, weights_only=True)
    model = NameClassifier(**ckpt["hyper_parameters"]).eval()
    model.load_state_dict(ckpt["state_dict"])
    names = ["Kanemoto", "Pavlovsky", "Ab", "Donagh", "Rinelli", "Kanemotokanemoto"]
    result = predictor.predict(names, top_k=4)
    codes = [predictor.encode(n)[0] for n in names]
    for name, code, prediction in zip(names, codes, result, strict=True):
        with torch.no_grad():
            expected = model(torch.tensor([code]), torch.tensor([len(code)])).softmax(-1)[0]
        assert prediction.name == name and len(prediction.predictions) == 4
        probabilities = [p for _, p in prediction.predictions]
        assert probabilities == sorted(probabilities, reverse=True)
        for language, probability in prediction.predictions:
            assert probability == pytest.approx(float(expected[model.hparams.labels.index(language)]), abs=1e-5)


def test_unknown_characters_map_to_unk_and_empty_names_are_explained(checkpoint):
    predictor = Predictor.from_checkpoint(checkpoint)
    assert predictor.encode("Kan#moto")[0][3] == predictor.char_to_index["<unk>"]
    empty, emoji, fine = predictor.predict(["   ", "\U0001f600", "Kanemoto"])
    assert empty.error and not empty.predictions and emoji.error
    assert fine.error is None and len(fine.predictions) == 3


@pytest.mark.slow
def test_script_text_json_csv_stdin_and_file(checkpoint, tmp_path):
    text = run_in_process([PREDICT, str(checkpoint), "Kanemoto", "O'Rinelli", "--top-k", "2"], cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[0] == "Kanemoto" and text.stdout.count("%") == 4
    names = tmp_path / "names.txt"
    names.write_text("Kanemoto\n\nPavlovsky\n")
    as_json = run_script([PREDICT, str(checkpoint), "--format", "json"], cwd=tmp_path, input=names.read_text())
    rows = json.loads(as_json.stdout)
    assert [r["name"] for r in rows] == ["Kanemoto", "Pavlovsky"]
    assert {"language", "probability"} == set(rows[0]["predictions"][0])
    as_csv = run_in_process([PREDICT, str(checkpoint), "--file", str(names), "--format", "csv", "--top-k", "3"],
                        cwd=tmp_path)
    table = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert len(table) == 6 and list(table[0]) == ["name", "language", "probability", "rank", "abstained", "reason_code",
                                                  "reason"]
    assert [r["rank"] for r in table[:3]] == ["1", "2", "3"]


@pytest.mark.slow
def test_script_refuses_a_terminal_without_names_and_stdin_that_is_not_utf8(checkpoint, tmp_path):
    terminal, other_end = pty.openpty()  # a real terminal on standard input: reading it would wait forever
    try:
        waiting = run_script([PREDICT, str(checkpoint)], cwd=tmp_path, stdin=other_end, timeout=120)
    finally:
        os.close(terminal), os.close(other_end)
    assert waiting.returncode == 2 and "no names to classify" in waiting.stderr, waiting.stderr
    latin1 = run_script([PREDICT, str(checkpoint)], cwd=tmp_path, input="Müller\n".encode("latin-1"), text=False)
    assert latin1.returncode == 2 and latin1.stderr.decode().strip() == \
        "error: standard input is not UTF-8 (byte 1): re-save the names as UTF-8, or pass --file"


@pytest.mark.slow
def test_latest_finds_the_newest_runs_model(trained):
    run = trained[0]
    result = run_in_process([PREDICT, "latest", "Kanemoto", "--outputs", str(run.parent.parent)], cwd=run)
    assert result.returncode == 0 and "Kanemoto" in result.stdout
    explicit = run_in_process([PREDICT, str(run / "checkpoints" / "refit.ckpt"), "Kanemoto"], cwd=run)
    assert result.stdout == explicit.stdout  # the refit model, not best.ckpt


class Exploit:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


@pytest.mark.parametrize("make, message", [
    (lambda p, ck: None, "does not exist"),
    (lambda p, ck: p.mkdir(), "bad.ckpt is a folder: pass the path of a .ckpt file"),
    (lambda p, ck: p.write_bytes(ck.read_bytes()[:4096]), "not a readable torch checkpoint"),
    (lambda p, ck: p.write_text("hello"), "not a readable torch checkpoint"),
    (lambda p, ck: p.write_text("garbage\n"), "not a readable torch checkpoint"),  # an unpickling error
    (lambda p, ck: torch.save({"state_dict": {}}, p), "not a nameorigin checkpoint"),
    (lambda p, ck: torch.save({"hyper_parameters": Exploit()}, p), "refused by weights-only loading"),
])
def test_bad_checkpoints_exit_2_with_one_line(checkpoint, tmp_path, make, message):
    bad = tmp_path / "bad.ckpt"
    make(bad, checkpoint)
    result = run_in_process([PREDICT, str(bad), "Kanemoto"], cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "pwned").exists()  # the malicious pickle never ran


@pytest.mark.parametrize("flags, message", [
    (["--top-k", "0", "Kanemoto"], "Invalid value for '--top-k': Input should be greater than or equal to 1"),
    (["--batch-size", "0", "Kanemoto"], "Invalid value for '--batch-size'"),
    (["--column", "surname"], "--column needs --file"),
    (["--delimiter", ";", "Kanemoto"], "--delimiter reads tables"),
    (["--file", "."], "--file . cannot be read (Is a directory)"),
    (["--file", ".", "--column", "surname"], "--file . is a folder: pass a table file with a header row"),
    (["--known-names", "data/surnames", "Kanemoto"], "No such option: --known-names"),  # evaluate's
    (["--uncalibrated", "--coverage", "0.9", "Kanemoto"], "drop --uncalibrated"),
    (["--file", "people.csv", "--column", "surname", "--out", "."], "--out . is a folder"),
])
def test_usage_errors_exit_2_without_a_traceback(checkpoint, tmp_path, flags, message):
    result = run_in_process([PREDICT, str(checkpoint), *flags], cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not result.stdout and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, message", [
    (["evaluate", "{ckpt}", "no-such-folder"], "'no-such-folder' does not exist"),
    (["evaluate", "{ckpt}", "."], ". holds no <Language>.txt files"),
    (["evaluate", "{ckpt}", "--baseline", "svm"], "'svm' is not one of 'lr', 'ngram'"),
    (["evaluate", "{ckpt}", "--format", "json", "--explain"], "--format json prints the test report and the"),
    (["card"], "Missing argument 'checkpoint'"),
    (["composition", "{ckpt}", "--column", "surname"], "--column needs --file"),
    (["export", "{ckpt}", "--formats", "tflite"], "--formats 'tflite': choose from pt2, onnx"),
    (["serve", "{ckpt}", "--port", "80"], "'--port'"),
    (["nana-table"], "pass --fetch to download it, or --wheel FILE"),
    (["compare-runs", "no-such-folder"], "'no-such-folder' does not exist"),
    (["predicts"], "No such command 'predicts'"),
])
def test_every_subcommands_refusals_are_one_line_exit_2(checkpoint, tmp_path, args, message):
    result = run_in_process([NAMEORIGIN, *(arg.format(ckpt=checkpoint) for arg in args)], cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not result.stdout and len(result.stderr.strip().splitlines()) == 1


def hostile_names(count: int = 1200, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    fixed = ["", " ", "\t\n", "\x00", "A\x00B", "x" * 10_000, "\U0001f600\U0001f468\u200d\U0001f469", "\u202eevil",
             "\u05e9\u05dc\u05d5\u05dd", "\u0645\u062d\u0645\u062f", "\ufeff", "\r", "O'Neill", "-", "\u0301\u0301"]
    pools = ["abcXYZ'- ", "\x00\x01\x07\x1b\x7f", "\u0400\u04ff\u0600\u06ff\u3042\u4e00\uac00", "\U0001f600\U0001f680"]
    out = list(fixed)
    while len(out) < count:
        pool = rng.choice(pools)
        out.append("".join(rng.choice(pool) for _ in range(rng.randint(0, 40))))
    return out


def test_fuzz_predictor_and_script_answer_or_explain_every_name(checkpoint, tmp_path):
    names = hostile_names()
    predictor = Predictor.from_checkpoint(checkpoint)
    results = predictor.predict(names, top_k=2)
    assert len(results) == len(names)
    assert all((r.error is None) == bool(r.predictions) for r in results)
    for answer in predictor.predict(names, top_k=len(predictor.labels)):  # every label: a distribution, ranked
        if answer.error is None:
            probabilities = [p for _, p in answer.predictions]
            assert sum(probabilities) == pytest.approx(1, abs=1e-5) and probabilities == sorted(probabilities)[::-1]
    lines = [n for n in names if "\n" not in n and "\r" not in n and n.strip()]
    (tmp_path / "hostile.txt").write_text("\n".join(lines), encoding="utf-8", errors="surrogatepass")
    result = run_in_process([PREDICT, str(checkpoint), "--file", str(tmp_path / "hostile.txt"), "--format", "json"],
                        cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    answered = json.loads(result.stdout)
    assert len(answered) == len([n for n in "\n".join(lines).splitlines() if n.strip()])
    assert all(r["predictions"] or (r["abstained"] and r["reason_code"] == "unusable_input" and r["reason"])
               for r in answered)


@pytest.mark.slow
def test_evaluate_reproduces_the_training_test_score(trained, checkpoint, tmp_path):
    run, corpus, _ = trained
    result = evaluate(Predictor.from_checkpoint(checkpoint), corpus)
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0}).Reload()
    assert result["accuracy"] == pytest.approx(events.Scalars("test/acc")[-1].value, abs=1e-6)
    assert result["size"] == sum(map(sum, result["confusion"]))
    report = run_in_process([NAMEORIGIN, "evaluate", str(checkpoint), str(corpus)], cwd=run)
    assert report.returncode == 0 and "macro-F1" in report.stdout
    changed = shutil.copytree(corpus, tmp_path / "names")  # the corpus is shared with other tests: edit a copy
    (changed / "Irish.txt").write_text("Changed\n")
    with pytest.raises(UserError, match="sha256 differs"):
        evaluate(Predictor.from_checkpoint(checkpoint), changed)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["pt2", "onnx"])
def test_export_agrees_with_the_checkpoint_to_1e_5(trained, checkpoint, exported, fmt, tmp_path):
    names = hostile_names(300, seed=3) + ["Kanemoto", "Pavlovsky", "Donagh", "Rinelli", "O'Kanemotoagh"]
    ours = Predictor.from_checkpoint(checkpoint)
    served = Predictor.load(exported.with_suffix(f".{fmt}"))
    assert served.labels == ours.labels and served.calibration == ours.calibration
    encoded = [codes for codes, error in map(ours.encode, names) if error is None]
    assert len(encoded) > 70  # most hostile names are answered, with <unk> for unknown characters
    torch.testing.assert_close(served.probabilities(encoded), ours.probabilities(encoded), atol=1e-5, rtol=0)
    for a, b in zip(ours.predict(names, top_k=4), served.predict(names, top_k=4), strict=True):
        assert a.error == b.error and [lang for lang, _ in a.predictions] == [lang for lang, _ in b.predictions]
    result = run_in_process([PREDICT, str(exported.with_suffix(f".{fmt}")), "Kanemoto", "--format", "json",
                         "--coverage", "0.9"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[0]["prediction_set"][0] == ours.predict(["Kanemoto"])[0].predictions[0][0]
    refused = run_in_process([PREDICT, str(exported.with_suffix(f".{fmt}")), "Kanemoto", "--explain"], cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.strip().endswith("pass the .ckpt, not an exported program")
    # The sidecar carries the split settings and the card: the program is scored on its own held-out names.
    served_path, corpus = str(exported.with_suffix(f".{fmt}")), str(trained[1])
    report = run_in_process([NAMEORIGIN, "evaluate", served_path, corpus], cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    expected = format_report(evaluate(ours, corpus))
    assert report.stdout.splitlines()[:3] == expected.splitlines()[:3]  # split size, accuracy, macro-F1
    card = run_in_process([NAMEORIGIN, "card", served_path], cwd=tmp_path)
    assert card.returncode == 0 and card.stdout == torch.load(checkpoint, weights_only=True)["model_card"]


@pytest.fixture(scope="module")
def exported(checkpoint, tmp_path_factory) -> Path:
    stem = tmp_path_factory.mktemp("export") / "model"
    result = run_script(["-m", "nameorigin", "export", str(checkpoint), "--out", str(stem)], cwd=stem.parent)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr  # no warnings reach the user
    assert {p.name for p in stem.parent.iterdir()} == {"model.pt2", "model.onnx", "model.json"}  # no temp files
    return stem


def test_evaluate_without_a_folder_reads_the_shipped_corpus(checkpoint, tmp_path):
    from nameorigin.data.corpus import shipped_corpus

    # The tiny run trained on a corpus of its own: the shipped one is named in the refusal.
    result = run_in_process([NAMEORIGIN, "evaluate", str(checkpoint)], cwd=tmp_path)
    assert result.returncode == 2 and f"{shipped_corpus()} is not the corpus this checkpoint was trained on" in \
        result.stderr, result.stderr
