"""Text to indices, shared by training and inference: normalization and the vocabulary."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

import numpy as np
import torch

from nameorigin.base.errors import UserError
from nameorigin.base.parts import BOUNDARY, split_parts

PAD, UNK = "<pad>", "<unk>"
NORMALIZERS = ("ascii", "none")
# Longer is not one name (the tutorial corpus' longest has 20 characters): tables skip it and count it, the
# Predictor explains it instead of cutting it, exports size their programs for it.
MAX_NAME_LENGTH = 64


def normalize_name(name: str, mode: str = "ascii") -> str:
    """Strip surrounding white space; with "ascii", drop accents (NFD minus combining marks) and non-ASCII."""
    if mode not in NORMALIZERS:
        raise UserError(f"data.normalize={mode!r} is not one of {', '.join(NORMALIZERS)}")
    if name.isascii():  # the common case; NFC/NFD cannot change pure ASCII
        return name.strip()
    name = unicodedata.normalize("NFC", name.strip().lstrip("\ufeff").strip())
    if mode == "ascii":
        name = "".join(c for c in unicodedata.normalize("NFD", name) if not unicodedata.combining(c))
        name = name.encode("ascii", "ignore").decode("ascii").strip()
    return name


def variant_key(name: str) -> str:
    """What spellings of one name share: its letters and digits, case and accents folded (O'Neill, Oneill ->
    oneill; José, Jose -> jose), so a table read with data.normalize=none keeps accented spellings together too.
    A name of parts keys as its parts' keys in sorted order: the same person given family first falls with them.
    """
    if BOUNDARY in name:
        return BOUNDARY.join(sorted(variant_key(part) for part in split_parts(name)))
    if not name.isascii():
        name = "".join(c for c in unicodedata.normalize("NFD", name) if not unicodedata.combining(c))
    return "".join(c for c in name.casefold() if c.isalnum())


def build_vocab(names: Sequence[str]) -> list[str]:
    """Index 0 is padding and 1 stands for any character not seen in training."""
    return [PAD, UNK, *sorted({c for name in names for c in name})]


def grow_vocab(base: Sequence[str], names: Sequence[str]) -> list[str]:
    """A pretrained vocabulary grown by the characters `names` add (sorted, after it): every entry of `base` keeps
    its index, so its embedding rows still mean the same characters."""
    known = set(base)
    return [*base, *sorted({c for name in names for c in name} - known)]


def folded_indices(vocab: Sequence[str], base: Sequence[str]) -> list[int]:
    """For each entry of a grown `vocab`, the index in `base` of the character it folds to (é -> e; an entry of
    `base` is itself), or <unk>'s where the fold is not in `base`: how a model pretrained on `base` reads it."""
    index = {c: i for i, c in enumerate(base)}
    return [index[c] if c in index else index.get(normalize_name(c), index[UNK]) for c in vocab]


def encode(name: str, char_to_index: dict[str, int]) -> list[int]:
    """Characters outside the vocabulary map to <unk>, never to a real letter."""
    unk = char_to_index[UNK]
    return [char_to_index.get(c, unk) for c in name]


def encode_names(names: Sequence[str], char_to_index: dict[str, int],
                 chunk: int = 65536) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded indices [names, longest] (uint8 when the vocabulary fits, else int16) and lengths, built with
    numpy a chunk at a time so a million names never become a million Python lists. A character outside the
    vocabulary maps to <unk> (nameorigin.base.textnorm.encode), padding to index 0."""
    lengths = torch.tensor([len(name) for name in names], dtype=torch.long)
    width = int(lengths.max()) if len(names) else 0
    dtype = np.uint8 if len(char_to_index) <= 256 else np.int16
    # Sorted code points of the vocabulary's characters, and a sentinel no character reaches.
    known = [*sorted((ord(char), index) for char, index in char_to_index.items() if len(char) == 1), (2**32 - 1, 0)]
    points = np.array([point for point, _ in known], dtype=np.uint32)
    indices = np.array([index for _, index in known], dtype=dtype)
    tokens = np.zeros((len(names), width), dtype=dtype)
    columns = np.arange(width)
    for start in range(0, len(names), chunk):
        part = names[start : start + chunk]
        text = "".join(name.ljust(width, "\0") for name in part).encode("utf-32-le")
        codes = np.frombuffer(text, dtype=np.uint32).reshape(len(part), width)
        where = np.searchsorted(points, codes)
        block = np.where(points[where] == codes, indices[where], char_to_index[UNK]).astype(dtype)
        block[columns >= lengths[start : start + len(part), None].numpy()] = 0  # padding
        tokens[start : start + len(part)] = block
    return torch.from_numpy(tokens), lengths
