"""Text to indices, shared by training and inference: normalization and the vocabulary."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from nameorigin.base.errors import UserError

PAD, UNK = "<pad>", "<unk>"
NORMALIZERS = ("ascii", "none")



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
    """What spellings of one name share: its letters and digits, case folded (O'Neill, Oneill -> oneill)."""
    return "".join(c for c in name.casefold() if c.isalnum())


def build_vocab(names: Sequence[str]) -> list[str]:
    """Index 0 is padding and 1 stands for any character not seen in training."""
    return [PAD, UNK, *sorted({c for name in names for c in name})]


def encode(name: str, char_to_index: dict[str, int]) -> list[int]:
    """Characters outside the vocabulary map to <unk>, never to a real letter."""
    unk = char_to_index[UNK]
    return [char_to_index.get(c, unk) for c in name]
