"""benchmarks/reuse_demo.py, benchmarks/benchmark.py and scripts/compare_runs.py as a user runs them."""

from __future__ import annotations

import json
import re

import pytest
from conftest import NAMEORIGIN, ROOT, run_in_process, run_script

SCRIPTS = ROOT / "scripts"
BENCHMARKS = ROOT / "benchmarks"


def numbers(text: str, label: str) -> list[float]:
    return [float(m) for m in re.findall(rf"{re.escape(label)}.*?= (-?[\d.]+)", text)]


def test_reuse_demo_answers_the_question(tmp_path):
    result = run_in_process([str(BENCHMARKS / "reuse_demo.py")], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (autograd,) = numbers(result.stdout, "autograd: w.grad")
    (question,) = numbers(result.stdout, "the question's 4(w^2 x - y) w x")
    (total,) = numbers(result.stdout, "sum of the uses")
    assert autograd == pytest.approx(150.4865, abs=1e-3) and question == pytest.approx(autograd, abs=1e-3)
    assert total == pytest.approx(autograd, abs=1e-4)
    assert len(numbers(result.stdout, "use ")) == 2


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["--x", "nan"], "--x nan must be a finite number"),
    (["--w", "inf"], "--w inf must be a finite number"),
    (["--uses", "40", "--w", "10"], "--uses 40 --x 10 --w 10 overflows float32"),
    (["--name", "Bob"], "--name and --language need --checkpoint"),
    (["--language", "Irish"], "--name and --language need --checkpoint"),
])
def test_reuse_demo_refuses_bad_flags(args, message, tmp_path):
    result = run_in_process([str(BENCHMARKS / "reuse_demo.py"), *args], cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr and not result.stdout


@pytest.mark.slow
def test_reuse_demo_with_more_uses_and_a_checkpoint(trained, tmp_path):
    checkpoint = trained[0] / "checkpoints" / "best.ckpt"
    result = run_in_process([str(BENCHMARKS / "reuse_demo.py"), "--uses", "3", "--checkpoint", str(checkpoint),
                         "--name", "Kanemoto"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(numbers(result.stdout, "use ")) == 3
    assert len(re.findall(r"^\s+\d+\s+'\w'", result.stdout, flags=re.M)) == len("Kanemoto")
    residuals = [float(x) for x in re.findall(r"/ \|\.grad\| = ([\d.e+-]+)", result.stdout)]
    assert len(residuals) == 4 and max(residuals) < 1e-5
    bad = run_in_process([str(BENCHMARKS / "reuse_demo.py"), "--checkpoint", str(checkpoint), "--language", "Klingon"],
                     cwd=tmp_path)
    assert bad.returncode == 2 and "Klingon" in bad.stderr and "Traceback" not in bad.stderr and not bad.stdout


def test_compare_runs_lists_runs_best_first(trained, tmp_path):
    run = trained[0]
    result = run_in_process([NAMEORIGIN, "compare-runs", str(run.parent.parent)], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert str(run) in result.stdout and "val_acc_best" in result.stdout
    missing = run_in_process([NAMEORIGIN, "compare-runs", str(tmp_path / "nope")], cwd=tmp_path)
    assert missing.returncode == 2
    (tmp_path / "empty").mkdir()
    empty = run_in_process([NAMEORIGIN, "compare-runs", str(tmp_path / "empty")], cwd=tmp_path)
    assert empty.returncode == 2 and "no run folders" in empty.stderr and not empty.stdout


def test_compare_runs_pools_each_labels_figures_over_runs(trained, tmp_path):
    """One run, then the same run twice: the same shares over twice the names, so narrower intervals."""
    import shutil

    run = trained[0]
    rows = json.loads((run / "label_report.json").read_text())
    for copy in ("a", "b"):
        shutil.copytree(run, tmp_path / "sweep" / copy)
    once = run_in_process([NAMEORIGIN, "compare-runs", str(run.parent.parent), "--labels"], cwd=tmp_path)
    twice = run_in_process([NAMEORIGIN, "compare-runs", str(tmp_path / "sweep"), "--labels"], cwd=tmp_path)
    assert once.returncode == 0 and twice.returncode == 0, once.stderr + twice.stderr
    for row in rows:
        (line_once,) = [line for line in once.stdout.splitlines() if line.startswith(row["label"][:13])]
        (line_twice,) = [line for line in twice.stdout.splitlines() if line.startswith(row["label"][:13])]
        assert int(line_once.split()[1]) == row["test_names"] and int(line_twice.split()[1]) == 2 * row["test_names"]
        recall = float(line_once.split()[3])
        assert recall == pytest.approx(row["recall"], abs=5e-4) and float(line_twice.split()[3]) == recall
        width = lambda line: float(line.split()[5].strip("]")) - float(line.split()[4].strip("[,"))  # noqa: E731
        # The Wilson interval is never empty (a recall of 0 or 1 has width too): twice the names, narrower.
        assert 0 < width(line_twice) < width(line_once), (line_once, line_twice)
    (tmp_path / "none" / "x" / "tensorboard").mkdir(parents=True)
    (tmp_path / "none" / "x" / ".hydra").mkdir()
    (tmp_path / "none" / "x" / ".hydra" / "overrides.yaml").write_text("[]\n")
    refused = run_in_process([NAMEORIGIN, "compare-runs", str(tmp_path / "none"), "--labels"], cwd=tmp_path)
    assert refused.returncode == 2 and "label_report.json" in refused.stderr and not refused.stdout


@pytest.mark.slow
def test_benchmark_runs_and_reports_ratios(tmp_path):
    result = run_in_process([str(BENCHMARKS / "benchmark.py"), "--cells", "gru", "--batches", "3", "--repeats", "1",
                         "--hidden-size", "16", "--batch-size", "8", "--skip", "predict,accuracy", "--json"],
                        cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    gru = report["train"]["gru"]
    # Each of the cell's loops beside fused torch, measured in the same run: fused torch is the unit.
    assert set(gru) == {"loop (autograd)", "loop (bptt)", "fused torch"}
    assert gru["fused torch"]["vs_fused"] == 1.0
    fused = gru["fused torch"]["names_per_s"]
    assert all(row["names_per_s"] > 0 and row["vs_fused"] == pytest.approx(row["names_per_s"] / fused)
               for row in gru.values()), gru
    assert report["tutorial"]["names_per_s"] > 0 and set(report["logging"]) == {"autograd", "bptt"}


@pytest.mark.slow
def test_benchmark_predictor_part_serves_the_checkpoint_and_its_exports(tmp_path):
    """The Predictor part builds its model, times it, exports it and times the exported programs and the CLI."""
    result = run_in_process([str(BENCHMARKS / "benchmark.py"), "--hidden-size", "16", "--embedding-dim", "8",
                             "--ngram-buckets", "64", "--repeats", "1", "--predict-names", "500", "--skip",
                             "train,tutorial,logging,accuracy", "--json"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    predict = json.loads(result.stdout)["predict"]
    assert predict["names"] == 500 and predict["names_per_s"] > 0 and predict["cold_start_s"] > 0
    assert set(predict["exported_names_per_s"]) == {"pt2", "onnx"}


@pytest.mark.slow
def test_benchmark_accuracy_part_with_a_relative_data_folder(tiny_corpus, tmp_path):
    result = run_in_process([str(BENCHMARKS / "benchmark.py"), "--data", "names", "--skip",
                             "train,tutorial,logging,predict", "--json"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    accuracy = json.loads(result.stdout)["accuracy"]
    assert accuracy["best_val_acc"] > 0.5 and accuracy["train_seconds"] > 0
    assert accuracy["baseline"]["test_acc"] > 0.5
    missing = run_in_process([str(BENCHMARKS / "benchmark.py"), "--data", "nope"], cwd=tmp_path)
    assert missing.returncode == 2 and "nope" in missing.stderr and "Traceback" not in missing.stderr


@pytest.mark.parametrize("flags, message", [
    (["--batches", "0"], "--batches 0 must be at least 1"),
    (["--repeats", "0"], "--repeats 0 must be at least 1"),
    (["--skip", "predcit"], "--skip predcit: choose from"),
    (["--device", "tpu"], "--device tpu: use cpu, cuda or auto"),
    (["--ngram-buckets", "-1"], "--ngram-buckets -1 must be >= 0"),
    (["--data", "."], "holds no <Language>.txt files"),  # tmp_path: an empty folder
])
def test_benchmark_usage_errors_exit_2(tmp_path, flags, message):
    result = run_in_process([str(BENCHMARKS / "benchmark.py"), *flags], cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("formats", ["", "pt2,tflite"])
def test_export_refuses_formats_it_does_not_write(tmp_path, formats):
    result = run_in_process([NAMEORIGIN, "export", "any.ckpt", "--formats", formats], cwd=tmp_path)
    assert result.returncode == 2 and f"--formats {formats!r}: choose from pt2, onnx" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and list(tmp_path.iterdir()) == []


def test_export_refuses_a_folder_as_the_path_stem(tmp_path):
    (tmp_path / "exports").mkdir()
    result = run_in_process([NAMEORIGIN, "export", "any.ckpt", "--out", "exports"], cwd=tmp_path)
    assert result.returncode == 2 and "--out exports is a folder: pass a path stem in it, e.g. exports/model" in \
        result.stderr, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exports"]


@pytest.mark.slow
def test_the_gender_guesser_comparison_refuses_a_checkpoint_that_is_not_about_gender(trained, tmp_path):
    run, corpus, _ = trained
    result = run_script([str(SCRIPTS / "compare_gender_guesser.py"), str(run / "checkpoints" / "refit.ckpt"),
                         "--table", str(corpus)], cwd=tmp_path)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr[-2000:]
    assert "pass a first name -> gender checkpoint" in result.stderr
