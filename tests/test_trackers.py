"""Experiment trackers beside TensorBoard: logger=csv, logger=mlflow, several at once, a sweep as one experiment.
Each run is read back through the tracker's own reader (MLflow's client, the CSV file), not through ours."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY, run_dirs, train, write_corpus
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

mlflow = pytest.importorskip("mlflow")


def runs_of(folder: Path) -> list:
    client = mlflow.MlflowClient(f"sqlite:///{folder / 'outputs' / 'mlflow' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("nameorigin")
    return client, client.search_runs([experiment.experiment_id])


@pytest.mark.slow
def test_every_tracker_gets_the_run_and_tensorboard_keeps_the_dashboard(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    corpus = write_corpus(tmp_path / "names")
    result = train(tmp_path, f"data.root={corpus}", *TINY, "logger=[tensorboard,csv,mlflow]")
    assert result.returncode == 0, result.stderr[-2000:]
    run = run_dirs(tmp_path)[-1]

    client, runs = runs_of(tmp_path)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    tracked = runs[0]
    assert tracked.info.run_name == str(run.resolve())
    assert tracked.data.params["model.hidden_size"] == "32" and tracked.data.params["seed"] == "0"
    assert tracked.data.params["model_checkpoint"].endswith("refit.ckpt")
    assert 0 <= tracked.data.metrics["test/acc"] <= 1 and "refit-epoch" in tracked.data.metrics
    assert {artifact.path for artifact in client.list_artifacts(tracked.info.run_id)} == {"MODEL_CARD.md",
                                                                                          "label_report.json"}
    card = client.download_artifacts(tracked.info.run_id, "MODEL_CARD.md", str(tmp_path))
    assert Path(card).read_text() == (run / "MODEL_CARD.md").read_text()

    with open(run / "csv" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    tested = [row for row in rows if row.get("test/acc")]
    assert tested and float(tested[-1]["test/acc"]) == pytest.approx(tracked.data.metrics["test/acc"], abs=1e-6)
    assert (run / "csv" / "hparams.yaml").is_file() and (run / "csv" / "refit" / "metrics.csv").is_file()

    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0}).Reload()
    assert any(tag.startswith("grad_accum/") for tag in events.Tags()["scalars"])
    assert not any(key.startswith("grad_accum/") for key in tracked.data.metrics)  # the dashboard stays in TensorBoard


@pytest.mark.slow
def test_a_sweep_is_one_experiment_with_a_run_per_job(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    corpus = write_corpus(tmp_path / "names")
    result = train(tmp_path, "-m", f"data.root={corpus}", *TINY, "trainer.max_epochs=1", "refit.enabled=false",
                   "margin.enabled=false", "logger=many", "model.hidden_size=16,32")
    assert result.returncode == 0, result.stderr[-2000:]
    _, runs = runs_of(tmp_path)
    assert sorted(run.data.params["model.hidden_size"] for run in runs) == ["16", "32"]
    assert len({run.info.run_name for run in runs}) == 2
    assert all(list((Path(run.info.run_name) / "tensorboard").glob("events.*")) for run in runs)


def test_importing_nameorigin_imports_no_tracker():
    code = "import sys, nameorigin, nameorigin.serving.predict; print(any(m.startswith('mlflow') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
