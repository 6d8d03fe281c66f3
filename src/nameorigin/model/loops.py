"""The time loops of `model.impl`: each runs one cell over a batch of names and returns each name's final state,
or (`every_step`, for a layer that feeds another) its state after every character, [B, T, H].

Every loop takes the network (for the input projection, which may be a lookup into a per-character table) and
the cell to run, so a two-way model runs the same loop twice, once on the names read backwards
(`reverse_within_length`), and a stacked one runs it again on the states below. The inputs are tokens [B, T] for
the first layer and states [B, T, F] above it. With a `StepCapture` the loop records what splits the cell's
weight gradients into one contribution per timestep.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from nameorigin.base.errors import UserError
from nameorigin.base.extras import missing_extra
from nameorigin.config import Impl
from nameorigin.model.bptt import CellLoop
from nameorigin.model.capture import StepCapture

if TYPE_CHECKING:
    from nameorigin.model.charrnn import CharRNN, RecurrentCell


def reverse_within_length(values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Each name's characters (or states, [B, T, F]) in reverse order, padding left at the end: "abc" + padding ->
    "cba" + padding. The same positions are read for every row of a one-length batch, so nothing is read back from
    the device. Its own inverse."""
    steps = torch.arange(values.shape[1], device=values.device)
    lengths = lengths.to(values.device)[:, None]
    source, inside = (lengths - 1 - steps[None, :]).clamp(min=0), steps[None, :] < lengths
    extra = values.shape[2:]
    source = source.view(*source.shape, *[1] * len(extra)).expand(*source.shape, *extra)
    inside = inside.view(*inside.shape, *[1] * len(extra))
    return torch.where(inside, values.gather(1, source), torch.zeros_like(values))


def sort_longest_first(tokens: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The batch sorted longest first (so each step touches only the names still running), the order that undoes
    it, and how many names run at each step."""
    lengths = lengths.to(tokens.device)
    order = torch.argsort(lengths, descending=True, stable=True)
    tokens, lengths = tokens[order], lengths[order]
    steps = torch.arange(tokens.shape[1], device=tokens.device)
    batch_sizes = (lengths[None, :] > steps[:, None]).sum(1).tolist()
    return tokens, lengths, torch.argsort(order), batch_sizes


def autograd_loop(net: CharRNN, cell: RecurrentCell, tokens: torch.Tensor, lengths: torch.Tensor,
                  record: StepCapture | None, one_length: bool = False, every_step: bool = False) -> torch.Tensor:
    """model.impl=autograd, the reference: the cell's own step in a plain loop that autograd records."""
    gi, x = net.input_projection(tokens, cell, record is not None)  # every timestep's input projection in one go
    if record is not None:
        record.inputs = x.detach()
        record.watch_input_projection(gi)
    h = c = gi.new_zeros(tokens.shape[0], cell.hidden_size)
    active = torch.arange(tokens.shape[1], device=tokens.device)[None, :] < lengths.to(tokens.device)[:, None]
    states = []
    for t in range(tokens.shape[1]):
        gh = F.linear(h, cell.weight_hh, cell.bias_hh)
        if record is not None:
            record.watch_step(t, h, gh)
        h_new, c_new = cell.step(gi[:, t], gh, h, c)
        keep = active[:, t, None]  # finished names keep their last state; padding adds no gradient
        h, c = torch.where(keep, h_new, h), torch.where(keep, c_new, c)
        states.append(h)
    return torch.stack(states, dim=1) if every_step else h


def bptt_loop(net: CharRNN, cell: RecurrentCell, tokens: torch.Tensor, lengths: torch.Tensor,
              record: StepCapture | None, one_length: bool = False, every_step: bool = False) -> torch.Tensor:
    """model.impl=bptt: bptt.CellLoop, the hand-written backward, on the batch sorted longest first. A batch of
    `one_length` (every name as long as `tokens` is wide) needs no sort: every name runs at every step, which the
    host knows without reading the lengths back from the device."""
    if one_length:
        steps, batch = tokens.shape[1], tokens.shape[0]
        unsort, batch_sizes = None, [batch] * steps
    else:
        tokens, lengths, unsort, batch_sizes = sort_longest_first(tokens, lengths)
    fold = cell.spec.folds_bias  # every gate sees gi + gh: bias_hh joins the input projection
    # Time-major from the start ([T, B, ...]), so the loop's per-step slices need no transposed copy.
    gi, x = net.input_projection(tokens.transpose(0, 1), cell, record is not None, fold_recurrent_bias=fold)
    if record is not None:
        record.lengths, record.inputs = lengths.detach(), x.detach().transpose(0, 1)
        record.watch_input_projection(gi, time_major=True)
    out = CellLoop.apply(gi, cell.weight_hh, None if fold else cell.bias_hh, cell.spec, lengths, batch_sizes,
                         record, every_step)
    if every_step:
        out = out.transpose(0, 1)  # [T, B, H] -> [B, T, H]
    return out if unsort is None else out[unsort]


def triton_loop(net: CharRNN, cell: RecurrentCell, tokens: torch.Tensor, lengths: torch.Tensor,
                record: StepCapture | None, one_length: bool = False, every_step: bool = False) -> torch.Tensor:
    """model.impl=triton (the cells with `triton`): nameorigin.model.triton_loop, the whole loop in one kernel each
    way; rows in any order. One layer only (the config refuses more), so never `every_step`."""
    if not (tokens.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"):
        raise UserError("model.impl=triton runs on a CUDA device (or the CPU under TRITON_INTERPRET=1, for tests): "
                        "use trainer=gpu, or model.impl=bptt on the CPU")
    try:
        from nameorigin.model.triton_loop import TritonLoop
    except ImportError as error:
        raise missing_extra("model.impl=triton", "triton", error) from None
    gi, x = net.input_projection(tokens.t(), cell, record is not None)  # time-major; bias_hh goes to the kernel
    if record is not None:
        record.lengths, record.inputs = lengths.detach(), x.detach().transpose(0, 1)
        record.watch_input_projection(gi, time_major=True)
    return TritonLoop.apply(gi, cell.weight_hh, cell.bias_hh, lengths, cell.spec, record)


LOOPS: dict[str, Callable[..., torch.Tensor]] = {Impl.autograd: autograd_loop, Impl.bptt: bptt_loop,
                                                 Impl.triton: triton_loop}
