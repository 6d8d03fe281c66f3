"""CharRNN: one recurrent cell, written here, applied to every character with the same weights.

The input projection of all timesteps is one matmul before the loop; only the recurrent product stays inside.
With `capture=True` the forward pass records what is needed to split the cell's weight gradients into one
contribution per use (timestep), so callers can check that autograd's `.grad` is exactly their sum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from nameorigin.bptt import CellLoop, final_state
from nameorigin.known import KnownNames
from nameorigin.ngram import NgramHead

GATES = {"rnn": 1, "gru": 3, "lstm": 4}
IMPLS = ("autograd", "bptt")
SHARED_WEIGHTS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def check_cell(cell: str) -> str:
    if cell not in GATES:
        raise ValueError(f"unknown cell {cell!r}: choose one of {', '.join(GATES)}")
    return cell


class RecurrentCell(nn.Module):
    """Elman RNN (tanh), GRU or LSTM cell with torch's parameter layout, so weights copy to/from nn.RNN/GRU/LSTM."""

    def __init__(self, kind: str, input_size: int, hidden_size: int):
        super().__init__()
        self.kind = check_cell(kind)
        self.hidden_size = hidden_size
        rows = GATES[kind] * hidden_size
        self.weight_ih = nn.Parameter(torch.empty(rows, input_size))
        self.weight_hh = nn.Parameter(torch.empty(rows, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(rows))
        self.bias_hh = nn.Parameter(torch.empty(rows))
        bound = 1 / math.sqrt(hidden_size)
        for weight in self.parameters():
            nn.init.uniform_(weight, -bound, bound)

    def step(self, gi: torch.Tensor, gh: torch.Tensor, h: torch.Tensor,
             c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One timestep from the input projection `gi` and the recurrent projection `gh` (biases included).
        The state is always (h, c); only the LSTM uses c. (A fixed signature keeps this TorchScript-able.)"""
        if self.kind == "rnn":
            return torch.tanh(gi + gh), c
        if self.kind == "gru":
            i_r, i_z, i_n = gi.chunk(3, dim=1)
            h_r, h_z, h_n = gh.chunk(3, dim=1)
            reset, update = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
            candidate = torch.tanh(i_n + reset * h_n)
            return candidate + update * (h - candidate), c
        i, f, g, o = (gi + gh).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


@dataclass
class StepCapture:
    """Per-timestep tensors from one forward pass; the gradients are filled in by hooks during backward."""

    lengths: torch.Tensor
    inputs: torch.Tensor  # [B, T, E]: x_t, what weight_ih multiplies at step t
    # h_{t-1}, what weight_hh multiplies at step t: a list per step (autograd) or [B, T, H] (bptt)
    hiddens: list[torch.Tensor] | torch.Tensor = field(default_factory=list)
    grad_gi: torch.Tensor | None = None  # dL/d(x_t W_ih^T + b_ih), [B, T, G*H]
    # dL/d(h_{t-1} W_hh^T + b_hh): t -> [B, G*H] filled by hooks (autograd), or [B, T, G*H] (bptt)
    grad_gh: dict[int, torch.Tensor] | torch.Tensor = field(default_factory=dict)

    def by_distance(self, values: torch.Tensor) -> torch.Tensor:
        """Reorder [B, T, ...] so index d is each name's d-th character from its end; padding becomes zero."""
        batch, steps = values.shape[:2]
        distance = torch.arange(steps, device=values.device)
        position = self.lengths.to(values.device)[:, None] - 1 - distance[None, :]
        valid = (position >= 0).to(values.dtype)
        index = position.clamp(min=0).view(batch, steps, *([1] * (values.dim() - 2))).expand_as(values)
        return values.gather(1, index) * valid.view(batch, steps, *([1] * (values.dim() - 2)))

    def contributions(self) -> dict[str, torch.Tensor]:
        """Each shared weight's gradient split by use: name -> [distance from last char, *weight.shape]."""
        if self.grad_gi is None or len(self.grad_gh) != len(self.hiddens):
            raise RuntimeError("contributions() needs a backward pass through the captured forward")
        grad_gh, hiddens = self.grad_gh, self.hiddens
        if isinstance(grad_gh, dict):
            grad_gh = torch.stack([grad_gh[t] for t in range(len(hiddens))], dim=1)
            hiddens = torch.stack(hiddens, dim=1)
        grad_gi, grad_gh = self.by_distance(self.grad_gi), self.by_distance(grad_gh)
        inputs, hiddens = self.by_distance(self.inputs), self.by_distance(hiddens)
        return {
            "weight_ih": torch.einsum("bdg,bde->dge", grad_gi, inputs),
            "weight_hh": torch.einsum("bdg,bdh->dgh", grad_gh, hiddens),
            "bias_ih": grad_gi.sum(0),
            "bias_hh": grad_gh.sum(0),
        }


class CharRNN(nn.Module):
    """Embedding (or one-hot) -> one recurrent cell looped over characters -> linear head on the last state,
    plus (ngram_buckets > 0) a hashed character n-gram head whose scores add to the logits.

    Transfer from a pretrained country model: with source_classes > 0 the pretrained country head stays
    (`source_head`) and its distribution over countries joins the last state as the head's input; with
    known_names > 0 a table of names-dataset surnames (`known`) adds evidence for names found there.

    In eval mode the logits pass through the decision layer kept as buffers, so the checkpoint carries it:
    `logit_offset` (post-hoc logit adjustment, -tau * log prior) and `temperature` (fitted on validation)."""

    def __init__(self, vocab_size: int, num_classes: int, cell: str = "gru", hidden_size: int = 256,
                 embedding_dim: int = 64, dropout: float = 0.0, impl: str = "autograd", input_dropout: float = 0.0,
                 ngram_buckets: int = 0, ngram_max: int = 4, source_classes: int = 0, source_ngram_buckets: int = 0,
                 known_names: int = 0, known_countries: int = 0, evidence_hidden: int = 0):
        super().__init__()
        check_cell(cell)
        if impl not in IMPLS:
            raise ValueError(f"unknown impl {impl!r}: choose one of {', '.join(IMPLS)}")
        self.impl = impl
        for key, value in {"vocab_size": vocab_size, "num_classes": num_classes, "hidden_size": hidden_size}.items():
            if int(value) < 1:
                raise ValueError(f"{key}={value} must be a positive integer")
        if embedding_dim < 0:
            raise ValueError(f"embedding_dim={embedding_dim} must be >= 0 (0 means one-hot input)")
        for key, value in {"dropout": dropout, "input_dropout": input_dropout}.items():
            if not 0 <= value < 1:
                raise ValueError(f"{key}={value} must be in [0, 1)")
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=0) if embedding_dim else None
        self.cell = RecurrentCell(cell, embedding_dim or vocab_size, hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.input_dropout = nn.Dropout(input_dropout)  # on each character's vector: the strongest regularizer here
        self.source_head = nn.Linear(hidden_size, source_classes) if source_classes else None
        self.source_ngram = NgramHead(vocab_size, source_classes, source_ngram_buckets, ngram_max) \
            if source_classes and source_ngram_buckets else None
        self.head = nn.Linear(hidden_size + source_classes, num_classes)
        self.ngram = NgramHead(vocab_size, num_classes, ngram_buckets, ngram_max) if ngram_buckets else None
        self.known = self.evidence_head = None
        if known_names:
            if not known_countries:
                raise ValueError("known_names needs known_countries: the number of countries in the table")
            self.known = KnownNames(vocab_size, known_countries, known_names)
            # A hidden layer lets the evidence combine countries (a share of both GB and IE is not the sum of each).
            self.evidence_head = nn.Sequential(nn.Linear(known_countries + 1, evidence_hidden), nn.ReLU(),
                                               nn.Linear(evidence_hidden, num_classes)) if evidence_hidden \
                else nn.Linear(known_countries + 1, num_classes)
        self.register_buffer("logit_offset", torch.zeros(num_classes))
        self.register_buffer("temperature", torch.ones(()))
        self.capture: StepCapture | None = None

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.embedding is not None:
            return self.input_dropout(self.embedding(tokens))
        return self.input_dropout(F.one_hot(tokens, self.vocab_size).to(self.head.weight.dtype))

    def input_projection(self, tokens: torch.Tensor, keep_inputs: bool,
                         fold_recurrent_bias: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x_t W_ih^T + b_ih for every timestep at once (plus b_hh when folding it, see bptt.py), and x itself
        when `keep_inputs` (for capture). Without input dropout each x_t is a row of a fixed table (the embedding,
        or the identity for one-hot), so this is a lookup into the projected table: vocab-many products instead
        of one per character, with the same gradients (~3.7 ms less per batch of 128 x 8 characters here)."""
        cell = self.cell
        bias = cell.bias_ih + cell.bias_hh if fold_recurrent_bias else cell.bias_ih
        if not self.dropping_inputs:
            table = self.projection_table(bias)
            return F.embedding(tokens, table), (self.embed(tokens) if keep_inputs else None)
        x = self.embed(tokens)
        return F.linear(x, cell.weight_ih, bias), x

    @property
    def dropping_inputs(self) -> bool:
        """Input dropout is active, so x_t is no longer a fixed row per character."""
        return self.training and self.input_dropout.p > 0

    def projection_table(self, bias: torch.Tensor) -> torch.Tensor:
        """[vocab, G*H]: each character's x W_ih^T + bias."""
        vocab = torch.arange(self.vocab_size, device=bias.device)
        return F.linear(self.embed(vocab), self.cell.weight_ih, bias)

    def encode(self, tokens: torch.Tensor, lengths: torch.Tensor, capture: bool = False) -> torch.Tensor:
        """Final hidden state of each name, taken at its own last character. tokens: [B, T], lengths: [B].
        Under mixed precision (trainer=gpu's bf16-mixed) the recurrence still runs in the weights' dtype:
        bptt.py's buffers are allocated in it, a bf16 state would be rounded again at every character, and the
        gradient-accumulation check compares float32 sums. Only the heads after it run in bf16."""
        with torch.autocast(tokens.device.type, enabled=False):
            return self._encode(tokens, lengths, capture)

    def _encode(self, tokens: torch.Tensor, lengths: torch.Tensor, capture: bool) -> torch.Tensor:
        if self.impl == "bptt" or not (capture or torch.is_grad_enabled()):  # no graph: the sorted loop is faster
            return self._encode_sorted(tokens, lengths, capture)
        cell = self.cell
        gi, x = self.input_projection(tokens, capture)  # every timestep's input projection in one go
        h = c = gi.new_zeros(tokens.shape[0], cell.hidden_size)
        active = torch.arange(tokens.shape[1], device=tokens.device)[None, :] < lengths.to(tokens.device)[:, None]
        record = StepCapture(lengths.detach(), x.detach()) if capture else None
        if record is not None:
            gi.register_hook(lambda grad: setattr(record, "grad_gi", grad.detach()))
        for t in range(tokens.shape[1]):
            gh = F.linear(h, cell.weight_hh, cell.bias_hh)
            if record is not None:
                record.hiddens.append(h.detach())
                gh.register_hook(lambda grad, t=t: record.grad_gh.__setitem__(t, grad.detach()))
            h_new, c_new = cell.step(gi[:, t], gh, h, c)
            keep = active[:, t, None]  # finished names keep their last state; padding adds no gradient
            h, c = torch.where(keep, h_new, h), torch.where(keep, c_new, c)
        self.capture = record
        return h

    def _encode_sorted(self, tokens: torch.Tensor, lengths: torch.Tensor, capture: bool) -> torch.Tensor:
        """Same result as the autograd loop, on a batch sorted longest first so each step touches only the
        names still running: bptt.CellLoop when training, bptt.final_state (nothing kept) for inference."""
        lengths = lengths.to(tokens.device)
        order = torch.argsort(lengths, descending=True, stable=True)
        tokens, lengths = tokens[order], lengths[order]
        steps = torch.arange(tokens.shape[1], device=tokens.device)
        batch_sizes = (lengths[None, :] > steps[:, None]).sum(1).tolist()
        cell = self.cell
        fold = cell.kind != "gru"  # rnn/lstm gates see gi + gh: bias_hh joins the input projection
        bias_hh = None if fold else cell.bias_hh
        if not (torch.is_grad_enabled() or capture or self.dropping_inputs):
            table = self.projection_table(cell.bias_ih)
            final = final_state(cell.kind, table, tokens.t(), cell.weight_hh, cell.bias_hh, batch_sizes)
            return final[torch.argsort(order)]
        # Time-major from the start ([T, B, ...]), so the loop's per-step slices need no transposed copy.
        gi, x = self.input_projection(tokens.t(), capture, fold_recurrent_bias=fold)
        record = StepCapture(lengths.detach(), x.detach().transpose(0, 1)) if capture else None
        if record is not None:
            gi.register_hook(lambda grad: setattr(record, "grad_gi", grad.detach().transpose(0, 1)))
        final = CellLoop.apply(gi, cell.weight_hh, bias_hh, cell.kind, lengths, batch_sizes, record)
        self.capture = record
        return final[torch.argsort(order)]

    def readout(self, h: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Raw logits from the last state (and, for the n-gram head and known names, the tokens)."""
        features = self.dropout(h)
        if self.source_head is not None:  # the pretrained country model's distribution
            source = self.source_head(h)
            if self.source_ngram is not None:
                source = source + self.source_ngram(tokens, lengths)
            features = torch.cat([features, source.softmax(-1)], dim=-1)
        logits = self.head(features)
        if self.ngram is not None:
            logits = logits + self.ngram(tokens, lengths)
        if self.known is not None:
            logits = logits + self.evidence_head(self.known(tokens, lengths))
        return logits

    def scores(self, tokens: torch.Tensor, lengths: torch.Tensor, capture: bool = False) -> torch.Tensor:
        """Raw logits: what the training loss sees."""
        return self.readout(self.encode(tokens, lengths, capture), tokens, lengths)

    def decide(self, logits: torch.Tensor) -> torch.Tensor:
        """The decision layer: adjusted for the class prior, then temperature-scaled."""
        return (logits + self.logit_offset) / self.temperature

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor, capture: bool = False) -> torch.Tensor:
        logits = self.scores(tokens, lengths, capture)
        return logits if self.training else self.decide(logits)
