from __future__ import annotations

import io
import zipfile
from collections import Counter
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nameorigin.base.errors import UserError
from nameorigin.base.textnorm import (
    PAD,
    UNK,
    build_vocab,
    encode,
    folded_indices,
    grow_vocab,
    normalize_name,
    variant_key,
)
from nameorigin.data.batching import BucketBatchSampler
from nameorigin.data.corpus import read_corpus, split_by_name
from nameorigin.data.download import download_corpus
from nameorigin.data.names import NamesDataModule


def test_normalize_folds_accents_and_keeps_inner_spaces_and_apostrophes():
    assert normalize_name("  Bélanger\r") == "Belanger"
    assert normalize_name("\ufeffÉmile") == "Emile"
    assert normalize_name("O'Neill ") == "O'Neill"
    assert normalize_name("Ter Avest") == "Ter Avest"
    assert normalize_name("Bélanger", "none") == "Bélanger"
    with pytest.raises(UserError, match="ascii, none"):
        normalize_name("x", "latin")


def test_read_corpus_drops_duplicate_pairs_and_handles_crlf_bom(tmp_path):
    (tmp_path / "French.txt").write_bytes("\ufeffBélanger\r\nBelanger\r\n\r\n  Coté \r\nCote\n".encode())
    (tmp_path / "English.txt").write_text("Smith\nSmith\nCote\n")
    (tmp_path / "README.txt").write_text("not a language\n")
    (tmp_path / ".DS_Store.txt").write_text("junk\n")
    pairs, digest = read_corpus(tmp_path)
    assert pairs == [("Belanger", "French"), ("Cote", "English"), ("Cote", "French"), ("Smith", "English")]
    assert len(digest) == 64


@pytest.mark.parametrize("make, message", [
    (lambda d: None, "does not exist"),
    (lambda d: d.mkdir(), "holds no <Language>.txt"),
    (lambda d: (d.mkdir(), (d / "Greek.txt").write_text("\n  \n")), "Greek.txt holds no names"),
    (lambda d: (d.mkdir(), (d / "Greek.txt").write_bytes(b"Alpha\nB\xe9ta\n")), "Greek.txt:2 is not UTF-8"),
])
def test_bad_corpus_gives_one_clear_error(tmp_path, make, message):
    folder = tmp_path / "names"
    make(folder)
    with pytest.raises(UserError, match=message):
        read_corpus(folder)


def test_split_never_shares_a_name_and_keeps_multi_language_names_together(tiny_corpus):
    pairs, _ = read_corpus(tiny_corpus)
    splits = split_by_name(pairs, [0.8, 0.1, 0.1], seed=0)
    names = {s: {n for n, _ in p} for s, p in splits.items()}
    assert not names["train"] & names["val"] and not names["train"] & names["test"]
    assert not names["val"] & names["test"]
    assert sorted(p for split in splits.values() for p in split) == pairs  # nothing lost or added
    holder = [s for s, p in splits.items() if ("Sharedname", "Irish") in p]
    assert ("Sharedname", "Italian") in splits[holder[0]]
    for split in ("val", "test"):  # stratified: every language in every split, at about 10%
        counts = Counter(lang for _, lang in splits[split])
        assert set(counts) == {"Irish", "Italian", "Japanese", "Russian"}
        assert all(3 <= c <= 6 for c in counts.values()), counts


def test_split_depends_on_seed_only(tiny_corpus):
    pairs, _ = read_corpus(tiny_corpus)
    assert split_by_name(pairs, [0.8, 0.1, 0.1], 1) == split_by_name(list(reversed(pairs)), [0.8, 0.1, 0.1], 1)
    assert split_by_name(pairs, [0.8, 0.1, 0.1], 1) != split_by_name(pairs, [0.8, 0.1, 0.1], 2)


def test_spelling_variants_share_a_split():
    stems = [f"Name{chr(97 + i)}{chr(97 + j)}" for i in range(26) for j in range(4)]
    pairs = sorted({(stem, "Irish") for stem in stems} | {(f"{stem[0]}'{stem[1:]}", "Irish") for stem in stems}
                   | {(stem.upper(), "English") for stem in stems[:50]})
    crossing = []
    for seed in range(5):
        splits = split_by_name(pairs, [0.8, 0.1, 0.1], seed)
        home = {variant_key(name): split for split, held in splits.items() for name, _ in held}
        assert all(home[variant_key(name)] == split for split, held in splits.items() for name, _ in held)
        assert sorted(p for held in splits.values() for p in held) == pairs  # nothing lost or added
        exact = split_by_name(pairs, [0.8, 0.1, 0.1], seed, group_variants=False)
        crossing.append(len({variant_key(n) for n, _ in exact["train"]} & {variant_key(n) for n, _ in exact["test"]}))
    assert min(crossing) > 0  # split by exact string alone, these variants would cross into test


def test_accented_spellings_share_a_split():
    """Read with data.normalize=none, José and Jose are two strings of one name: they must not straddle splits."""
    assert variant_key("José Müller") == variant_key("Jose Muller") == "josemuller"
    stems = [f"Jos{chr(97 + i)}{chr(97 + j)}" for i in range(26) for j in range(4)]
    pairs = sorted({(f"{stem}é", "Spanish") for stem in stems} | {(f"{stem}e", "Spanish") for stem in stems})
    for seed in range(3):
        home = {}
        for split, held in split_by_name(pairs, [0.8, 0.1, 0.1], seed).items():
            for name, _ in held:
                assert home.setdefault(variant_key(name), split) == split


def test_real_corpus_split_is_leak_free_and_stratified(real_corpus):
    dm = NamesDataModule(root=str(real_corpus))
    dm.setup()
    manifest = dm.manifest()
    names = {s: {n for n, _ in p} for s, p in dm.splits.items()}
    assert not (names["train"] & names["val"] or names["train"] & names["test"] or names["val"] & names["test"])
    variants = {s: {variant_key(n) for n in held} for s, held in names.items()}  # O'Neill in train, Oneill in test
    assert not (variants["train"] & variants["val"] or variants["train"] & variants["test"]
                or variants["val"] & variants["test"])
    assert len(manifest["labels"]) == 18
    assert sum(manifest["sizes"].values()) < 20074  # duplicates dropped
    assert manifest["counts"]["train"]["Arabic"] <= 108 and manifest["names_with_several_languages"] > 0
    for language, total in Counter(lang for p in dm.splits.values() for _, lang in p).items():
        share = manifest["counts"]["test"].get(language, 0) / total
        assert 0.05 <= share <= 0.16, (language, share)


def test_vocab_has_pad_and_unk_and_unknown_chars_never_become_letters():
    vocab = build_vocab(["Abe", "Bo"])
    assert vocab[:2] == [PAD, UNK]
    index = {c: i for i, c in enumerate(vocab)}
    assert encode("Az", index) == [index["A"], index[UNK]]


def test_a_grown_vocabulary_keeps_the_pretrained_indices_and_folds_new_characters_onto_them():
    base = build_vocab(["Abe", "Ole"])
    vocab = grow_vocab(base, ["Ab\u00e9", "\u00d8le", "Bo\u00df"])
    assert vocab[: len(base)] == base and vocab[len(base):] == sorted("\u00e9\u00d8Bo\u00df")
    folded = [base[i] for i in folded_indices(vocab, base)]
    assert folded[: len(base)] == base
    # é folds to e; Ø and ß have no ASCII fold, and B and o are not in the base: each is read as <unk>
    assert dict(zip(vocab[len(base):], folded[len(base):], strict=True)) == {
        "B": UNK, "o": UNK, "\u00d8": UNK, "\u00df": UNK, "\u00e9": "e"}
    assert grow_vocab(base, ["Abe"]) == base


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_encoding_arbitrary_unicode_never_crashes(text):
    vocab = build_vocab(["Abcdefghij", "O'Neill Ter"])
    index = {c: i for i, c in enumerate(vocab)}
    for mode in ("ascii", "none"):
        name = normalize_name(text, mode)
        codes = encode(name, index)
        assert len(codes) == len(name)
        for char, code in zip(name, codes, strict=True):
            assert code == (index[char] if char in index and char not in (PAD, UNK) else index[UNK])
            assert code != 0  # never padding


def test_bucket_sampler_covers_every_index_once_and_cuts_padding():
    lengths = torch.randint(2, 20, (1000,), generator=torch.Generator().manual_seed(0)).tolist()
    sampler = BucketBatchSampler(lengths, batch_size=32, shuffle=True, seed=0)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(1000))
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    assert padded / sum(lengths) < 1.1  # random batches of this data pad about 1.6x
    sampler.set_epoch(1)
    assert list(sampler) != batches


def test_bucket_sampler_splits_batches_across_ranks():
    lengths = list(range(1, 101))
    ranks = [list(BucketBatchSampler(lengths, 10, True, 0, num_replicas=2, rank=r)) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1])
    assert not {i for b in ranks[0] for i in b} & {i for b in ranks[1] for i in b}


@pytest.mark.parametrize("size, replicas", [(35, 2), (17, 3), (2, 2), (1000, 4)])
def test_bucket_sampler_scores_every_held_out_name_exactly_once_across_ranks(size, replicas):
    """Evaluation shards names, not batches: no rank repeats a batch to even the counts (that counted names twice),
    and the shares differ by at most one name."""
    lengths = torch.randint(2, 20, (size,), generator=torch.Generator().manual_seed(size)).tolist()
    shares = [[i for b in BucketBatchSampler(lengths, 16, False, 0, num_replicas=replicas, rank=r) for i in b]
              for r in range(replicas)]
    assert sorted(i for share in shares for i in share) == list(range(size))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1 and min(map(len, shares)) >= 1
    single = list(BucketBatchSampler(lengths, 16, False, 0))
    assert single == list(BucketBatchSampler(lengths, 16, False, 0, num_replicas=1, rank=0))
    assert sorted(i for b in single for i in b) == list(range(size))


def make_zip(path: Path, files: dict[str, str]) -> Path:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    path.write_bytes(buffer.getvalue())
    return path


def test_download_unpacks_names_atomically(tmp_path):
    archive = make_zip(tmp_path / "data.zip", {"data/names/Greek.txt": "Alpha\n", "data/names/Irish.txt": "Ahern\n",
                                               "data/eng-fra.txt": "x"})
    target = tmp_path / "data" / "names"
    download_corpus(target, archive.as_uri())
    assert sorted(p.name for p in target.iterdir()) == ["Greek.txt", "Irish.txt"]
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["names"]  # no temp files left


@pytest.mark.parametrize("content", [b"PK\x03\x04truncated", b"not a zip at all"])
def test_broken_download_leaves_data_folder_as_it_was(tmp_path, content):
    archive = tmp_path / "data.zip"
    archive.write_bytes(content)
    data = tmp_path / "data"
    data.mkdir()
    (data / "README.md").write_text("keep me")
    with pytest.raises(UserError, match="not a valid zip"):
        download_corpus(data / "names", archive.as_uri())
    assert [p.name for p in data.iterdir()] == ["README.md"]


def test_offline_download_says_where_to_put_the_files(tmp_path):
    with pytest.raises(UserError, match="data.root="):
        download_corpus(tmp_path / "names", (tmp_path / "missing.zip").as_uri())
    with pytest.raises(UserError, match="could not download the corpus from foo .unknown url type"):
        download_corpus(tmp_path / "names", "foo")  # data.url=foo: not a URL at all


@pytest.mark.parametrize("kwargs, key", [({"split_fractions": [0.5, 0.2, 0.2]}, "split_fractions"),
                                         ({"batch_size": 0}, "batch_size"), ({"normalize": "x"}, "normalize"),
                                         ({"num_workers": -1}, "data.num_workers=-1 must be a whole number >= 0"),
                                         ({"batch_size": 1.5}, "data.batch_size=1.5 must be a whole number"),
                                         ({"split_seed": "abc"}, "data.split_seed='abc' must be a whole number"),
                                         ({"split_fractions": [1.0, 0, 0]}, "with val and test above 0"),
                                         ({"split_fractions": [0.8, 0.2]}, "data.split_fractions=.0.8, 0.2. must be"),
                                         ({"root": " "}, "data.root is empty")])
def test_datamodule_rejects_bad_settings(kwargs, key):
    with pytest.raises(UserError, match=key):
        NamesDataModule(**kwargs)


def test_a_held_out_split_smaller_than_the_process_count_is_refused(tiny_corpus):
    """A rank without names would wait forever in the others' gathers: refused before training, naming the fix."""
    datamodule = NamesDataModule(root=str(tiny_corpus), download=False)
    datamodule.setup()
    datamodule.check_held_out_sizes(16)
    with pytest.raises(UserError, match=r"val holds 16, test holds 16 names, fewer than the 17 processes"):
        datamodule.check_held_out_sizes(17)
