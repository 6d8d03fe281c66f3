"""End to end: `python train.py` as a subprocess on tiny data, artifacts read back with the real libraries."""

from __future__ import annotations

import json
import random
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch
from conftest import TINY, run_dirs, train, train_refused, write_corpus
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nameorigin.config import Cell
from nameorigin.fit.module import NameClassifier


def events(run: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(run / "tensorboard"),
                                   size_guidance={"scalars": 0, "images": 0, "histograms": 0, "tensors": 0})
    return accumulator.Reload()


@pytest.mark.slow
def test_run_prints_where_things_are(trained):
    run, _, result = trained
    assert "test/acc" in result.stdout and f"tensorboard --logdir {run}" in result.stdout
    # the results block is the run's last lines, after every step's log (the outputs are written before it)
    assert result.stdout.rstrip().splitlines()[-1] == f"  dashboard        tensorboard --logdir {run}"
    assert "best checkpoint" in result.stdout and f"model            {run / 'checkpoints' / 'refit.ckpt'}" in \
        result.stdout
    assert run.parent.parent.name == "outputs" and "." in run.name  # <date>/<time.microseconds>


def test_checkpoint_loads_weights_only_and_rebuilds_the_model(trained):
    run, _, _ = trained
    for name in ("best.ckpt", "last.ckpt", "refit.ckpt"):
        checkpoint = torch.load(run / "checkpoints" / name, weights_only=True, map_location="cpu")
        hparams = checkpoint["hyper_parameters"]
        assert hparams["labels"] == ["Irish", "Italian", "Japanese", "Russian"]
        assert hparams["vocab"][:2] == ["<pad>", "<unk>"] and hparams["config"]["cell"] == "gru"
        assert type(hparams["config"]["cell"]) is str  # plain types: weights-only loading needs no Enum class
        assert checkpoint["data"]["split_seed"] == 0
    model = NameClassifier(**hparams)
    model.load_state_dict(checkpoint["state_dict"])
    assert sum(p.numel() for p in model.parameters()) > 1000


def test_split_manifest_is_saved_and_leak_free(trained):
    run, corpus, _ = trained
    manifest = json.loads((run / "split.json").read_text())
    names = {s: {n for n, _ in pairs} for s, pairs in manifest["splits"].items()}
    assert not (names["train"] & names["val"] or names["train"] & names["test"] or names["val"] & names["test"])
    assert sum(manifest["sizes"].values()) == 4 * 40 + 2  # the 5 duplicate lines per file are gone
    assert manifest["names_with_several_languages"] == 1 and len(manifest["corpus_sha256"]) == 64


def test_tensorboard_holds_grad_accumulation_with_tiny_residual(trained):
    run, _, _ = trained
    acc = events(run)
    tags = acc.Tags()
    for weight in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        residuals = [e.value for e in acc.Scalars(f"grad_accum/{weight}/residual")]
        assert len(residuals) >= 3 and max(residuals) < 1e-5, residuals
        horizons = [e.value for e in acc.Scalars(f"grad_accum/{weight}/horizon90")]
        assert all(1 <= h <= 20 for h in horizons)
        shares = [e.value for e in acc.Scalars(f"grad_accum/{weight}/last_char_share")]
        assert all(0 < s <= 1 for s in shares)
        histogram = acc.Histograms(f"grad_accum/{weight}/norm_by_distance")[-1].histogram_value
        assert histogram.num > 0 and len(histogram.bucket) >= 4
    assert {"grad_accum/heatmap", "grad_accum/running_sum", "val/confusion_matrix"} <= set(tags["images"])
    image = acc.Images("val/confusion_matrix")[-1]
    assert image.width > 200 and image.encoded_image_string[:4] == b"\x89PNG"


def test_tensorboard_has_metrics_hparams_projector_and_text(trained):
    run, _, _ = trained
    acc = events(run)
    scalars = set(acc.Tags()["scalars"])
    assert {"train/loss_epoch", "val/acc", "val/macro_f1", "val/acc_best", "test/acc", "val_f1/Irish"} <= scalars
    assert {"hp/test_acc", "hp/test_macro_f1", "hp/val_acc_best"} <= scalars
    assert 0 <= acc.Scalars("hp/test_acc")[-1].value <= 1
    assert "_hparams_/session_start_info" in acc.PluginTagToContent("hparams")
    assert "custom_scalars__config__" in acc.Tags()["tensors"]
    assert "test/sample_predictions/text_summary" in acc.Tags()["tensors"]
    (text,) = acc.Tensors("test/sample_predictions/text_summary")[-1:]
    panel = text.tensor_proto.string_val[0].decode()
    assert "why the top one" in panel and "[" in panel.split("\n")[2], panel[:500]  # the marked characters
    projector = (run / "tensorboard" / "projector_config.pbtxt").read_text()
    assert "char_embedding" in projector
    (metadata,) = (run / "tensorboard").glob("**/metadata.tsv")
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert len(metadata.read_text().splitlines()) == len(checkpoint["hyper_parameters"]["vocab"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tensorboard_server_serves_the_run(trained):
    run, _, _ = trained
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(run), "--host",
                               "127.0.0.1", "--port", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline, body = time.monotonic() + 90, None
        while time.monotonic() < deadline and body is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/plugin/scalars/tags", timeout=5) as r:
                    body = json.loads(r.read())
            except OSError:
                time.sleep(1)
        assert body is not None, "tensorboard did not answer within 90 s"
        tags = {tag for run_tags in body.values() for tag in run_tags}
        assert {"val/acc", "grad_accum/weight_hh/residual"} <= tags
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("setup, override, message", [
    (lambda d: None, None, "does not exist"),
    (lambda d: d.mkdir(), None, "holds no <Language>.txt"),
    (lambda d: d.write_text("Abe\n"), None, "names is a file: pass the folder of <Language>.txt files"),
    (lambda d: write_corpus(d), "paths.log_dir=/proc/nameorigin", "cannot create the run folder /proc/nameorigin"),
    (lambda d: (write_corpus(d), (d / "Greek.txt").write_bytes(b"Alpha\n\xff\n")), None, "Greek.txt:2 is not UTF-8"),
    (lambda d: write_corpus(d), "model.cell=transformer", f"expected one of [{', '.join(Cell)}]"),
    (lambda d: write_corpus(d), "model.hidden_size=-4", "model.hidden_size=-4 must be a whole number >= 1"),
    (lambda d: write_corpus(d), "model.hidden_size=abc", "Value 'abc' of type 'str' could not be converted to Integer"),
    (lambda d: write_corpus(d), "test=maybe", "Value 'maybe' is not a valid bool"),
    (lambda d: write_corpus(d), "data.split_fractions=[1,0,0]", "with val and test above 0"),
    (lambda d: write_corpus(d), "data.split_fractions=[0.5,0.1,0.1]", "data.split_fractions"),
    (lambda d: write_corpus(d), "model.hiden_size=8", "hiden_size"),
    (lambda d: write_corpus(d), "model.optimizer.lr=-1", "Invalid learning rate: -1"),
    (lambda d: write_corpus(d), "trainer.devices=0", "trainer: `Trainer(devices=0)` value is not a valid input"),
    (lambda d: write_corpus(d), "trainer.accelerator=tpu", "trainer: Requirement 'torch_xla"),  # its package absent
    (lambda d: write_corpus(d), "trainer=tpu", "Could not find 'trainer/tpu': choose one of cpu, ddp, ddp_cpu,"),
    (lambda d: write_corpus(d), "model.hidden_size=[", "cannot parse the override 'model.hidden_size=['"),
    (lambda d: write_corpus(d), "+trainer.precision=16-mixed", "model.optimizer.fused=true cannot clip gradients"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, setup, override, message):
    corpus = tmp_path / "names"
    setup(corpus)
    # No data.download: a mistyped data.root is refused by default, and nothing is fetched.
    args = [f"data.root={corpus}", *TINY] + ([override] if override else [])
    assert_refused(train_refused(tmp_path, *args), message, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("override, message", [  # one of each kind: a task's refusal, Hydra's, the run folder's
    ("model.hidden_size=-4", "model.hidden_size=-4 must be a whole number >= 1"),
    ("trainer=tpu", "Could not find 'trainer/tpu': choose one of cpu, ddp, ddp_cpu,"),
    ("paths.log_dir=/proc/nameorigin", "cannot create the run folder /proc/nameorigin"),
])
def test_bad_input_in_its_own_process_shows_one_line_and_no_warning(tmp_path, override, message):
    """As a user sees it: nothing else reaches stderr, Python's and Lightning's warnings included."""
    corpus = write_corpus(tmp_path / "names")
    assert_refused(train(tmp_path, f"data.root={corpus}", *TINY, override, fresh=True), message, tmp_path)


def assert_refused(result: subprocess.CompletedProcess, message: str, tmp_path: Path) -> None:
    assert result.returncode == 2, (result.stdout[-2000:], result.stderr[-2000:])
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "outputs").exists()  # not even an empty date folder


def test_results_block_calibration_and_model_card(trained):
    run, _, result = trained
    for key in ("test/acc", "test/acc_any", "test/ece_raw", "test/ece", "test/coverage_90", "test/set_size_90"):
        assert f"  {key} " in result.stdout, key
    assert "GPU available" in result.stdout + result.stderr  # Lightning's own start-up lines still show
    assert "litlogger" not in result.stdout + result.stderr  # its advert does not
    checkpoint = torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)
    calibration = checkpoint["calibration"]
    assert set(calibration["conformal"]) == {"0.8", "0.9", "0.95"}
    assert float(checkpoint["state_dict"]["net.temperature"]) == pytest.approx(calibration["temperature"])
    card = (run / "MODEL_CARD.md").read_text()
    assert torch.load(run / "checkpoints" / "refit.ckpt", weights_only=True)["model_card"] == card
    for section in ("## Data and provenance", "## Test metrics", "| Irish |", "## Calibration",
                    "## Prediction sets", "not** a person's ethnicity", "## Reproduce", "python train.py data.root=",
                    " --baseline lr` fits it"):
        assert section in card, section
    acc = events(run)
    assert {"calibration/reliability_val", "calibration/reliability_test"} <= set(acc.Tags()["images"])
    assert {"calibration/temperature", "calibration/val_ece", "calibration/val_ece_raw"} <= set(acc.Tags()["scalars"])
    printed = subprocess.run([sys.executable, "-m", "nameorigin", "card", str(run / "checkpoints" / "refit.ckpt")],
                             capture_output=True, text=True)
    assert printed.returncode == 0 and printed.stdout == card


@pytest.mark.slow
def test_a_validation_split_without_errors_is_flagged_in_the_log_and_the_card(tmp_path):
    # Two languages with no letter in common: every validation name is right, so the likelihood keeps rising as
    # the temperature falls, and only the bound stops it.
    corpus = tmp_path / "names"
    corpus.mkdir()
    rng = random.Random(0)
    for language, letters in (("Japanese", "aeikmo"), ("Russian", "uvwxyz")):
        names = {"".join(rng.choices(letters, k=rng.randint(3, 7))).capitalize() for _ in range(80)}
        (corpus / f"{language}.txt").write_text("\n".join(sorted(names)) + "\n")
    result = train(tmp_path, f"data.root={corpus}", *TINY, "trainer.max_epochs=4", "refit.enabled=false")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the temperature stopped at the end of its range (0.1, 10.0)" in result.stdout + result.stderr
    (run,) = run_dirs(tmp_path)
    assert torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)["calibration"]["temperature"] == \
        pytest.approx(0.1)
    card = (run / "MODEL_CARD.md").read_text()
    assert "at the end of its search range" in card and "Trained on train + validation" not in card
    # refit.enabled=false: best.ckpt is the model, tested and carrying the card
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    assert torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)["model_card"] == card
    assert "  model  " not in result.stdout


@pytest.mark.slow
def test_a_run_without_calibration_says_so_in_its_card_and_refuses_coverage(tmp_path):
    corpus = write_corpus(tmp_path / "names")
    result = train(tmp_path, f"data.root={corpus}", *TINY, "trainer.max_epochs=1", "calibration.enabled=false")
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = run_dirs(tmp_path)
    for name in ("best.ckpt", "refit.ckpt"):  # the refit has no calibration to carry
        checkpoint = torch.load(run / "checkpoints" / name, weights_only=True)
        assert "calibration" not in checkpoint and float(checkpoint["state_dict"]["net.temperature"]) == 1.0
    card = (run / "MODEL_CARD.md").read_text()
    assert "no temperature scaling (trained with calibration.enabled=false)" in card
    assert "Off for this run" in card and not re.search(r"\bnan\b", card) and "## Prediction sets" not in card
    sets = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "scripts" / "predict.py"),
                           str(run / "checkpoints" / "refit.ckpt"), "Kanemoto", "--coverage", "0.9"],
                          capture_output=True, text=True)
    assert sets.returncode == 2 and sets.stderr.strip() == ("error: coverage 0.9: this model stores no "
                                                            "prediction-set levels (it was trained with "
                                                            "calibration.enabled=false); drop coverage")


def test_training_prints_no_deprecation_lines(trained):
    _, _, result = trained
    assert "LeafSpec" not in result.stderr + result.stdout
