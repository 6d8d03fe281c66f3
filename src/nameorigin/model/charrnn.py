"""CharRNN: one recurrent cell, written here, applied to every character with the same weights.

The input projection of all timesteps is one matmul before the loop; only the recurrent product stays inside.
With `capture=True` the forward pass records what is needed to split the cell's weight gradients into one
contribution per use (timestep, nameorigin.model.capture), so callers can check that autograd's `.grad` is their sum.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from nameorigin.config import Cell, NetConfig, TransferShape
from nameorigin.model.bptt import final_state
from nameorigin.model.capture import StepCapture
from nameorigin.model.cells import cell_spec, check_cell
from nameorigin.model.loops import LOOPS, bptt_loop, reverse_within_length, sort_longest_first
from nameorigin.model.ngram import NgramHead
from nameorigin.model.transfer_layers import TransferLayers

SHARED_WEIGHTS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
FIRST_CELL = "cell"  # the first layer's forward cell: a one-way, one-layer model's only cell
REVERSE = "_reverse"  # the suffix of a cell that reads each name backwards


def cell_layout(directions: int, layers: int) -> list[list[str]]:
    """The cells' attribute names, layer by layer, forwards then backwards: [["cell", "cell_reverse"],
    ["cell_l1", "cell_l1_reverse"], ...]. The first layer's names are a one-way, one-layer model's."""
    return [[f"{FIRST_CELL}{f'_l{layer}' if layer else ''}{REVERSE if backwards else ''}"
             for backwards in range(directions)] for layer in range(layers)]


class RecurrentCell(nn.Module):
    """One cell of the registry (nameorigin.model.cells) with torch's parameter layout, so weights copy to and from
    its `torch_reference` (nn.RNN, nn.GRU, nn.LSTM, ...)."""

    def __init__(self, kind: Cell | str, input_size: int, hidden_size: int):
        super().__init__()
        self.kind, self.spec = Cell(kind), cell_spec(kind)
        self.hidden_size = hidden_size
        rows = self.spec.gates * hidden_size
        self.weight_ih = nn.Parameter(torch.empty(rows, input_size))
        self.weight_hh = nn.Parameter(torch.empty(rows, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(rows))
        self.bias_hh = nn.Parameter(torch.empty(rows))
        bound = 1 / math.sqrt(hidden_size)
        for weight in self.parameters():
            nn.init.uniform_(weight, -bound, bound)

    def step(self, gi: torch.Tensor, gh: torch.Tensor, h: torch.Tensor,
             c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One timestep from the input projection `gi` and the recurrent projection `gh` (biases included): the
        cell's reference step, which the BPTT loops and the exported scan are tested against. The state is always
        (h, c); only a cell with memory (the LSTM) uses c."""
        return self.spec.step(gi, gh, h, c)


def batch_tokens(encoded: Sequence[Sequence[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded tokens and lengths of encoded names; the mask's row-major order matches the concatenated
    names, so it is one tensor copy per batch."""
    lengths = torch.tensor([len(codes) for codes in encoded])
    tokens = torch.zeros(len(encoded), int(lengths.max()), dtype=torch.long)
    tokens[torch.arange(tokens.shape[1])[None, :] < lengths[:, None]] = torch.tensor(
        list(itertools.chain.from_iterable(encoded)), dtype=torch.long)
    return tokens.to(device), lengths.to(device)


class CharRNN(nn.Module):
    """Embedding (or one-hot) -> one recurrent cell looped over characters -> linear head on the last state,
    plus (ngram_buckets > 0) a hashed character n-gram head whose scores add to the logits. Fine-tuning composes
    its parts (nameorigin.model.transfer_layers) around this core: extra head inputs and extra evidence.

    With `directions: 2` a second cell (`cell_reverse`, its own weights) reads each name from its last character
    to its first, and the head reads both final states side by side: a name's origin often shows at its start
    ("Mc", "van") as much as at its end ("ski", "ović"). With `layers: N` each layer above the first reads the
    states of the one below, position by position (both directions' side by side). Each cell is one set of
    weights reused at every step.

    In eval mode the logits pass through the decision layer kept as buffers, so the checkpoint carries it:
    `logit_offset` (post-hoc logit adjustment, -tau * log prior) and `temperature` (fitted on validation)."""

    def __init__(self, config: NetConfig, vocab_size: int, num_classes: int, transfer: TransferLayers | None = None,
                 boundary: int = -1):
        super().__init__()
        self.config, self.vocab_size = config, vocab_size
        # A name of parts (nameorigin.base.parts): the boundary's index, a token the cell reads like any character;
        # the n-gram heads stop at it and the known names read the family part. -1: one string.
        self.boundary = boundary
        hidden, embedding_dim = config.hidden_size, config.embedding_dim
        check_cell(config)
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=0) if embedding_dim else None
        self.layer_names = cell_layout(config.directions, config.layers)
        self.state_size = hidden * config.directions  # what the head, and each layer above the first, reads
        for layer, names in enumerate(self.layer_names):
            for name in names:
                self.add_module(name, RecurrentCell(config.cell, self.state_size if layer else embedding_dim
                                                    or vocab_size, hidden))
        self.cell_names = [name for names in self.layer_names for name in names]
        self.loop = LOOPS[config.impl]  # the training loop, chosen once
        self.input_dropout = nn.Dropout(config.input_dropout)  # on each character's vector
        self.dropout = nn.Dropout(config.dropout)
        self.transfer = transfer
        self.head = nn.Linear(self.state_size + (transfer.feature_size if transfer else 0), num_classes)
        self.ngram = NgramHead(vocab_size, num_classes, config.ngram_buckets, config.ngram_max,
                               config.ngram_dropout, config.ngram_hash) if config.ngram_buckets else None
        self.register_buffer("logit_offset", torch.zeros(num_classes))
        self.register_buffer("temperature", torch.ones(()))
        self.capture: dict[str, StepCapture] | None = None  # by cell name, after a forward with capture=True
        self.product_dtype: torch.dtype | None = None  # inference's recurrent products in bf16 (Predictor precision)

    def take_capture(self) -> dict[str, StepCapture] | None:
        """The last captured forward's records (None if none), handed over once: the next step records anew."""
        capture, self.capture = self.capture, None
        return capture

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor, capture: bool = False,
                one_length: bool = False) -> torch.Tensor:
        """tokens: [B, T] right-padded indices, lengths: [B]. Raw logits in training, decided ones in eval.
        one_length: every name is T characters long (the GPU fast path's batches, nameorigin.fit.graphed),
        so the loop's shapes follow from the tensor's and nothing is read back from the device."""
        h = self.encode(tokens, lengths, capture, one_length)
        logits = self.readout(h, tokens, lengths)
        return logits if self.training else self.decide(logits)

    def encode(self, tokens: torch.Tensor, lengths: torch.Tensor, capture: bool = False,
               one_length: bool = False) -> torch.Tensor:
        """Final hidden state of each name, taken at its own last character (for two directions, each cell's,
        side by side: [B, 2H]).

        Under mixed precision (trainer=gpu's bf16-mixed) the recurrence still runs in the weights' dtype: bptt.py's
        buffers are allocated in it, a bf16 state would be rounded again at every character, and the
        gradient-accumulation check compares float32 sums. Only the heads after it run in bf16."""
        with torch.autocast(tokens.device.type, enabled=False):
            if not (capture or torch.is_grad_enabled() or self.dropping_inputs):
                return self.inference_state(tokens, lengths)
            record = {name: StepCapture(lengths.detach()) for name in self.cell_names} if capture else None
            h = self.run_layers(self.loop, tokens, lengths, record, one_length)
            self.capture = record
            return h

    def run_layers(self, loop: Callable[..., torch.Tensor], tokens: torch.Tensor, lengths: torch.Tensor,
                   record: dict[str, StepCapture] | None = None, one_length: bool = False) -> torch.Tensor:
        """Every layer in turn, each of its cells on its reading of the layer's input; the top layer's final
        states side by side. Below the top, each cell returns its state after every character, put back in the
        name's own order, for the layer above."""
        inputs = tokens
        for layer, names in enumerate(self.layer_names):
            top = layer == len(self.layer_names) - 1
            states = []
            for name in names:
                out = loop(self, getattr(self, name), self.reading(inputs, lengths, name), lengths,
                           None if record is None else record[name], one_length, every_step=not top)
                states.append(out if top else self.reading(out, lengths, name))
            inputs = states[0] if len(states) == 1 else torch.cat(states, dim=-1)
        return inputs

    def named_cells(self) -> list[tuple[str, RecurrentCell]]:
        """Each recurrent cell with its attribute name, in reading order: forwards, then backwards."""
        return [(name, getattr(self, name)) for name in self.cell_names]

    def reading(self, tokens: torch.Tensor, lengths: torch.Tensor, name: str) -> torch.Tensor:
        """The characters in the order the cell `name` reads them."""
        return reverse_within_length(tokens, lengths) if name.endswith(REVERSE) else tokens

    def inference_state(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """No graph to record: bptt.final_state, the in-place loop over the batch sorted longest first. A stacked
        model needs every state of the layers below: it runs the bptt loop without a graph."""
        if len(self.layer_names) > 1:
            return self.run_layers(bptt_loop, tokens, lengths)
        # Sorted once: each direction reads the sorted rows (reversing a row keeps its length).
        ordered, ordered_lengths, unsort, batch_sizes = sort_longest_first(tokens, lengths)
        states = []
        for name, cell in self.named_cells():
            table = self.projection_table(cell, cell.bias_ih)
            reading = self.reading(ordered, ordered_lengths, name)
            states.append(final_state(cell.spec, table, reading.t(), cell.weight_hh, cell.bias_hh,
                                      batch_sizes, self.product_dtype)[unsort])
        return states[0] if len(states) == 1 else torch.cat(states, dim=-1)

    def readout(self, h: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor,
                recurrent_only: bool = False) -> torch.Tensor:
        """Raw logits from the last state (and, for the n-gram head and known names, the tokens). recurrent_only:
        the recurrent part's logits alone, without the n-gram head (and the linear part mixed into it) or the
        known-name evidence: what the network learnt by itself."""
        features, boundaries = self.dropout(h), self.boundaries(tokens)
        source = self.transfer.features(h, tokens, lengths, boundaries) if self.transfer is not None else None
        if source is not None:
            features = torch.cat([features, source], dim=-1)
        logits = self.head(features)
        if recurrent_only:
            return logits
        if self.ngram is not None:
            logits = logits + self.ngram(tokens, lengths, boundaries)
        evidence = self.transfer.evidence(tokens, lengths, boundaries) if self.transfer is not None else None
        return logits if evidence is None else logits + evidence

    def boundaries(self, tokens: torch.Tensor) -> torch.Tensor | None:
        """[B, T] where a name of parts has a boundary; None for a model of one string."""
        return tokens == self.boundary if self.boundary >= 0 else None

    def raw_logits(self, tokens: torch.Tensor, lengths: torch.Tensor, recurrent_only: bool = False) -> torch.Tensor:
        """The logits before the decision layer, in any mode."""
        return self.readout(self.encode(tokens, lengths), tokens, lengths, recurrent_only)

    def decide(self, logits: torch.Tensor) -> torch.Tensor:
        """The decision layer: adjusted for the class prior, then temperature-scaled."""
        return (logits + self.logit_offset) / self.temperature

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.embedding is not None:
            return self.input_dropout(self.embedding(tokens))
        return self.input_dropout(F.one_hot(tokens, self.vocab_size).to(self.head.weight.dtype))

    @property
    def dropping_inputs(self) -> bool:
        """Input dropout is active, so x_t is no longer a fixed row per character."""
        return self.training and self.input_dropout.p > 0

    def input_projection(self, tokens: torch.Tensor, cell: RecurrentCell, keep_inputs: bool,
                         fold_recurrent_bias: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x_t W_ih^T + b_ih for every timestep at once (plus b_hh when folding it, see bptt.py), and x itself
        when `keep_inputs` (for capture). Without input dropout each x_t is a row of a fixed table (the embedding,
        or the identity for one-hot), so this is a lookup into the projected table: vocab-many products instead
        of one per character, with the same gradients. Above the first layer `tokens` are the states below
        ([..., F], floating point), projected as they are."""
        bias = cell.bias_ih + cell.bias_hh if fold_recurrent_bias else cell.bias_ih
        if tokens.is_floating_point():
            return F.linear(tokens, cell.weight_ih, bias), tokens
        if not self.dropping_inputs:
            return (F.embedding(tokens, self.projection_table(cell, bias)),
                    self.embed(tokens) if keep_inputs else None)
        x = self.embed(tokens)
        return F.linear(x, cell.weight_ih, bias), x

    def projection_table(self, cell: RecurrentCell, bias: torch.Tensor) -> torch.Tensor:
        """[vocab, G*H]: each character's x W_ih^T + bias, for the cell's input weights."""
        vocab = torch.arange(self.vocab_size, device=bias.device)
        return F.linear(self.embed(vocab), cell.weight_ih, bias)


def build_net(config: NetConfig, vocab_size: int, num_classes: int,
              transfer: TransferShape | None = None, boundary: int = -1) -> CharRNN:
    """The core network and, for a fine-tuned model, the parts composed around it."""
    parts = None
    if transfer:
        parts = TransferLayers(transfer, vocab_size, config.hidden_size * config.directions, num_classes,
                              config.ngram_max,
                              getattr(config, "evidence_hidden", 0))
    return CharRNN(config, vocab_size, num_classes, parts, boundary)
