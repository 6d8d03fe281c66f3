"""Crash safety: atomic checkpoints, kill-and-resume to identical weights, divergence stops cleanly."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import ROOT, TINY, run_dirs, train, train_refused, write_corpus

from nameorigin.fit.checkpointing import AtomicCheckpointIO


class Unpicklable:
    def __reduce__(self):
        raise RuntimeError("simulated crash in the middle of a save")


def test_interrupted_save_leaves_the_previous_checkpoint_whole(tmp_path):
    io = AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"state_dict": {"w": torch.ones(1000)}, "epoch": 1}, path)
    with pytest.raises(RuntimeError, match="simulated crash"):
        io.save_checkpoint({"state_dict": {"w": torch.zeros(1000)}, "bad": Unpicklable()}, path)
    restored = torch.load(path, weights_only=True)
    assert restored["epoch"] == 1 and restored["state_dict"]["w"].sum() == 1000
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary file left behind


RESUME = [*TINY, "trainer.max_epochs=4", "trainer.deterministic=true", "model.dropout=0.3", "test=true",
          "callbacks.grad_accumulation.every_n_steps=1000"]


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]


def saved_epoch(folder: Path) -> int:
    """The epoch of the newest last.ckpt under a run folder (-1 before the first)."""
    for path in folder.glob("outputs/*/*/checkpoints/last.ckpt"):
        try:
            return int(torch.load(path, weights_only=True)["epoch"])
        except (OSError, RuntimeError, EOFError):  # replaced while read
            return -1
    return -1


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple:
    """The run the interrupted ones must equal, trained to the end without a stop: corpus, folder, result."""
    root = tmp_path_factory.mktemp("resume")
    corpus = write_corpus(root / "names", per_language=300)
    reference_dir = root / "reference"
    reference_dir.mkdir()
    result = train(reference_dir, f"data.root={corpus}", *RESUME)
    assert result.returncode == 0, result.stderr[-2000:]
    return corpus, reference_dir, result


def run_into_epoch(reference: tuple, tmp_path: Path, name: str, settle: float, epoch: int = 1) -> tuple:
    """The reference's run started in its own process and left `settle` seconds past the last.ckpt that ends epoch
    `epoch` - 1 (so into epoch `epoch`, counted from 0): corpus, reference folder and result, the run's folder and
    process (its stderr piped)."""
    corpus, reference_dir, result = reference
    folder = tmp_path / name
    folder.mkdir()
    victim = subprocess.Popen([sys.executable, str(ROOT / "train.py"), f"data.root={corpus}", *RESUME],
                              cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and saved_epoch(folder) < epoch - 1:
        time.sleep(0.05)
    time.sleep(settle)
    assert victim.poll() is None, "the run ended before it could be stopped"
    return corpus, reference_dir, result, folder, victim


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_matches_an_uninterrupted_run(reference, tmp_path):
    corpus, reference_dir, reference, crash_dir, victim = run_into_epoch(reference, tmp_path, "crash", 0.3)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()

    resumed = train(crash_dir, f"data.root={corpus}", *RESUME, "ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    ours, theirs = final_weights(run_dirs(crash_dir)[-1]), final_weights(run_dirs(reference_dir)[-1])
    assert ours.keys() == theirs.keys()
    for key in theirs:
        torch.testing.assert_close(ours[key], theirs[key], atol=1e-6, rtol=0, msg=key)
    test_acc = [line for line in resumed.stdout.splitlines() if "test/acc" in line]
    assert test_acc == [line for line in reference.stdout.splitlines() if "test/acc" in line]


@pytest.mark.slow
def test_sigterm_mid_epoch_saves_the_step_and_the_resumed_run_equals_an_uninterrupted_one(reference, tmp_path):
    """The run answers SIGTERM with last.ckpt at the batch in flight, one line and exit 143;
    ckpt_path=last resumes at the next batch, and the finished run's weights equal an uninterrupted run's
    exactly (the same order of batches, the same dropout masks, the same optimizer and schedule state). Stopped in
    the third epoch, whose order differs from the first's, so a resume that replayed epoch 0's order would fail."""
    corpus, reference_dir, reference, stopped_dir, victim = run_into_epoch(reference, tmp_path, "stopped", 0.2,
                                                                           epoch=2)
    victim.send_signal(signal.SIGTERM)
    _, stderr = victim.communicate(timeout=120)  # bounds a hang only
    assert victim.returncode == 128 + signal.SIGTERM
    said = [line for line in stderr.splitlines() if line.startswith("stopped by SIGTERM")]
    assert len(said) == 1 and "resume with ckpt_path=last" in said[0] and "Traceback" not in stderr, stderr[-2000:]
    saved = torch.load(run_dirs(stopped_dir)[-1] / "checkpoints" / "last.ckpt", weights_only=True)
    done = saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["processed"]
    loader_state = saved["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    # Into epoch 2, or 3 where a loaded machine let epoch 2 end before the signal: either order differs from epoch 0's.
    assert done > 0 and loader_state["epoch"] in (2, 3) and loader_state["batches"] == done, loader_state

    resumed = train(stopped_dir, f"data.root={corpus}", *RESUME, "ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    ours, theirs = final_weights(run_dirs(stopped_dir)[-1]), final_weights(run_dirs(reference_dir)[-1])
    assert ours.keys() == theirs.keys()
    for key in theirs:
        assert torch.equal(ours[key], theirs[key]), key
    test_acc = [line for line in resumed.stdout.splitlines() if "test/" in line]
    assert test_acc and test_acc == [line for line in reference.stdout.splitlines() if "test/" in line]


@pytest.mark.slow
def test_resume_refuses_a_different_corpus(tmp_path):
    corpus = write_corpus(tmp_path / "names")
    first = train(tmp_path, f"data.root={corpus}", *TINY, "trainer.max_epochs=1", "test=false")
    assert first.returncode == 0, first.stderr[-2000:]
    (corpus / "Irish.txt").write_text("Another\nCorpus\n")
    again = train_refused(tmp_path, f"data.root={corpus}", *TINY, "ckpt_path=last")
    assert again.returncode == 2 and "sha256 mismatch" in again.stderr, again.stderr[-2000:]
    assert len(run_dirs(tmp_path)) == 1


@pytest.mark.slow
@pytest.mark.parametrize("override, message", [
    ("model.hidden_size=64", "cannot resume this model: model.hidden_size=64 (checkpoint: 32)"),
    ("ckpt_path=garbage.ckpt", "not a readable torch checkpoint"),
    ("data.split_seed=1", "cannot resume on another split: data.split_seed=1 (checkpoint: 0)"),
    ("data.split_fractions=[0.6,0.2,0.2]", "data.split_fractions=[0.6, 0.2, 0.2] (checkpoint: [0.8, 0.1, 0.1])"),
])
def test_resume_refuses_a_checkpoint_it_cannot_continue(trained, tmp_path, override, message):
    run, corpus, _ = trained
    (tmp_path / "garbage.ckpt").write_text("garbage\n")
    resumed = train_refused(tmp_path, f"data.root={corpus}", *TINY,
                            f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", override)
    assert resumed.returncode == 2 and message in resumed.stderr, resumed.stderr[-2000:]
    assert len(resumed.stderr.strip().splitlines()) == 1 and "Traceback" not in resumed.stderr
    assert not (tmp_path / "outputs").exists()


def test_finetuning_refuses_a_start_trained_on_this_corpus_with_another_split(trained, tmp_path):
    # The starting weights learnt split seed 0's training names, some of which split seed 1 holds out.
    run, corpus, _ = trained
    result = train_refused(tmp_path, "experiment=finetune", f"model.init_from={run / 'checkpoints' / 'best.ckpt'}",
                           f"data.root={corpus}", "model.known_names_cache=null", *TINY, "data.split_seed=1")
    assert result.returncode == 2 and "was trained on this corpus with another split (data.split_seed=0)" in \
        result.stderr, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1 and not run_dirs(tmp_path)


@pytest.mark.slow
def test_divergence_stops_with_a_clear_message_and_keeps_the_last_good_checkpoint(tmp_path):
    corpus = write_corpus(tmp_path / "names")
    # A sane first epoch, then the schedule multiplies the learning rate by 1e30.
    result = train(tmp_path, f"data.root={corpus}", *TINY, "trainer.max_epochs=3", "trainer.gradient_clip_val=null",
                   "model.optimizer._target_=torch.optim.SGD", "model.optimizer.lr=0.01",
                   "model.scheduler._target_=torch.optim.lr_scheduler.StepLR", "~model.scheduler.T_max",
                   "+model.scheduler.step_size=1", "+model.scheduler.gamma=1e30")
    assert result.returncode == 1, (result.stdout[-2000:], result.stderr[-2000:])
    assert "non-finite training loss" in result.stderr and "model.optimizer.lr" in result.stderr
    assert "Traceback" not in result.stderr
    (run,) = run_dirs(tmp_path)
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["epoch"] == 0
    assert all(torch.isfinite(v).all() for v in last["state_dict"].values() if v.is_floating_point())


@pytest.mark.slow
def test_runs_started_together_get_their_own_folders(tmp_path):
    corpus = write_corpus(tmp_path / "names")
    args = [sys.executable, str(ROOT / "train.py"), f"data.root={corpus}", *TINY, "debug=fdr"]
    runs = [subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    for run in runs:
        assert run.wait(timeout=300) == 0, run.stderr.read()[-2000:]
    folders = run_dirs(tmp_path)
    assert len(folders) == 2 and all(re.fullmatch(r"\d\d-\d\d-\d\d\.\d{6}", f.name) for f in folders)
