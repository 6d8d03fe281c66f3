"""Known-name evidence: when a name is one of the names-dataset names, the share of people carrying it per
country, looked up inside the model from its tokens.

The key is the name's letters, lower-cased and without accents, with everything else dropped ("O'Neill" and
"ONeill" meet "O Neill"), fingerprinted with two 31-bit polynomial hashes. The table is a sorted tensor of
fingerprints plus each name's top countries and shares, so the lookup is a `searchsorted`: tensor ops only, and the
checkpoint carries the table (the Predictor needs nothing else). A table filled from a vocabulary with a space
also reads a name that is not found whole by its words (up to four, split at spaces and part boundaries: "Abraham
Lincoln" as "Abraham" and "Lincoln"), averaging the shares of the words found. Unknown names get all-zero shares
and found = 0.
"""

from __future__ import annotations

import unicodedata

import numpy as np
import torch
from torch import nn

from nameorigin.base.parts import BOUNDARY
from nameorigin.base.textnorm import MAX_NAME_LENGTH
from nameorigin.model.ngram import PRIME

SECOND_PRIME = 2_147_483_629
BASES = (131, 137)
TOP = 10
WORDS = 4  # a name's words looked up one by one; a fifth and later join the fourth
SEPARATOR = -1  # the code of a character that ends a word


def key_letter(char: str) -> str:
    """The letter a character stands for in the key: lower-cased, accents dropped ("" for a non-letter)."""
    if not char.isalpha():
        return ""
    lowered = char.lower()
    folded = "".join(c for c in unicodedata.normalize("NFD", lowered) if not unicodedata.combining(c))
    return (folded or lowered)[0]


def name_key(name: str) -> str:
    """What the lookup matches on, as a string: the name's letters, lower-cased and without accents."""
    return "".join(key_letter(c) for c in name)


def letter_codes(vocab: list[str]) -> torch.Tensor:
    """Per vocabulary entry: 1..26 for an ASCII letter, its code point for another letter (both lower-cased and
    folded), -1 for a space or part boundary (with `words`), 0 for anything else (dropped from the key)."""
    def code(entry: str) -> int:
        letter = key_letter(entry) if len(entry) == 1 else ""
        return ord(letter) - 96 if letter.isascii() and letter else ord(letter) if letter else 0
    words = " " in vocab
    return torch.tensor([SEPARATOR if words and entry in (" ", BOUNDARY) else code(entry) for entry in vocab])


def powers(base: int, prime: int) -> torch.Tensor:
    values = [1]
    for _ in range(MAX_NAME_LENGTH + 1):  # a power per position of the longest name, and one more
        values.append(values[-1] * base % prime)
    return torch.tensor(values)


def padded_tokens(vocab: list[str], names: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, longest] token ids (1 for a character outside vocab, 0 past a name's end) and [N] lengths, built with
    array operations: a Python loop over the characters of a million names took seconds of every fine-tuning."""
    lengths = np.fromiter(map(len, names), dtype=np.int64, count=len(names))
    points = np.frombuffer("".join(names).encode("utf-32-le"), dtype=np.uint32)
    ids = {ord(c): i for i, c in enumerate(vocab) if len(c) == 1}
    keys = np.array(sorted(ids), dtype=np.uint32)
    values = np.array([ids[key] for key in keys.tolist()], dtype=np.int64)
    slot = np.searchsorted(keys, points).clip(max=len(keys) - 1)
    tokens = np.zeros((len(names), int(lengths.max(initial=0))), dtype=np.int64)
    tokens[np.arange(tokens.shape[1]) < lengths[:, None]] = np.where(keys[slot] == points, values[slot], 1)
    return torch.from_numpy(tokens), torch.from_numpy(lengths)


class KnownNames(nn.Module):
    """Maps (tokens, lengths) to [B, countries + 1]: the name's country shares and a found flag."""

    def __init__(self, vocab_size: int, countries: int, size: int):
        super().__init__()
        self.countries = countries
        self.reads_words = False  # whether a name not found whole is read by its words: set with the codes
        self.register_buffer("codes", torch.zeros(vocab_size, dtype=torch.long))  # set by fill() or a checkpoint
        self.register_buffer("powers", torch.stack([powers(BASES[0], PRIME), powers(BASES[1], SECOND_PRIME)]))
        self.register_buffer("fingerprints", torch.zeros(size, dtype=torch.long))
        self.register_buffer("top_index", torch.full((size, TOP), 255, dtype=torch.uint8))
        self.register_buffer("top_share", torch.zeros(size, TOP, dtype=torch.float16))

    def codes_of(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        steps = torch.arange(tokens.shape[1], device=tokens.device)
        return self.codes[tokens] * (steps[None, :] < lengths.to(tokens.device)[:, None])

    def fingerprint(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """[B] int64 fingerprint of each name's lower-cased letters; 0 for a name without letters."""
        return self.hashed(self.codes_of(tokens, lengths).clamp(min=0))

    def word_fingerprints(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """[B, WORDS] fingerprints of each name's words (0 for a word that is not there)."""
        codes = self.codes_of(tokens, lengths)
        word = (codes == SEPARATOR).long().cumsum(1).clamp(max=WORDS - 1)
        letters = codes.clamp(min=0)
        return torch.stack([self.hashed(letters * (word == w)) for w in range(WORDS)], dim=1)

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args, **kwargs) -> None:
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        codes = state_dict.get(f"{prefix}codes")
        if codes is not None:  # a plain bool, so that an exported program holds no data-dependent branch
            self.reads_words = bool((codes == SEPARATOR).any())

    def hashed(self, codes: torch.Tensor) -> torch.Tensor:
        kept = (codes > 0).long()
        rank = kept.flip(1).cumsum(1).flip(1) - kept  # letters after this one: the power of its base
        first = (codes * self.powers[0][rank]).sum(1) % PRIME
        second = (codes * self.powers[1][rank]).sum(1) % SECOND_PRIME
        return (first * (1 << 31) + second) * (kept.sum(1) > 0)

    @torch.no_grad()
    def fill(self, vocab: list[str], names: list[str], top_index: torch.Tensor, top_share: torch.Tensor,
             batch_size: int = 65536) -> int:
        """Build the table from names and their top countries/shares; names whose key repeats keep their first
        row. Returns the number of rows kept."""
        self.codes = letter_codes(vocab)
        self.reads_words = bool((self.codes == SEPARATOR).any())
        tokens, lengths = padded_tokens(vocab, names)
        fingerprints = torch.cat([self.fingerprint(tokens[at : at + batch_size], lengths[at : at + batch_size])
                                  for at in range(0, len(names), batch_size)])
        order = torch.argsort(fingerprints, stable=True)
        ordered = fingerprints[order]
        first = torch.ones_like(ordered, dtype=torch.bool)
        first[1:] = ordered[1:] != ordered[:-1]
        keep = order[first & (ordered != 0)]
        self.fingerprints = fingerprints[keep].clone()
        self.top_index = top_index[keep].to(torch.uint8)
        self.top_share = top_share[keep].to(torch.float16)
        return len(keep)

    def lookup(self, tokens: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(row of the table, found) per name, the name whole."""
        return self.find(self.fingerprint(tokens, lengths))

    def find(self, key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        row = torch.searchsorted(self.fingerprints, key).clamp(max=max(len(self.fingerprints) - 1, 0))
        found = (self.fingerprints[row] == key) & (key != 0) if len(self.fingerprints) else key < 0
        return row, found

    def shares(self, row: torch.Tensor, found: torch.Tensor) -> torch.Tensor:
        """[*row.shape, countries] shares of the rows found (zeros elsewhere)."""
        slots = self.top_index[row].long().clamp(max=self.countries)  # 255 (no country) -> the spare column
        dense = torch.zeros(*row.shape, self.countries + 1, device=row.device)
        dense = dense.scatter_add(-1, slots, self.top_share[row].float())
        return dense[..., :-1] * found[..., None]

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        if not len(self.fingerprints):
            return tokens.new_zeros(tokens.shape[0], self.countries + 1, dtype=torch.float32)
        row, found = self.lookup(tokens, lengths)
        dense, flag = self.shares(row, found), found.float()
        if self.reads_words:  # not found whole: the mean of its words' shares, flagged by the share of words found
            keys = self.word_fingerprints(tokens, lengths)
            rows, words_found = self.find(keys)
            counted = words_found.float().sum(1)
            by_words = self.shares(rows, words_found).sum(1) / counted.clamp(min=1)[:, None]
            share_found = counted / (keys != 0).float().sum(1).clamp(min=1)
            dense = torch.where(found[:, None], dense, by_words)
            flag = torch.where(found, flag, share_found)
        return torch.cat([dense, flag[:, None]], dim=1)
