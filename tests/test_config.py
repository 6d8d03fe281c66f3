"""Every config composes and instantiates; debug/experiment presets do what they say; sweeps and DDP run."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
import torch
from conftest import ROOT, TINY, last_scalars, run_dirs, run_script, score_in_one_process, train, write_corpus
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from hydra.utils import instantiate
from omegaconf import OmegaConf
from order_recorder import read_epochs
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nameorigin.base.errors import UserError
from nameorigin.config import Cell, register
from nameorigin.data.names import NamesDataModule
from nameorigin.fit.module import NameClassifier
from nameorigin.model.calibration import calibrate
from nameorigin.model.cells import CELLS, triton_cells
from nameorigin.training import pipeline

TRAINERS = sorted(p.stem for p in (ROOT / "conf" / "trainer").glob("*.yaml"))


def composed(*overrides: str):
    register()  # as train.py does before composing
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("train", overrides=list(overrides), return_hydra_config=True)


@pytest.mark.slow
def test_every_trainer_config_composes_and_instantiates(tmp_path):
    assert {"default", "cpu", "gpu", "mps", "ddp", "ddp_cpu"} <= set(TRAINERS)
    for name in TRAINERS:
        cfg = composed(f"trainer={name}", f"hydra.run.dir={tmp_path}")
        trainer_cfg = OmegaConf.to_container(cfg.trainer, resolve=False)
        trainer_cfg["default_root_dir"] = str(tmp_path)
        if trainer_cfg["accelerator"] in ("gpu", "mps"):  # no such device here: check the rest of the settings
            trainer_cfg.update(accelerator="cpu", devices=1, precision="bf16-mixed")
            trainer_cfg.pop("strategy", None)
            trainer_cfg.pop("sync_batchnorm", None)
        assert trainer_cfg["max_epochs"] is None, name  # left to the data: nameorigin.training.sizing picks it
        trainer_cfg["max_epochs"] = 3
        trainer = instantiate(trainer_cfg, logger=False, enable_progress_bar=False)
        assert trainer.max_epochs == 3, name
    assert composed("trainer=gpu").trainer.precision == "bf16-mixed"
    assert composed("trainer=ddp").trainer.devices == -1 and composed("trainer=ddp_cpu").trainer.devices == 2


def refusal(corpus, override: str) -> str:
    """How a bad setting is refused: when the config is composed (the schemas' types, keys and choices), or by
    train() before it builds a Trainer (ranges and rules, in __post_init__ and check_run). The subprocess test in
    test_train.py shows that either is one line and exit code 2."""
    try:
        cfg = composed(f"data.root={corpus}", f"paths.output_dir={corpus.parent / 'refused'}", *TINY,
                       *override.split(" "))
    except HydraException as error:
        return f"{error} ({error.__cause__})"
    with pytest.raises(UserError) as refused:
        pipeline.train(cfg)
    return str(refused.value)


@pytest.mark.slow
@pytest.mark.parametrize("override, message", [
    ("trainer.max_epochs=0", "trains nothing"),
    ("model.optimizer.lr=-1", "Invalid learning rate: -1"),
    ("+model.optimizer.betas=oops", "model.optimizer.betas='oops' is text where torch expects numbers"),
    ("model.optimizer.lr=abc", "model.optimizer.lr='abc' is text where torch expects numbers"),
    ("model.scheduler.T_max=abc", "model.scheduler.T_max='abc' is text where torch expects numbers"),
    ("model.label_smoothing=2", "model.label_smoothing=2.0 must be a number in [0, 1)"),
    ("model.known_names_cache=data/surnames", "is part of fine-tuning"),
    ("calibration.coverages=[1.5]", "1.5 must be a number between 0 and 1"),
    ("calibration.coverages=foo", "calibration.coverages=foo (Invalid value assigned: str is not a ListConfig"),
    ("calibration.bins=0", "calibration.bins=0 must be a whole number >= 1"),
    ("seed=abc", "seed=abc (Value 'abc' of type 'str' could not be converted to Integer"),
    ("trainer.max_epochs=1.5", "trainer.max_epochs=1.5 must be a whole number"),
    ("model.class_weights=[1,2]", "model.class_weights=[1, 2] must be 4 positive numbers, one per label"),
    ("model.class_weights=heavy", "model.class_weights='heavy': use balanced, sqrt, null or a list"),
    ("model.logit_adjustment=-1", "model.logit_adjustment=-1.0 must be a number in [0, inf)"),
    ("model.ngram_buckets=1.5", "model.ngram_buckets=1.5 (Value '1.5' of type 'float' could not be converted"),
    ("model.scheduler.T_max=0", "model.optimizer / model.scheduler: integer modulo by zero"),
    ("test=maybe", "test=maybe (Value 'maybe' is not a valid bool"),
    ("calibration.enabled=maybe", "calibration.enabled=maybe (Value 'maybe' is not a valid bool"),
    ("model.pretrained_lr_scale=-1", "model.pretrained_lr_scale=-1.0 must be a number in [0, inf)"),
    ("model.label_smoothing=abc", "model.label_smoothing=abc (Value 'abc' of type 'str' could not be converted"),
    ("model.dropout=nan", "model.dropout=nan must be a number in [0, 1)"),
    ("model.hidden_size=abc", "model.hidden_size=abc (Value 'abc' of type 'str' could not be converted to Integer"),
    ("model.hiden_size=8", "Key 'hiden_size' not in 'ModelConfig'"),
    ("model.cell=transformer", f"Invalid value 'transformer', expected one of [{', '.join(Cell)}]"),
    ("model.impl=fast", "Invalid value 'fast', expected one of [autograd, bptt, triton]"),
    ("model.impl=triton model.cell=rnn",
     f"model.impl=triton has kernels for {', '.join(triton_cells())} only, not model.cell=rnn: use model.impl=bptt"),
    ("model.impl=triton model.layers=2", "model.impl=triton runs one layer (model.layers=2): use model.impl=bptt"),
    ("model.layers=0", "model.layers=0 must be a whole number >= 1"),
    ("model.directions=3", "model.directions=3 must be 1 (reading each name forwards) or 2"),
    ("model.impl=triton model.hidden_size=24", "model.hidden_size=24: model.impl=triton takes a power of two >= 16"),
    ("model.fast_path=always", "Invalid value 'always', expected one of [auto, on, off]"),
    ("data.normalize=nfc", "Invalid value 'nfc', expected one of [ascii, none]"),
    ("data.split_fractions=[1,0,0]", "data.split_fractions=[1.0, 0.0, 0.0] must be three numbers"),
    ("data.batch_size=0", "data.batch_size=0 must be a whole number >= 1"),
    ("data.bach_size=8", "Key 'bach_size' not in 'NamesDataConfig'"),
    ("+data.bach_size=8", "got an unexpected keyword argument 'bach_size'"),
    ("callbacks.grad_accumulation.every_n_steps=abc", "every_n_steps='abc' must be a whole number >= 1"),
    ("seed=-1", "seed=-1 must be between 0 and 2**32 - 1"),
    ("model.optimizer._target_=torch.optim.Adamw", "model.optimizer._target_=torch.optim.Adamw cannot be imported"),
    ("callbacks.grad_accumulation._target_=nameorigin.Nope", "callbacks.grad_accumulation._target_=nameorigin.Nope"),
    ("objective=val/loss", "objective=val/loss: use val/acc, val/person_acc or null (the table's own)"),
    ("objective=val/person_acc", "objective=val/person_acc needs a table with counts or shares"),
])
def test_bad_settings_are_refused_when_composed_or_before_training(tiny_corpus, override, message):
    assert message in refusal(tiny_corpus, override)


@pytest.mark.parametrize("word, value", [("no", False), ("off", False), ("yes", True), ("on", True)])
def test_switches_read_booleans_as_omegaconf_does(word, value):
    cfg = composed(f"calibration.enabled={word}", f"test={word}", f"refit.enabled={word}")
    assert cfg.calibration.enabled is value and cfg.test is value and cfg.refit.enabled is value


def test_tutorial_experiment_is_the_pytorch_tutorial_setup():
    cfg = composed("experiment=tutorial")
    assert (cfg.model.cell, cfg.model.hidden_size, cfg.model.embedding_dim) == ("rnn", 128, 0)
    assert cfg.model.optimizer._target_ == "torch.optim.SGD"


def documented_commands() -> list[tuple[str, list[str]]]:
    """Every `python train.py ...` line of the README and docs/, as (where, overrides); a line continued with a
    backslash is joined. Sweeps (-m), launchers and placeholders (`...`) are left out: they need a cluster or a
    value the reader fills in."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8").replace("\\\n", " ")
        for line in re.findall(r"python train\.py([^#`\n]*)", text):
            tokens = re.sub(r"<[^>]*>", "1", line).split()  # a placeholder (<seed>, <run>) stands for any value
            if "-m" in tokens or "..." in tokens or any("hydra/launcher" in t for t in tokens):
                continue
            found.append((f"{page.name}: python train.py{line.rstrip()}", tokens))
    return found


@pytest.mark.slow
def test_every_documented_train_command_composes():
    """Each documented command's overrides name real settings with valid values, so a reader who copies it gets
    a run, not a refusal (placeholders like <folder> stand for a path and compose as one)."""
    commands = documented_commands()
    assert len(commands) > 20
    refused = []
    for where, tokens in commands:
        try:
            composed(*tokens)
        except Exception as error:  # noqa: BLE001  (which of the commands fails, and why)
            refused.append(f"{where}: {type(error).__name__}: {str(error).splitlines()[0]}")
    assert refused == []


@pytest.mark.slow
def test_overfit_debug_drives_the_loss_near_zero(tmp_path):
    corpus = write_corpus(tmp_path / "names")
    result = train(tmp_path, f"data.root={corpus}", *TINY, "debug=overfit", "trainer.max_epochs=40", "test=false",
                   "callbacks.grad_accumulation.every_n_steps=1000")
    assert result.returncode == 0, result.stderr[-2000:]
    (run,) = run_dirs(tmp_path)
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0}).Reload()
    losses = [e.value for e in events.Scalars("train/loss_epoch")]
    assert losses[0] > 1.0 and losses[-1] < 0.05, losses[::10]
    assert len(events.Scalars("train/loss_step")) == 2 * 40  # every step of the two batches is on the curve


@pytest.mark.slow
def test_fast_dev_run(tmp_path):
    corpus = write_corpus(tmp_path / "names")
    result = train(tmp_path, f"data.root={corpus}", *TINY, "debug=fdr")
    assert result.returncode == 0, result.stderr[-2000:]
    # One batch of each loop: one training step (one gradient check), a test figure, and no model to serve.
    (run,) = run_dirs(tmp_path)
    assert "'checks': 1," in (run / "train.log").read_text()
    assert "test/acc" in json.loads((run / "results.json").read_text())["metrics"]
    assert "  test/acc " in result.stdout and not (run / "checkpoints").exists()


@pytest.mark.slow
def test_profiler_writes_its_report_into_the_run_folder(tmp_path):
    corpus = write_corpus(tmp_path / "names")
    result = train(tmp_path, f"data.root={corpus}", *TINY, "debug=profiler", "test=false")
    assert result.returncode == 0, result.stderr[-2000:]
    (run,) = run_dirs(tmp_path)
    assert "run_training_epoch" in (run / "fit-profile.txt").read_text()
    assert "run_training_epoch" not in result.stdout  # the report is not dumped on the terminal


@pytest.mark.slow
def test_multirun_sweeps_every_cell_into_one_sweep_folder_each_with_its_gradient_check(tmp_path):
    """One job per cell of the registry: each trains, and its dashboard's split of the shared weights' gradient
    by timestep adds up to `.grad`."""
    corpus = write_corpus(tmp_path / "names")
    every_cell = list(CELLS)
    result = train(tmp_path, "-m", f"model.cell={','.join(every_cell)}", f"data.root={corpus}", *TINY,
                   "trainer.max_epochs=1", "test=false", timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    (sweep,) = (tmp_path / "outputs" / "multirun").glob("*/*")
    jobs = sorted((p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    assert [j.name for j in jobs] == [str(i) for i in range(len(every_cell))]
    cells = [json.loads(json.dumps(OmegaConf.to_container(OmegaConf.load(j / ".hydra" / "config.yaml"))))
             ["model"]["cell"] for j in jobs]
    assert cells == every_cell
    assert all((j / "checkpoints" / "last.ckpt").is_file() for j in jobs)
    for job, cell in zip(jobs, cells, strict=True):
        events = EventAccumulator(str(job / "tensorboard"), size_guidance={"scalars": 0}).Reload()
        for weight in ("weight_ih", "weight_hh", "bias_hh"):
            residuals = [e.value for e in events.Scalars(f"grad_accum/{weight}/residual")]
            assert residuals and max(residuals) < 1e-5, (cell, weight, residuals)


@pytest.mark.slow
@pytest.mark.parametrize("impl, fast_path", [("autograd", "auto"), ("bptt", "on")])
def test_gpu_trainer_settings_train_end_to_end_on_the_cpu(tmp_path, impl, fast_path):
    """trainer=gpu's bf16-mixed precision, with only the accelerator swapped (TINY): the first run on a real GPU
    crashed in validation's sanity check, since autocast handed bptt.py bf16 tensors. With model.fast_path=on the
    GPU's fast path runs too, eagerly (nameorigin.fit.graphed): manual optimization, one-length batches, the
    split on the device, the tallies logged once an epoch."""
    corpus = write_corpus(tmp_path / "names")
    result = train(tmp_path, "trainer=gpu", f"data.root={corpus}", *TINY, f"model.impl={impl}",
                   f"model.fast_path={fast_path}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "bfloat16 Automatic Mixed Precision" in result.stdout + result.stderr
    assert ("fast path: one-length batches" in result.stdout + result.stderr) == (fast_path == "on")
    (run,) = run_dirs(tmp_path)
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0}).Reload()
    residuals = [e.value for e in events.Scalars("grad_accum/weight_hh/residual")]
    assert residuals and max(residuals) < 1e-5, residuals
    assert {"test/acc", "calibration/temperature", "train/loss_epoch", "train/acc", "time/train_epoch_s",
            "time/train_names_per_s"} <= set(events.Tags()["scalars"])
    losses = [e.value for e in events.Scalars("train/loss_epoch")]
    assert len(losses) == 2 and losses[1] < losses[0]  # two epochs, and it learns
    assert events.Scalars("test/acc")[-1].value > 0.5


@pytest.mark.slow
def test_ddp_cpu_two_processes_train_log_once_and_test_like_one_process(tmp_path):
    """Held-out splits of 17 names in batches of 8 shard unevenly on purpose: 9 and 8 names per rank (before,
    the last rank repeated a batch, counting names twice, and the gather of unequal shares crashed gloo)."""
    corpus = write_corpus(tmp_path / "names", per_language=45)
    order = tmp_path / "order"  # what each rank trained on, epoch by epoch (tests/order_recorder.py)
    result = run_script([str(ROOT / "train.py"), "trainer=ddp_cpu", f"data.root={corpus}", *TINY, "data.batch_size=8",
                         "+callbacks.order._target_=order_recorder.OrderRecorder", f"+callbacks.order.folder={order}"],
                        cwd=tmp_path, timeout=600, env={"PYTHONPATH": str(ROOT / "tests")})
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [read_epochs(order, rank) for rank in (0, 1)]
    for epoch in range(2):  # within an epoch the ranks' batches are disjoint; each rank's order changes
        shares = [Counter(row for batch in ranks[rank][epoch] for row in batch) for rank in (0, 1)]
        assert not shares[0] & shares[1] and len(ranks[0][epoch]) == len(ranks[1][epoch])
    assert ranks[0][0] != ranks[0][1] and ranks[1][0] != ranks[1][1]
    assert "results:" in result.stdout
    unsynced = sorted(set(re.findall(r"self\.log\('([^']+)', \.\.\., sync_dist=True\)", result.stderr)))
    assert not unsynced, f"epoch-level values logged per rank: {unsynced}"
    (run,) = run_dirs(tmp_path)
    assert len(list((run / "tensorboard").glob("events.out.tfevents.*"))) >= 1
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    assert "refit skipped: it runs on one device" in result.stdout + result.stderr
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0}).Reload()
    residuals = [e.value for e in events.Scalars("grad_accum/weight_hh/residual")]
    assert residuals and max(residuals) < 1e-5
    steps = [e.step for e in events.Scalars("grad_accum/weight_hh/residual")]
    assert len(steps) == len(set(steps))  # rank 0 only: one value per inspected step

    datamodule = NamesDataModule(root=str(corpus), batch_size=8, download=False)
    datamodule.setup()
    assert len(datamodule.splits["test"]) == len(datamodule.splits["val"]) == 17
    best = run / "checkpoints" / "best.ckpt"
    one, ddp = score_in_one_process(best, datamodule), last_scalars(run / "tensorboard")
    compared = ["test/acc", "test/macro_f1", "test/ece", "test/ece_raw", "test/coverage_90", "test/set_size_90",
                "test/loss", "test/acc_any"]
    for key in compared:
        assert ddp[key] == pytest.approx(one[key], abs=1e-6), (key, ddp[key], one[key])
    # Calibration ran on rank 0 over all 17 validation names, not on its 9.
    model = NameClassifier(**torch.load(best, weights_only=True)["hyper_parameters"])
    model.load_state_dict(torch.load(best, weights_only=True)["state_dict"])
    model.net.temperature.fill_(1.0)
    logits, targets, _ = model.collect_logits(datamodule.whole_split_loader("val"))
    assert len(targets) == 17
    fitted = calibrate(logits, targets, [0.9], 15).temperature
    assert torch.load(best, weights_only=True)["calibration"]["temperature"] == pytest.approx(fitted, abs=1e-6)


def test_each_yaml_sets_only_what_differs_from_its_schema():
    """Defaults are stated once, in nameorigin.config: a group's YAML file names its schema and writes only the
    settings that differ from it (so a default cannot say one thing in Python and another in YAML)."""
    import yaml

    from nameorigin.config import SCHEMAS

    by_name = {name: schema for (_, name), schema in SCHEMAS.items()}
    checked, repeated = 0, []
    for path in sorted((ROOT / "conf").rglob("*.yaml")):
        settings = yaml.safe_load(path.read_text()) or {}
        named = [entry for entry in settings.get("defaults") or [] if isinstance(entry, str) and entry in by_name]
        if not named:
            continue
        checked += 1
        defaults = OmegaConf.to_container(OmegaConf.structured(by_name[named[0]]), resolve=False, enum_to_str=True)
        repeated += [f"{path.relative_to(ROOT)}: {key}: {value!r}" for key, value in settings.items()
                     if key != "defaults" and key in defaults and defaults[key] == value]
    assert checked == len(SCHEMAS) and repeated == []


def test_a_checkpoint_written_before_the_ngram_hash_setting_reads_the_hash_it_was_trained_with():
    """New configs hash n-grams "mixed"; a checkpoint's config or transfer shape that lacks the field was trained
    with the polynomial hash, and must be read through it (its n-gram weights sit in those buckets)."""
    from nameorigin.config import ModelConfig, NgramHash, TransferShape, from_plain, plain

    assert ModelConfig().ngram_hash == NgramHash.mixed
    assert from_plain(ModelConfig, plain(ModelConfig())).ngram_hash == NgramHash.mixed
    before = {key: value for key, value in plain(ModelConfig()).items() if key != "ngram_hash"}
    assert from_plain(ModelConfig, before).ngram_hash == NgramHash.polynomial
    shape = from_plain(TransferShape, {"source_classes": 3, "source_ngram_buckets": 64})
    assert shape.source_ngram_hash == NgramHash.polynomial and shape
    assert not TransferShape() and not from_plain(TransferShape, {})
    with pytest.raises(UserError, match="model.ngram_hash='crc'"):
        ModelConfig(ngram_hash="crc")
