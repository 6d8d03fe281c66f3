"""A hand-written backward through time for the cell loop (`model.impl=bptt`).

Autograd records ~15 graph nodes per timestep; here the forward keeps each step's gate activations in
preallocated buffers, and the backward walks the steps in reverse computing only what flows to the previous
hidden state. Each step's gradient w.r.t. the recurrent pre-activation is kept, so the recurrent weight's
gradient is ONE matrix product at the end: sum_t dgh_t^T h_{t-1}, the same sum autograd would build use by use.

Rows are sorted by length (longest first) so step t touches only the `batch_sizes[t]` names still running,
as packed sequences do. The first step starts from h = 0, so its recurrent product is skipped, and so is the
gradient w.r.t. that zero state. For a cell whose gates all see gi + gh (`CellSpec.folds_bias`) the caller folds
bias_hh into gi, passing bias_hh=None: the two biases are one. Each step's arithmetic is the cell's own
(nameorigin.model.cells); the loops here are the same for every cell. The plain autograd loop of charrnn.py stays
the reference this is tested against.
"""

from __future__ import annotations

from typing import Any

import torch

from nameorigin.model.cells.base import CellSpec, recurrent_product


def _forward(cell: CellSpec, gi: torch.Tensor, weight_hh: torch.Tensor, bias_hh: torch.Tensor | None,
             batch_sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """hs[t] = h_{t-1} of the rows active at step t; acts = gate activations; extra = what else the cell keeps
    for its backward (CellSpec.bptt_buffers). Finished rows are not touched."""
    steps, batch, _ = gi.shape
    hidden = weight_hh.shape[1]
    # Buffers start empty: zeroing megabytes per batch is measurable here. Only what is read gets zeros: h_{-1},
    # and h_t of rows already finished, which the recurrent weight gradient multiplies by a zero gradient.
    hs = gi.new_empty(steps + 1, batch, hidden)
    hs[0] = 0
    acts, extra = cell.bptt_buffers(gi, hs)
    w_t = weight_hh.t()
    for t, n in enumerate(batch_sizes):
        if n < batch:
            hs[t + 1, n:] = 0
        cell.bptt_forward(t, n, gi[t, :n], w_t, bias_hh, hs, acts, extra)
    return hs, acts, extra


def _backward(cell: CellSpec, grad_h: torch.Tensor, hs: torch.Tensor, acts: torch.Tensor,
              extra: torch.Tensor | None, weight_hh: torch.Tensor, batch_sizes: list[int],
              every_step: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns dL/d(gi) and dL/d(gh) for every step, [T, B, G*H] each (zero where a name had ended). grad_h is
    dL/d(final state) [B, H], or with `every_step` dL/d(state after step t) for every step, [T, B, H]."""
    steps, batch, gates = acts.shape
    grad_gi = acts.new_empty(steps, batch, gates)
    grad_gh = grad_gi if cell.folds_bias else acts.new_empty(steps, batch, gates)
    dh = torch.zeros_like(grad_h[0] if every_step else grad_h)
    dc = torch.zeros_like(dh) if cell.carries_memory else None
    for t in range(steps - 1, -1, -1):
        n = batch_sizes[t]
        ending = batch_sizes[t + 1] if t + 1 < steps else 0
        if every_step:  # what the layer above sent back to this step's state, plus what came through step t + 1
            dh[:n] += grad_h[t, :n]
        elif ending < n:  # rows sorted longest first: these names end at step t
            dh[ending:n] = grad_h[ending:n]
        if n < batch:  # names already ended: no gradient at this step
            grad_gi[t, n:] = 0
            if grad_gh is not grad_gi:
                grad_gh[t, n:] = 0
        cell.bptt_backward(t, n, dh[:n], None if dc is None else dc[:n], hs, acts, extra, weight_hh,
                           grad_gi[t, :n], grad_gh[t, :n])
    return grad_gi, grad_gh


@torch.no_grad()
def final_state(cell: CellSpec, table: torch.Tensor, tokens: torch.Tensor, weight_hh: torch.Tensor,
                bias_hh: torch.Tensor, batch_sizes: list[int],
                product_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Inference only: the same recurrence with nothing kept for a backward, updating the state in place.
    table: [vocab, G*H], each character's x W_ih^T + b_ih; tokens: [T, B] time-major, rows sorted longest first,
    so rows past batch_sizes[t] have finished and already hold their final h.

    Choices measured on the CPU (docs/speed.md): each gate gets its own contiguous [n, H] block and product
    (elementwise work on column slices of one [n, G*H] block is slower); each step gathers its rows of the table
    into buffers allocated once per call (allocating per step costs page faults); every tanh is
    2 sigmoid(2x) - 1, the doubling folded into the table and weights once (torch's CPU tanh costs more than its
    sigmoid). The bias_hh of the gates that see gi + gh joins the table; the others' goes to the cell's step.
    `product_dtype` (bfloat16): the recurrent products in that precision, the state and gates in the table's."""
    hidden = weight_hh.shape[1]
    gates, batch = weight_hh.shape[0] // hidden, tokens.shape[1]
    scale = table.new_ones(gates, hidden)
    scale[list(cell.tanh_gates)] = 2
    bias_hh = bias_hh.view(gates, hidden)
    summed = torch.zeros(gates, 1, dtype=torch.bool, device=table.device)
    summed[list(cell.summed_gates)] = True
    tables = ((table.view(-1, gates, hidden) + bias_hh * summed) * scale).transpose(0, 1).contiguous()  # [G, V, H]
    weights_t = (weight_hh.view(gates, hidden, hidden) * scale[:, :, None]).transpose(1, 2)  # W_k^T per gate
    if product_dtype is not None:
        weights_t = weights_t.to(product_dtype)
    step_bias = bias_hh * scale * ~summed  # for the gates outside summed_gates, which the cell's step adds
    pre, scratch = table.new_empty(gates, batch, hidden), table.new_empty(batch, hidden)
    h = table.new_zeros(batch, hidden)
    c = table.new_zeros(batch, hidden) if cell.carries_memory else None
    for t, n in enumerate(batch_sizes):
        h_prev, rows, gate = h[:n], tokens[t, :n], pre[:, :n]
        for k in range(gates):
            torch.index_select(tables[k], 0, rows, out=gate[k])
            if t and k in cell.summed_gates:
                recurrent_product(h_prev, weights_t[k], None, gate[k])
        cell.inference_step(t, gate, h_prev, None if c is None else c[:n], scratch[:n], weights_t, step_bias)
    return h


class CellLoop(torch.autograd.Function):
    """Final hidden state of a batch sorted longest first. gi: [T, B, G*H] time-major input projections
    (bias_hh folded in for a cell that `folds_bias`, whose bias_hh argument is then None); lengths: [B];
    batch_sizes[t]: how many names are still running at step t."""

    @staticmethod
    def forward(ctx: Any, gi: torch.Tensor, weight_hh: torch.Tensor, bias_hh: torch.Tensor | None,
                cell: CellSpec, lengths: torch.Tensor, batch_sizes: list[int], record: Any,
                every_step: bool = False) -> torch.Tensor:
        hs, acts, extra = _forward(cell, gi, weight_hh, bias_hh, batch_sizes)
        ctx.save_for_backward(hs, acts, weight_hh, *([] if extra is None else [extra]))
        ctx.cell, ctx.batch_sizes, ctx.record, ctx.every_step = cell, batch_sizes, record, every_step
        if every_step:  # every step's state, for the layer above (zero past a name's end: it reads nothing there)
            return hs[1:].clone()
        # Each name's final state was written at its own last step.
        return hs[lengths, torch.arange(gi.shape[1], device=hs.device)]

    @staticmethod
    def backward(ctx: Any, grad_h: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        hs, acts, weight_hh, *rest = ctx.saved_tensors
        grad_gi, grad_gh = _backward(ctx.cell, grad_h, hs, acts, rest[0] if rest else None, weight_hh,
                                     ctx.batch_sizes, ctx.every_step)
        steps, batch, gates = grad_gh.shape
        # Every use's gradient at once: one product over all (step, name) rows; step 0 multiplies h = 0.
        grad_w = grad_gh[1:].reshape(-1, gates).t() @ hs[1:-1].reshape(-1, hs.shape[-1])
        grad_bias = grad_gh.sum((0, 1)) if ctx.needs_input_grad[2] else None
        if ctx.record is not None:  # hand the per-step pieces to the gradient-accumulation logger
            ctx.record.hiddens = hs[:-1].transpose(0, 1)
            ctx.record.grad_gh = grad_gh.transpose(0, 1)
        return grad_gi, grad_w, grad_bias, None, None, None, None, None
