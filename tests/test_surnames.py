"""The names-dataset surnames: conversion from the package's format, soft-target pretraining, fine-tuning from
the pretrained checkpoint, known-name evidence and prediction, on a tiny corpus the tests write."""

from __future__ import annotations

import gzip
import json
import pickle
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import (
    NAMEORIGIN,
    ROOT,
    TINY,
    last_scalars,
    run_dirs,
    run_in_process,
    score_in_one_process,
    train,
    train_refused,
    write_corpus,
)

from nameorigin.base.errors import UserError
from nameorigin.base.textnorm import normalize_name
from nameorigin.config import ModelConfig
from nameorigin.data.surnames import VOCAB, Surnames, SurnamesDataModule, convert
from nameorigin.fit.module import NameClassifier
from nameorigin.model.known import KnownNames
from nameorigin.training.starting_point import StartingPoint

COUNTRY_OF = {"Japanese": "JP", "Russian": "RU", "Irish": "IE", "Italian": "IT"}
SPECIAL = {
    "\u0418\u0432\u0430\u043d\u043e\u0432": {"RU": 1.0},  # Cyrillic: dropped (other script)
    "M\u00fcller": {"DE": 0.8, "AT": 0.2}, "Muller": {"DE": 0.4, "FR": 0.6},  # fold to one name: merged
    "De La Cruz": {"ES": 0.7, "PH": 0.3},  # a space: kept
    "Sm!th": {"US": 1.0},  # other characters: dropped
}


def write_package_pickle(folder: Path, corpus: Path, seed: int = 0) -> Path:
    """A last_names.pkl.gz in names-dataset's own format: half the tiny corpus' names, plus look-alikes."""
    rng = random.Random(seed)
    names: dict[str, dict] = {}
    for language, code in COUNTRY_OF.items():
        for i, name in enumerate(sorted(set((corpus / f"{language}.txt").read_text().split()))):
            if i % 2 == 0:
                names[name] = {"country": {code: 0.9, "US": 0.1}, "gender": {}, "rank": {code: i + 1}}
        for i in range(60):  # more names of each country, shaped like the corpus' ones
            stem = "".join(rng.choice("bcdfgklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(1, 3)))
            ending = {"JP": "moto", "RU": "ovsky", "IE": "agh", "IT": "elli"}[code]
            names[stem.capitalize() + ending + "x" * (i % 2)] = {"country": {code: 0.7, "GB": 0.3}, "gender": {},
                                                               "rank": {}}
    for name, shares in SPECIAL.items():
        names[name] = {"country": shares, "gender": {}, "rank": {}}
    path = folder / "last_names.pkl.gz"
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb") as f:
        pickle.dump(names, f)
    return path


@pytest.fixture(scope="module")
def tiny_surnames(tmp_path_factory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("surnames")
    corpus = write_corpus(work / "names")
    cache = work / "cache"
    convert(cache, write_package_pickle(work / "package", corpus))
    return cache, corpus


def test_conversion_applies_the_decisions_and_writes_a_plain_checked_cache(tiny_surnames):
    cache, _ = tiny_surnames
    meta = json.loads((cache / "last_names.json").read_text())
    counts = meta["counts"]
    assert counts["dropped_other_script"] == 1 and counts["dropped_other_characters"] == 1
    assert counts["merged_spellings"] == 1 and counts["with_space"] == 1
    assert counts["kept"] == counts["raw_names"] - 3
    assert sorted(p.name for p in cache.iterdir()) == ["last_names.json", "last_names.npz"]  # no temporary files
    with np.load(cache / "last_names.npz", allow_pickle=False) as arrays:  # plain arrays, no pickle
        assert arrays["top_index"].shape[1] == 10
    corpus = Surnames(cache)
    muller = corpus.names.index("Muller")
    shares = dict(zip(corpus.countries, corpus.shares(torch.tensor([muller]))[0].tolist(), strict=True))
    assert (shares["DE"], shares["AT"], shares["FR"]) == pytest.approx((0.6, 0.1, 0.3))  # summed, renormalized
    assert "De La Cruz" in corpus.names and "Sm!th" not in corpus.names
    assert meta["country_names"][corpus.countries.index("JP")] in ("Japan", "JP")


def test_interrupted_conversion_leaves_nothing_behind(tmp_path):
    broken = tmp_path / "last_names.pkl.gz"
    broken.write_bytes(gzip.compress(pickle.dumps({"A": {"country": {"JP": 1.0}}}))[:20])
    with pytest.raises(EOFError):
        convert(tmp_path / "cache", broken)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_tampered_cache_is_refused(tiny_surnames, tmp_path):
    cache, _ = tiny_surnames
    copy = tmp_path / "cache"
    copy.mkdir()
    (copy / "last_names.json").write_text((cache / "last_names.json").read_text())
    (copy / "last_names.npz").write_bytes((cache / "last_names.npz").read_bytes()[:-10] + b"0" * 10)
    with pytest.raises(ValueError, match="does not match its sha256"):
        Surnames(copy)


def test_datamodule_splits_by_name_and_the_soft_loss_is_cross_entropy_against_the_shares(tiny_surnames):
    cache, _ = tiny_surnames
    data = SurnamesDataModule(cache=str(cache), split_fractions=[0.8, 0.1, 0.1], batch_size=16)
    data.setup()
    names = {s: {data.corpus.names[r] for r in rows} for s, rows in data.splits.items()}
    assert not (names["train"] & names["val"] or names["train"] & names["test"] or names["val"] & names["test"])
    batch = next(iter(data.train_dataloader()))
    tokens, lengths, targets, shares = batch[:4]
    torch.testing.assert_close(shares.sum(1), torch.ones(len(shares)))
    assert bool((targets == shares.argmax(1)).all()) and tokens.shape[1] == int(lengths.max())
    module = NameClassifier(ModelConfig(hidden_size=8, embedding_dim=4, soft_targets=True), data.vocab, data.labels)
    logits = torch.randn(len(targets), len(data.labels))
    expected = -(shares * logits.log_softmax(-1)).sum(1).mean()
    torch.testing.assert_close(module.loss(logits, batch), expected)


def test_datamodule_refuses_to_resume_on_another_split(tiny_surnames):
    cache, _ = tiny_surnames
    saved = SurnamesDataModule(cache=str(cache), split_fractions=[0.8, 0.1, 0.1])
    saved.setup()
    same = SurnamesDataModule(cache=str(cache), split_fractions=[0.8, 0.1, 0.1])
    same.setup()
    same.load_state_dict(saved.state_dict())
    other = SurnamesDataModule(cache=str(cache), split_fractions=[0.8, 0.1, 0.1], split_seed=1)
    other.setup()
    with pytest.raises(UserError, match=re.escape("cannot resume on another split: data.split_seed=1 (checkpoint: 0)")):
        other.load_state_dict(saved.state_dict())


# The surnames alone, folded to ASCII (the recipe these tests' cache holds); tests/test_names_dataset.py pretrains
# on both lists in every alphabet.
PRETRAIN = ["experiment=surnames_pretrain", "data.sources=[last_names]", "data.normalize=ascii", "data.leave_out_of=[]",
            "data.split_fractions=[0.8,0.1,0.1]", "data.batch_size=32",
            "model.hidden_size=32", "model.embedding_dim=16", "trainer.max_epochs=3", "trainer.accelerator=cpu",
            "callbacks.progress_bar=null", "callbacks.grad_accumulation.every_n_steps=3",
            "trainer.enable_model_summary=false"]


@pytest.fixture(scope="module")
def pretrained(tiny_surnames, tmp_path_factory) -> Path:
    cache, _ = tiny_surnames
    work = tmp_path_factory.mktemp("pretrain")
    result = train(work, *PRETRAIN, f"data.cache={cache}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "test/acc_top5" in result.stdout and "test/loss" in result.stdout
    (run,) = run_dirs(work)
    return run / "checkpoints" / "best.ckpt"


@pytest.mark.slow
def test_pretrained_checkpoint_predicts_countries_with_codes_and_names(pretrained, tmp_path):
    checkpoint = torch.load(pretrained, weights_only=True)
    hparams = checkpoint["hyper_parameters"]
    assert hparams["config"]["soft_targets"] and len(hparams["labels"]) > 5
    result = run_in_process([str(ROOT / "scripts" / "predict.py"), str(pretrained), "Kanemoto", "--format", "json"],
                        cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    top = json.loads(result.stdout)[0]["predictions"][0]
    assert len(top["country"]) == 2 and top["label_name"]  # data.label_name of the surnames: country
    text = run_in_process([str(ROOT / "scripts" / "predict.py"), str(pretrained), "Kanemoto"], cwd=tmp_path)
    assert "JP" in text.stdout and ("Japan" in text.stdout)


def test_initialize_really_loads_the_pretrained_weights_and_the_known_names(pretrained, tiny_surnames):
    cache, _ = tiny_surnames
    checkpoint = torch.load(pretrained, weights_only=True)
    config = ModelConfig(hidden_size=32, embedding_dim=16, init_from=str(pretrained), known_names_cache=str(cache))
    vocab = checkpoint["hyper_parameters"]["vocab"]
    point = StartingPoint.read(str(pretrained), "model.init_from")
    point.check_fits(config)
    point = point.with_known_names(config.known_names_cache)
    model = NameClassifier(config, vocab, ["A", "B"], transfer=point.shape(config, vocab))
    point.initialize(model.net, vocab)
    for key in ("embedding.weight", "cell.weight_hh", "cell.bias_ih"):
        torch.testing.assert_close(model.net.get_parameter(key), checkpoint["state_dict"][f"net.{key}"])
    layers = model.net.transfer
    torch.testing.assert_close(layers.source_head.weight, checkpoint["state_dict"]["net.head.weight"])
    torch.testing.assert_close(layers.source_ngram.weight, checkpoint["state_dict"]["net.ngram.weight"])
    # "Muller" is known (merged spellings), "O'Muller" is not; the key ignores case and punctuation.
    index = {c: i for i, c in enumerate(VOCAB)}
    names = ["Muller", "MULLER", "O'Muller", "De La Cruz", "Delacruz"]
    tokens = torch.zeros(len(names), 12, dtype=torch.long)
    for row, name in enumerate(names):
        tokens[row, : len(name)] = torch.tensor([index[c] for c in name])
    evidence = layers.known(tokens, torch.tensor([len(n) for n in names]))
    assert evidence[:, -1].tolist() == [1.0, 1.0, 0.0, 1.0, 1.0]
    assert evidence[0, :-1].sum() == pytest.approx(1.0, abs=1e-3) and evidence[2, :-1].sum() == 0


def test_known_names_fingerprint_matches_a_plain_python_reference():
    from nameorigin.model.known import BASES, SECOND_PRIME
    from nameorigin.model.ngram import PRIME

    vocab = ["<pad>", "<unk>", " ", "'", "A", "b", "C"]
    table = KnownNames(len(vocab), 3, 0)
    table.fill(vocab, ["Ab", "bC"], torch.zeros(2, 10, dtype=torch.long), torch.ones(2, 10))
    tokens, lengths = torch.tensor([[4, 3, 5, 0], [5, 2, 6, 0]]), torch.tensor([3, 3])

    def reference(letters: str) -> int:
        first = second = 0
        for c in letters:
            first, second = (first * BASES[0] + ord(c) - 96) % PRIME, (second * BASES[1] + ord(c) - 96) % SECOND_PRIME
        return first * (1 << 31) + second

    assert table.fingerprint(tokens, lengths).tolist() == [reference("ab"), reference("bc")]
    assert sorted(table.fingerprints.tolist()) == sorted([reference("ab"), reference("bc")])
    # The table's names as tokens: a character outside the vocabulary is <unk> (1), padding 0.
    from nameorigin.model.known import padded_tokens

    padded, sizes = padded_tokens(vocab, ["Ab", "b\u00e9C", "'"])
    assert padded.tolist() == [[4, 5, 0], [5, 1, 6], [3, 0, 0]] and sizes.tolist() == [2, 3, 1]


@pytest.mark.slow
def test_finetune_from_the_pretrained_checkpoint_end_to_end(pretrained, tiny_surnames, tmp_path):
    cache, ascii_corpus = tiny_surnames
    # Accents kept (data.normalize=none) on an ASCII pretraining: the run's training names grow its vocabulary.
    corpus = tmp_path / "accented"
    corpus.mkdir()
    for source in ascii_corpus.glob("*.txt"):
        accented = {"Italian": ["Niccol\u00f2", "Forl\u00ec", "Cant\u00f9"], "Irish": ["\u00d3 Briain", "S\u00e9amus"]}
        (corpus / source.name).write_text(source.read_text() + "".join(
            f"{name}\n" for name in accented.get(source.stem, [])))
    result = train(tmp_path, "experiment=finetune", f"model.init_from={pretrained}", f"data.root={corpus}",
                   f"model.known_names_cache={cache}", *TINY, "model.embedding_dim=16", "trainer.max_epochs=3",
                   "data.normalize=none", "data.split_fractions=[0.9,0.05,0.05]")
    assert result.returncode == 0, result.stderr[-3000:]
    for key in ("test/acc_in_pretrain", "test/acc_not_in_pretrain", "test/macro_f1_in_pretrain",
                "test/macro_f1_not_in_pretrain"):
        assert f"  {key} " in result.stdout, key
    (run,) = run_dirs(tmp_path)
    best = run / "checkpoints" / "best.ckpt"
    saved, start = torch.load(best, weights_only=True), torch.load(pretrained, weights_only=True)
    vocab, pretrained_vocab = saved["hyper_parameters"]["vocab"], start["hyper_parameters"]["vocab"]
    train_names = {name for name, _ in json.loads((run / "split.json").read_text())["splits"]["train"]}
    grown = sorted({c for name in train_names for c in name} - set(pretrained_vocab))
    assert grown and vocab == [*pretrained_vocab, *grown], vocab[len(pretrained_vocab):]
    assert saved["hyper_parameters"]["transfer"]["source_vocab"] == len(pretrained_vocab)
    folded = saved["state_dict"]["net.transfer.source_tokens"].tolist()
    assert folded[: len(pretrained_vocab)] == list(range(len(pretrained_vocab)))
    assert all(pretrained_vocab[folded[vocab.index(c)]] == normalize_name(c) for c in grown)
    predicted = run_in_process([str(ROOT / "scripts" / "predict.py"), str(best), "Kanemoto", "Pavlovsky",
                            "--format", "json"], cwd=tmp_path)
    assert predicted.returncode == 0, predicted.stderr
    assert [r["predictions"][0]["language"] for r in json.loads(predicted.stdout)] == ["Japanese", "Russian"]
    # The same split computed outside the model (names-dataset keys as strings) gives the same scores.
    from nameorigin.analysis.evaluate import evaluate
    from nameorigin.model.known import name_key
    from nameorigin.serving.predict import Predictor

    report = evaluate(Predictor.from_checkpoint(best), corpus, known_keys={name_key(n) for n in Surnames(cache).names})
    printed = {line.split()[0]: float(line.split()[1]) for line in result.stdout.splitlines()
               if line.startswith("  test/")}
    assert report["in_pretrain"]["size"] > 0 and report["not_in_pretrain"]["size"] > 0
    assert report["in_pretrain"]["accuracy"] == pytest.approx(printed["test/acc_in_pretrain"], abs=1e-4)
    assert report["not_in_pretrain"]["accuracy"] == pytest.approx(printed["test/acc_not_in_pretrain"], abs=1e-4)
    assert report["in_pretrain"]["macro_f1"] == pytest.approx(printed["test/macro_f1_in_pretrain"], abs=1e-4)
    # The run says how many of its test names the starting point's table holds, in the results and the card.
    size = report["in_pretrain"]["size"] + report["not_in_pretrain"]["size"]
    assert printed["test/share_in_pretrain"] == pytest.approx(report["in_pretrain"]["size"] / size, abs=1e-4)
    assert f"- {report['in_pretrain']['size']:,} of {size:,} (" in (run / "MODEL_CARD.md").read_text()
    shown = run_in_process([NAMEORIGIN, "evaluate", str(best), str(corpus),
                        "--known-names", str(cache)], cwd=tmp_path)
    assert shown.returncode == 0 and "found in names-dataset" in shown.stdout, shown.stderr
    # A fine-tuned model explains itself too: the pretrained country head reads every state, and a name found in
    # names-dataset has a known-name part; the parts still add up to the served score.
    known = [n for n in Surnames(cache).names[:400] if Predictor.from_checkpoint(best).encode(n)[1] is None][:20]
    for answer in Predictor.from_checkpoint(best).explain([*known, "Kanemoto", "Zzyzx"]):
        why = answer.explanation
        assert abs(why.residual) <= 1e-3 * max(abs(why.score), 1.0), (answer.name, why.residual, why.score)
        assert [kind for kind, _, _ in why.parts].count("known name") == 1
    assert any(abs(answer.explanation.parts[-1][2]) > 1e-6 for answer in Predictor.from_checkpoint(best).explain(known))
    # The known-name lookup exports as a torch.export program (agreeing to 1e-5); ONNX is refused, cleanly.
    export = [NAMEORIGIN, "export"]
    refused = run_in_process([*export, str(best), "--out", str(tmp_path / "x" / "m"), "--formats", "onnx"], tmp_path)
    assert refused.returncode == 2 and "searchsorted" in refused.stderr and not (tmp_path / "x").exists()
    written = run_in_process([*export, str(best), "--out", str(tmp_path / "e" / "m")], tmp_path)
    assert written.returncode == 0 and sorted(p.name for p in (tmp_path / "e").iterdir()) == ["m.json", "m.pt2"]
    ours, served = Predictor.from_checkpoint(best), Predictor.load(tmp_path / "e" / "m.pt2")
    encoded = [ours.encode(n)[0] for n in ["Kanemoto", "Muller", "De La Cruz", "Pavlovsky", "Zzz", "Niccol\u00f2"]]
    torch.testing.assert_close(served.probabilities(encoded), ours.probabilities(encoded), atol=1e-5, rtol=0)
    # The lookup reads a grown character as its fold: a known name spelt with it is found ("Cantù" as "Cantu").
    names = Surnames(cache).names
    char, known = next((c, n) for c in grown for n in names if normalize_name(c) in n)
    variant = known.replace(normalize_name(char), char, 1)
    tokens, lengths, _ = ours.encode_many([variant, "Zq" + variant])
    assert ours.net.transfer.known(ours.net.transfer.as_pretrained(tokens), lengths)[:, -1].tolist() == [1.0, 0.0]


@pytest.mark.parametrize("override, message", [
    ("model.hidden_size=24", "hidden_size=24 (checkpoint: 32)"),
    ("model.cell=lstm", "cell=lstm (checkpoint: gru)"),
])
def test_finetune_refuses_a_checkpoint_that_does_not_fit(pretrained, tiny_surnames, tmp_path, override, message):
    _, corpus = tiny_surnames
    result = train_refused(tmp_path, "experiment=finetune", f"model.init_from={pretrained}", f"data.root={corpus}",
                           "model.known_names_cache=null", *TINY, "model.embedding_dim=16", override)
    assert result.returncode == 2 and message in result.stderr, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1 and not run_dirs(tmp_path)


def test_finetune_refuses_a_checkpoint_whose_vocabulary_does_not_match_its_embedding(pretrained, tiny_surnames,
                                                                                      tmp_path):
    _, corpus = tiny_surnames
    checkpoint = torch.load(pretrained, weights_only=True)
    checkpoint["hyper_parameters"]["vocab"] = checkpoint["hyper_parameters"]["vocab"][:-5]
    bad = tmp_path / "bad.ckpt"
    torch.save(checkpoint, bad)
    result = train_refused(tmp_path, "experiment=finetune", f"model.init_from={bad}", f"data.root={corpus}",
                           "model.known_names_cache=null", *TINY, "model.embedding_dim=16")
    assert result.returncode == 2 and "vocabulary" in result.stderr, result.stderr[-2000:]
    missing = train_refused(tmp_path, "experiment=finetune", f"data.root={corpus}", *TINY)
    assert missing.returncode == 2 and "model.init_from is missing" in missing.stderr


@pytest.mark.slow
def test_pretraining_under_ddp_cpu_on_a_sample_tests_like_one_process(tiny_surnames, tmp_path):
    """A 250-name sample holds 25 test names: batches of 16 and 9 on the two ranks, which gloo's gather of equal
    shapes could not take."""
    cache, _ = tiny_surnames
    result = train(tmp_path, *PRETRAIN, f"data.cache={cache}", "data.limit=250", "data.batch_size=16",
                   "trainer=ddp_cpu", "trainer.max_epochs=2", timeout=600, fresh=True)
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = run_dirs(tmp_path)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    datamodule = SurnamesDataModule(cache=str(cache), split_fractions=(0.8, 0.1, 0.1), limit=250, batch_size=16)
    datamodule.setup()
    assert len(datamodule.splits["test"]) == 25
    one, ddp = score_in_one_process(run / "checkpoints" / "best.ckpt", datamodule), last_scalars(run / "tensorboard")
    for key in ("test/acc", "test/macro_f1", "test/ece", "test/loss", "test/acc_any"):
        assert ddp[key] == pytest.approx(one[key], abs=1e-6), (key, ddp[key], one[key])


@pytest.mark.slow
def test_real_package_converts_with_the_documented_counts(tmp_path):
    """The first names of the installed package in every alphabet (the last names convert alike, at twice the
    time): docs/pretraining.md's count of the first names, and the letters beyond ASCII kept."""
    pytest.importorskip("names_dataset")
    from nameorigin.data.names_dataset import Recipe

    meta = convert(tmp_path / "cache", recipe=Recipe(sources=("first_names",), normalize="none"))
    counts = meta["counts"]
    assert counts["raw_first_names"] == 727_556 and len(meta["countries"]) == 105
    assert counts["not_ascii"] > 100_000 and "\u0418" in meta["vocab"]  # Cyrillic kept


@pytest.mark.parametrize("kwargs, message", [
    ({"limit": -5}, "data.limit=-5 must be a whole number >= 0"),
    ({"batch_size": 0}, "data.batch_size=0"),
    ({"num_workers": -1}, "data.num_workers=-1 must be a whole number >= 0"),
    ({"limit": 2.5}, "data.limit=2.5 must be a whole number"),
    ({"split_fractions": [0.5, 0.5]}, "data.split_fractions=[0.5, 0.5] must be three numbers"),
    ({"cache": __file__}, "is a file: pass a folder"),
])
def test_surnames_datamodule_refuses_bad_settings(kwargs, message):
    with pytest.raises(UserError, match=re.escape(message)):
        SurnamesDataModule(**{"cache": "unused", **kwargs})


def test_the_people_table_draws_people_from_the_surnames_and_counts_them(tiny_surnames, tmp_path):
    """table_scale's people table: a row per person from the converted surnames, each person's country one of the
    name's own, then counted as data.rows=people does (the tiny cache has too few names per country to split,
    which the 20-million-row figure in the docs does)."""
    import pyarrow.parquet as pq

    from benchmarks.table_scale import PEOPLE, write_people
    from nameorigin.config import TableDataConfig
    from nameorigin.data.table import read_table

    cache, _ = tiny_surnames
    out = write_people(tmp_path / "people.parquet", 20000, cache)
    corpus = Surnames(cache)
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == 20000
    allowed = {name: {corpus.countries[j] for j, share in zip(corpus.top_index[k].tolist(),
                                                             corpus.top_share[k].tolist(), strict=True) if share > 0}
               for k, name in enumerate(corpus.names)}
    assert all(row["country"] in allowed[row["name"]] for row in rows)
    table = read_table(TableDataConfig(path=str(out), **PEOPLE))
    assert table.counts["rows"] == 20000 and table.weights.sum() == 20000 - table.counts["blank_name"]
    assert table.counts["distinct_names"] == len({normalize_name(row["name"], "ascii") for row in rows} - {""})


def max_scalar(folder: Path, tag: str) -> float:
    """The largest value a run's TensorBoard events hold for `tag`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0}).Reload()
    return max(event.value for event in events.Scalars(tag))


@pytest.mark.slow
def test_auto_transfer_trains_both_candidates_and_serves_the_one_validation_picks(pretrained, tiny_surnames,
                                                                                  tmp_path):
    cache, corpus = tiny_surnames
    # The pretraining published its model where runs look for a starting point (byte for byte its best.ckpt).
    published = next(p for p in pretrained.parents if (p / "data/pretrained/surnames.ckpt").is_file()) \
        / "data/pretrained/surnames.ckpt"
    assert published.read_bytes() == pretrained.read_bytes()
    result = train(tmp_path, f"data.root={corpus}", *TINY, "model.embedding_dim=16", "trainer.max_epochs=3",
                   f"transfer.starting_point={published}", f"transfer.known_names_cache={cache}")
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = run_dirs(tmp_path)
    results = json.loads((run / "results.json").read_text())
    metrics = results["metrics"]
    # Both results name the corpus the starting point learnt from: the pretraining's as published, the run's as tried.
    pretraining = json.loads((pretrained.parents[1] / "results.json").read_text())
    corpus = torch.load(pretrained, weights_only=True)["data"]["corpus_sha256"]
    assert pretraining["published_corpus_sha256"] == corpus
    assert results["transfer"]["starting_point"] == {"path": str(published), "corpus_sha256": corpus}
    plain_acc, transferred_acc = metrics["transfer/val_acc_plain"], metrics["transfer/val_acc_transferred"]
    # Each candidate's figure is its own best validation accuracy, as its TensorBoard logged it.
    assert plain_acc == pytest.approx(max_scalar(run / "tensorboard", "val/acc"), abs=1e-6)
    assert transferred_acc == pytest.approx(max_scalar(run / "transfer" / "tensorboard", "val/acc"), abs=1e-6)
    chosen = transferred_acc > plain_acc
    assert metrics["transfer/chosen"] == float(chosen)
    served, removed = (run / "transfer", run) if chosen else (run, run / "transfer")
    assert not (removed / "checkpoints").exists() and (served / "checkpoints" / "best.ckpt").is_file()
    model = torch.load(served / "checkpoints" / "best.ckpt", weights_only=True)["hyper_parameters"]["config"]
    assert (model["init_from"] == str(published)) == chosen
    log = (run / "train.log").read_text()
    assert f"validation accuracy {plain_acc:.4f} plain, {transferred_acc:.4f} from the starting point" in log
    assert "Outside data tried" in (run / "MODEL_CARD.md").read_text()


@pytest.mark.slow
def test_on_a_table_with_counts_and_shares_validation_picks_by_the_share_of_people_right(pretrained, tiny_surnames,
                                                                                       tmp_path):
    """The epoch (best.ckpt) and the candidate are picked by val/person_acc, the figure the margin reports for such
    a table; the results block and the card show both candidates' figures on it, and the served one is the higher."""
    from test_table_shares import gender_table

    cache, _ = tiny_surnames
    published = next(p for p in pretrained.parents if (p / "data/pretrained/surnames.ckpt").is_file()) \
        / "data/pretrained/surnames.ckpt"
    table = gender_table(tmp_path / "first.csv")
    result = train(tmp_path, "data=table", f"data.path={table}", "data.name_column=first",
                   "data.share_columns=[F,M]", "data.weight_column=people", "data.label_name=gender",
                   "model.label_smoothing=0", *TINY, "margin.enabled=false",
                   f"transfer.starting_point={published}", f"transfer.known_names_cache={cache}")
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = run_dirs(tmp_path)
    metrics = json.loads((run / "results.json").read_text())["metrics"]
    assert "transfer/val_acc_plain" not in metrics
    plain, transferred = metrics["transfer/val_person_acc_plain"], metrics["transfer/val_person_acc_transferred"]
    assert plain == pytest.approx(max_scalar(run / "tensorboard", "val/person_acc"), abs=1e-6)
    assert transferred == pytest.approx(max_scalar(run / "transfer" / "tensorboard", "val/person_acc"), abs=1e-6)
    chosen = transferred > plain
    assert metrics["transfer/chosen"] == float(chosen)
    served = run / "transfer" if chosen else run
    log = (run / "train.log").read_text()
    assert "objective: validation picks by objective=val/person_acc (a table with counts or shares" in log
    assert f"validation people-weighted accuracy {plain:.4f} plain, {transferred:.4f} from the starting point" in log
    assert (f"validation kept {'the model from the names-dataset starting point' if chosen else 'the plain model'} "
            f"(people-weighted accuracy {transferred:.4f} from the starting point, {plain:.4f} plain)") \
        in result.stdout
    assert f"people-weighted accuracy {plain:.4f} plain, {transferred:.4f} transferred" in (
        run / "MODEL_CARD.md").read_text()
    # best.ckpt is the served candidate's best epoch on that figure.
    state = torch.load(served / "checkpoints" / "best.ckpt", weights_only=True)["callbacks"]
    (best,) = [value for key, value in state.items() if "'monitor': 'val/person_acc'" in key]
    assert float(best["best_model_score"]) == pytest.approx(max(plain, transferred), abs=1e-6)


@pytest.mark.slow
def test_transfer_use_always_refuses_a_missing_starting_point_and_auto_skips_another_encoder(pretrained,
                                                                                           tiny_surnames, tmp_path):
    cache, corpus = tiny_surnames
    refused = train_refused(tmp_path, f"data.root={corpus}", *TINY, "transfer.use=always")
    assert refused.returncode == 2 and "make pretrain" in refused.stderr and refused.stderr.count("\n") == 1
    assert run_dirs(tmp_path) == []
    result = train(tmp_path, f"data.root={corpus}", *TINY, "model.hidden_size=24", "trainer.max_epochs=1",
                   "refit.enabled=false", "margin.enabled=false", f"transfer.starting_point={pretrained}",
                   f"transfer.known_names_cache={cache}")
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = run_dirs(tmp_path)
    assert "model.hidden_size=24 (starting point: 32)" in (run / "train.log").read_text()
    assert not (run / "transfer").exists()
    assert "transfer/val_acc_plain" not in json.loads((run / "results.json").read_text())["metrics"]


def readme_setup_targets() -> list[str]:
    """The `make` targets of the README's set-up block, in its order."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Set up and run\n+```bash\n(.*?)```", readme, re.S).group(1)
    return re.findall(r"^make (\w+)", block, re.M)


def make_overrides(target: str) -> list[str]:
    """What `make <target>` passes to train.py, from the Makefile's recipe."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    command = next(line for line in recipe.splitlines() if "train.py" in line)
    return command.split("train.py", 1)[1].split("$(ARGS)")[0].split()


@pytest.mark.slow
def test_the_readme_setup_order_then_its_predict_line_answer_languages_with_a_set(tiny_surnames, tmp_path):
    """A newcomer's first hour on tiny data: the README's set-up `make` lines in its order (each the train.py
    command its Makefile recipe runs), a pretraining after them too, then the README's `nameorigin predict latest`
    line. `latest` is the language model, never the pretraining's country model, and so is the dashboard's run."""
    from nameorigin.serving import runs

    cache, corpus = tiny_surnames
    targets = readme_setup_targets()
    assert targets.index("pretrain") < targets.index("train") and "test" in targets
    tiny = {"pretrain": [*PRETRAIN[1:], f"data.cache={cache}"],
            "train": [f"data.root={corpus}", *TINY, f"transfer.known_names_cache={cache}"]}
    for target in [*(target for target in targets if target != "test"), "pretrain"]:  # the suite is this test
        done = train(tmp_path, *make_overrides(target), *tiny[target])
        assert done.returncode == 0, done.stderr[-3000:]
    language_run = next(run for run in run_dirs(tmp_path) if "transfer/chosen" in
                        json.loads((run / "results.json").read_text())["metrics"])
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    line = re.search(r"^nameorigin predict latest [^#\n]*", readme, re.M).group(0).split()
    answered = run_in_process([NAMEORIGIN, *line[1:]], tmp_path)
    assert answered.returncode == 0, answered.stderr
    assert re.search(r"^  (Japanese|Russian|Irish|Italian) +\d", answered.stdout, re.M), answered.stdout
    assert answered.stdout.count("  set: ") == 2
    assert runs.newest_run(tmp_path / "outputs") == language_run
    assert runs.newest_checkpoint(tmp_path / "outputs").is_relative_to(language_run)


@pytest.mark.slow
def test_a_head_setting_the_starting_point_fixes_is_compared_before_anything_trains(pretrained, tiny_surnames,
                                                                                    tmp_path):
    cache, corpus = tiny_surnames
    result = train(tmp_path, f"data.root={corpus}", *TINY, "model.ngram_max=5", "trainer.max_epochs=1",
                   "refit.enabled=false", f"transfer.starting_point={pretrained}",
                   f"transfer.known_names_cache={cache}")
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = run_dirs(tmp_path)
    log = (run / "train.log").read_text()
    said = log.index("model.ngram_max=5 (starting point: 4)")
    assert said < log.index("epoch 0 trained") and "no candidate from the starting point" in log
    assert (run / "checkpoints" / "best.ckpt").is_file() and not (run / "transfer").exists()


@pytest.mark.slow
def test_a_candidate_refused_after_the_plain_model_trained_leaves_the_plain_model_served(tiny_surnames, tmp_path):
    """A starting point trained on this corpus with another split is refused once the plain model has trained:
    the run keeps that model, serves it and says why."""
    _, corpus = tiny_surnames
    (tmp_path / "other").mkdir(), (tmp_path / "run").mkdir()
    other = train(tmp_path / "other", f"data.root={corpus}", *TINY, "data.split_seed=1", "transfer.use=never",
                  "trainer.max_epochs=1", "refit.enabled=false", "margin.enabled=false", "test=false")
    assert other.returncode == 0, other.stderr[-3000:]
    (other_run,) = run_dirs(tmp_path / "other")
    result = train(tmp_path / "run", f"data.root={corpus}", *TINY, "trainer.max_epochs=1", "refit.enabled=false",
                   f"transfer.starting_point={other_run / 'checkpoints' / 'best.ckpt'}",
                   "transfer.known_names_cache=null")
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = run_dirs(tmp_path / "run")
    assert "the candidate from the starting point was refused" in result.stdout
    assert "with another split" in json.loads((run / "results.json").read_text())["transfer"]["refused"]
    assert (run / "checkpoints" / "best.ckpt").is_file() and not (run / "transfer").exists()


@pytest.mark.slow
def test_a_run_reads_its_starting_point_once(pretrained, tiny_surnames, tmp_path, monkeypatch):
    """By hand (model.init_from, with its refit) and by transfer (the candidate, then each ensemble member): the
    starting point's file is read once a run, and every step after reads the plan's StartingPoint."""
    from test_config import composed

    from nameorigin.training import pipeline, starting_point

    cache, corpus = tiny_surnames
    reads = []
    load = starting_point.load_checkpoint

    def counted(path, *args, **kwargs):
        reads.append(str(path))
        return load(path, *args, **kwargs)

    monkeypatch.setattr(starting_point, "load_checkpoint", counted)
    common = [f"data.root={corpus}", *TINY, "trainer.max_epochs=1", "margin.enabled=false", "card.enabled=false"]
    by_hand = pipeline.train(composed(*common, "experiment=finetune", "refit.enabled=true",
                                      f"model.init_from={pretrained}", f"model.known_names_cache={cache}",
                                      f"paths.output_dir={tmp_path / 'by_hand'}"))
    assert by_hand["model_checkpoint"].endswith("refit.ckpt") and reads == [str(pretrained)]
    reads.clear()
    transferred = pipeline.train(composed(*common, "transfer.use=always", f"transfer.starting_point={pretrained}",
                                          f"transfer.known_names_cache={cache}", "ensemble.members=3",
                                          "ensemble.min_gain=-1", f"paths.output_dir={tmp_path / 'transfer'}"))
    assert transferred["ensemble/members"] == 3 and reads == [str(pretrained)]
