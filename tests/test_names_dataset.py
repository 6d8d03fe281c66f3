"""The broader starting point: names-dataset's first and last names in every alphabet, converted into one cache,
without the held-out names of the runs it lists, and the known-name lookup reading a full name by its words."""

from __future__ import annotations

import gzip
import json
import pickle
import re
from pathlib import Path

import pytest
import torch
from conftest import ENDINGS, TINY, run_dirs, train, write_corpus

from nameorigin.base.errors import UserError
from nameorigin.base.textnorm import variant_key
from nameorigin.data.names_dataset import VOCAB, Recipe, convert
from nameorigin.data.surnames import Surnames, SurnamesDataModule
from nameorigin.model.known import KnownNames, name_key

COUNTRY = {"Japanese": "JP", "Russian": "RU", "Irish": "IE", "Italian": "IT"}
CYRILLIC = ["\u0418\u0432\u0430\u043d\u043e\u0432", "\u0418\u0432\u0430\u043d\u043e\u0432\u0430",
            "\u0418\u0432\u0430\u043d\u043e\u0432\u043e"]  # Ivanov, Ivanova, Ivanovo: each letter in two names


def write_package(folder: Path, corpus: Path) -> Path:
    """names-dataset's two pickles: the corpus' names of four languages as last names, given names of the same
    countries, a name in both lists, names in Cyrillic, and one character only one name holds."""
    last: dict[str, dict] = {}
    for language, code in COUNTRY.items():
        for name in sorted(set((corpus / f"{language}.txt").read_text().split())):
            last[name] = {"country": {code: 0.9, "US": 0.1}}
    first = {f"{stem}{end}": {"country": {code: 1.0}, "gender": {"F": 1.0}}
             for (language, code) in COUNTRY.items() for stem in ("Ana", "Bo", "Cy", "Du")
             for end in (ENDINGS[language][:2],)}
    first["Morgan"], last["Morgan"] = {"country": {"GB": 1.0}}, {"country": {"US": 1.0}}
    for name in CYRILLIC:
        last[name] = {"country": {"RU": 1.0}}
    last["Zo\u01ff"] = {"country": {"NO": 1.0}}  # ǿ: held by one name only
    folder.mkdir(parents=True, exist_ok=True)
    for file, names in (("last_names.pkl.gz", last), ("first_names.pkl.gz", first)):
        with gzip.open(folder / file, "wb") as f:
            pickle.dump(names, f)
    return folder


def test_both_lists_in_every_alphabet_convert_into_one_cache_by_recipe(tmp_path):
    corpus = write_corpus(tmp_path / "names")
    package = write_package(tmp_path / "package", corpus)
    files = {"last_names": package / "last_names.pkl.gz", "first_names": package / "first_names.pkl.gz"}
    recipe = Recipe(sources=("first_names", "last_names"), normalize="none", min_char_names=2)
    meta = convert(tmp_path / "cache", recipe=recipe, files=files)
    names = Surnames(tmp_path / "cache", recipe=recipe, package=str(package))
    assert meta["recipe"]["sources"] == ["first_names", "last_names"] and meta["recipe"]["normalize"] == "none"
    assert set(CYRILLIC) <= set(names.names) and "Zo\u01ff" not in names.names  # ǿ is too rare
    assert meta["counts"]["dropped_rare_characters"] == 1 and meta["counts"]["merged_spellings"] == 1
    assert "\u0418" in names.vocab and names.vocab[: len(VOCAB)] == VOCAB  # ASCII first: a corpus reads the same
    morgan = dict(zip(names.countries, names.shares(torch.tensor([names.names.index("Morgan")]))[0].tolist(),
                      strict=True))
    assert (morgan["GB"], morgan["US"]) == pytest.approx((0.5, 0.5))  # a given and a family name: summed
    # The surnames alone, folded: another recipe, another file beside it; asking for it converts it.
    ascii_only = Surnames(tmp_path / "cache", recipe=Recipe(), package=str(package))
    assert not set(CYRILLIC) & set(ascii_only.names) and ascii_only.vocab == VOCAB
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["last_names.json", "last_names.npz",
                                                                     "names.json", "names.npz"]
    left_out = Recipe.leaving_out([variant_key("Morgan")], ["experiment=x"], sources=recipe.sources,
                                  normalize="none", min_char_names=2)
    fewer = Surnames(tmp_path / "cache", recipe=left_out, package=str(package))  # the recipe changed: anew
    assert "Morgan" not in fewer.names and fewer.record["counts"]["left_out_held_out"] == 2
    assert len(fewer.names) == len(names.names) - 1


def test_leave_out_of_is_resolved_by_train_py_only():
    with pytest.raises(UserError, match=re.escape("data.leave_out_of=['experiment=nana']: those runs' held-out")):
        SurnamesDataModule(cache="unused", leave_out_of=["experiment=nana"])
    with pytest.raises(UserError, match=re.escape("data.sources=['middle_names']: list each of last_names")):
        SurnamesDataModule(cache="unused", sources=["middle_names"])


def test_the_lookup_reads_a_name_not_found_whole_by_its_words():
    vocab = ["<pad>", "<unk>", " ", "|", "'", *"ABLMacdeilnmor", "\u00e9"]
    table = KnownNames(len(vocab), 3, 0)
    top_index = torch.tensor([[0] + [255] * 9, [1] + [255] * 9, [2] + [255] * 9])
    table.fill(vocab, ["Abe", "Lincoln", "Mora"], top_index, torch.tensor([[1.0] + [0.0] * 9] * 3))
    assert table.reads_words and name_key("Mor\u00e9 O'Lin") == "moreolin"
    names = ["Abe Lincoln", "Abe|Lincoln", "Abe Mel", "Lincoln", "Mel", "Abe Lincoln Mora"]
    index = {c: i for i, c in enumerate(vocab)}
    tokens = torch.zeros(len(names), 20, dtype=torch.long)
    for row, name in enumerate(names):
        tokens[row, : len(name)] = torch.tensor([index.get(c, 1) for c in name])
    evidence = table(tokens, torch.tensor([len(n) for n in names]))
    shares, found = evidence[:, :-1], evidence[:, -1]
    assert found.tolist() == pytest.approx([1.0, 1.0, 0.5, 1.0, 0.0, 1.0])
    assert shares[0].tolist() == pytest.approx([0.5, 0.5, 0.0])  # each word's country, averaged
    assert shares[2].tolist() == pytest.approx([1.0, 0.0, 0.0]) and shares[4].sum() == 0
    assert shares[5].tolist() == pytest.approx([1 / 3, 1 / 3, 1 / 3])
    _, whole = table.lookup(tokens, torch.tensor([len(n) for n in names]))
    assert whole.tolist() == [False, False, False, True, False, False]  # "found in names-dataset": the name whole
    # A table filled before words were read (no space in its vocabulary) looks names up whole only.
    old = KnownNames(4, 3, 0)
    old.fill(["<pad>", "<unk>", "a", "b"], ["ab"], top_index[:1], torch.ones(1, 10))
    assert not old.reads_words


@pytest.mark.slow
def test_a_pretraining_leaves_out_the_listed_runs_held_out_names_and_a_run_from_it_counts_none(tmp_path):
    corpus = write_corpus(tmp_path / "names")
    package = write_package(tmp_path / "package", corpus)
    split = ["data.split_fractions=[0.6,0.2,0.2]"]
    pretrain = train(tmp_path, "experiment=surnames_pretrain", f"data.package={package}", "data.cache=cache",
                     "data.min_char_names=2", "data.split_fractions=[0.8,0.1,0.1]", "data.batch_size=32",
                     f"data.leave_out_of=['data.root={corpus} {split[0]}']", "transfer.publish=pretrained/p.ckpt",
                     *TINY[:2], "trainer.max_epochs=2", *TINY[4:])
    assert pretrain.returncode == 0, pretrain.stderr[-3000:]
    record = json.loads((tmp_path / "cache" / "names.json").read_text())
    assert record["recipe"]["left_out_runs"] == [f"data.root={corpus} {split[0]}"]
    finetuned = train(tmp_path, f"data.root={corpus}", *split, "transfer.use=always",
                      "transfer.starting_point=pretrained/p.ckpt", "transfer.known_names_cache=cache", *TINY)
    assert finetuned.returncode == 0, finetuned.stderr[-3000:]
    run = next(r for r in run_dirs(tmp_path) if (r / "split.json").is_file() and "root" in
               json.loads((r / "split.json").read_text()))
    held_out = {name for s in ("val", "test") for name, _ in json.loads((run / "split.json").read_text())["splits"][s]}
    cached = set(Surnames(tmp_path / "cache").names)
    assert held_out and not held_out & cached and record["counts"]["left_out_held_out"] >= len(held_out) - 1
    assert "  test/share_in_pretrain 0.0000" in finetuned.stdout
    test_size = len(json.loads((run / "split.json").read_text())["splits"]["test"])
    card = (run / "MODEL_CARD.md").read_text()
    assert f"- 0 of {test_size:,} (0.0 %) test names" in card and "; on all of them: accuracy" in card
