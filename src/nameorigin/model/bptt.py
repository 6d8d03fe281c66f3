"""A hand-written backward through time for the cell loop (`model.impl=bptt`).

Autograd records ~15 graph nodes per timestep; here the forward keeps each step's gate activations in
preallocated buffers, and the backward walks the steps in reverse computing only what flows to the previous
hidden state. Each step's gradient w.r.t. the recurrent pre-activation is kept, so the recurrent weight's
gradient is ONE matrix product at the end: sum_t dgh_t^T h_{t-1}, the same sum autograd would build use by use.

Rows are sorted by length (longest first) so step t touches only the `batch_sizes[t]` names still running,
as packed sequences do. The first step starts from h = 0, so its recurrent product is skipped, and so is the
gradient w.r.t. that zero state. For rnn and lstm the caller folds bias_hh into gi (passing bias_hh=None):
their gates see gi + gh, so the two biases are one. The plain autograd loop in model.py stays the reference
this is tested against.
"""

from __future__ import annotations

from typing import Any

import torch


def _forward(kind: str, gi: torch.Tensor, weight_hh: torch.Tensor, bias_hh: torch.Tensor | None,
             batch_sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """hs[t] = h_{t-1} of the rows active at step t; acts = gate activations (rnn: a view of hs[1:]);
    extra = per-cell state kept for the backward (GRU: the recurrent candidate term; LSTM: c_t and tanh(c_t)).
    Finished rows are not touched."""
    steps, batch, gates = gi.shape
    hidden = weight_hh.shape[1]
    # Buffers start empty: zeroing megabytes per batch is measurable here. Only what is read gets zeros: h_{-1},
    # and h_t of rows already finished, which the recurrent weight gradient multiplies by a zero gradient.
    hs = gi.new_empty(steps + 1, batch, hidden)
    hs[0] = 0
    acts = hs[1:] if kind == "rnn" else gi.new_empty(steps, batch, gates)
    extra = {"rnn": None, "gru": gi.new_empty(steps, batch, hidden),
             "lstm": gi.new_empty(steps, batch, 2 * hidden)}[kind]
    w_t = weight_hh.t()
    for t, n in enumerate(batch_sizes):
        if n < batch:
            hs[t + 1, n:] = 0
        h_prev, act, g = hs[t, :n], acts[t, :n], gi[t, :n]
        if kind == "rnn":
            torch.tanh(torch.addmm(g, h_prev, w_t) if t else g, out=act)
        elif kind == "gru":
            gh = torch.addmm(bias_hh, h_prev, w_t) if t else bias_hh.expand(n, -1)
            torch.sigmoid(g[:, : 2 * hidden] + gh[:, : 2 * hidden], out=act[:, : 2 * hidden])
            r, z = act[:, :hidden], act[:, hidden : 2 * hidden]
            torch.tanh(torch.addcmul(g[:, 2 * hidden :], r, gh[:, 2 * hidden :]), out=act[:, 2 * hidden :])
            cand = act[:, 2 * hidden :]
            torch.addcmul(cand, z, h_prev - cand, out=hs[t + 1, :n])
            extra[t, :n] = gh[:, 2 * hidden :]
        else:
            if t:
                torch.addmm(g, h_prev, w_t, out=act)
            else:
                act.copy_(g)
            # Gates i, f, g, o in one sigmoid: the cell input g = tanh(x) = 2 sigmoid(2x) - 1, because torch's
            # CPU tanh costs several times its sigmoid per element (docs/speed.md).
            act[:, 2 * hidden : 3 * hidden].mul_(2)
            i, f, cell_in, o = act.sigmoid_().chunk(4, dim=1)
            cell_in.mul_(2).sub_(1)
            c_new, tanh_c = extra[t, :n, :hidden], extra[t, :n, hidden:]
            if t:
                torch.mul(f, extra[t - 1, :n, :hidden], out=c_new).addcmul_(i, cell_in)
            else:
                torch.mul(i, cell_in, out=c_new)
            torch.tanh(c_new, out=tanh_c)
            torch.mul(o, tanh_c, out=hs[t + 1, :n])
    return hs, acts, extra


def _backward(kind: str, grad_h: torch.Tensor, hs: torch.Tensor, acts: torch.Tensor, extra: torch.Tensor | None,
              weight_hh: torch.Tensor, batch_sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns dL/d(gi) and dL/d(gh) for every step, [T, B, G*H] each (zero where a name had ended)."""
    steps, batch, gates = acts.shape
    hidden = weight_hh.shape[1]
    grad_gi = acts.new_empty(steps, batch, gates)
    grad_gh = grad_gi if kind != "gru" else acts.new_empty(steps, batch, gates)
    dh = torch.zeros_like(grad_h)
    dc = torch.zeros_like(grad_h) if kind == "lstm" else None
    one = acts.new_ones(())
    for t in range(steps - 1, -1, -1):
        n = batch_sizes[t]
        ending = batch_sizes[t + 1] if t + 1 < steps else 0
        if ending < n:  # rows sorted longest first: these names end at step t
            dh[ending:n] = grad_h[ending:n]
        if n < batch:  # names already ended: no gradient at this step
            grad_gi[t, n:] = 0
            if kind == "gru":
                grad_gh[t, n:] = 0
        d, a, dgi = dh[:n], acts[t, :n], grad_gi[t, :n]
        if kind == "rnn":
            torch.mul(d, torch.addcmul(one, a, a, value=-1), out=dgi)
            if t:
                torch.mm(dgi, weight_hh, out=d)
        elif kind == "gru":
            r, z, cand = a[:, :hidden], a[:, hidden : 2 * hidden], a[:, 2 * hidden :]
            d_cand_pre = d * (1 - z) * torch.addcmul(one, cand, cand, value=-1)
            torch.mul(d_cand_pre * extra[t, :n], torch.addcmul(r, r, r, value=-1), out=dgi[:, :hidden])
            torch.mul(d * (hs[t, :n] - cand), torch.addcmul(z, z, z, value=-1), out=dgi[:, hidden : 2 * hidden])
            dgi[:, 2 * hidden :] = d_cand_pre
            dgh = grad_gh[t, :n]
            dgh[:, : 2 * hidden] = dgi[:, : 2 * hidden]
            torch.mul(d_cand_pre, r, out=dgh[:, 2 * hidden :])
            if t:
                torch.addmm(d * z, dgh, weight_hh, out=d)
        else:
            i, f, cell_in, o = a.chunk(4, dim=1)
            tanh_c = extra[t, :n, hidden:]
            dcn = torch.addcmul(one, tanh_c, tanh_c, value=-1).mul_(o)
            dcn = torch.addcmul(dc[:n], d, dcn)
            # Upstream gradient of each gate's activation, written in place, then times each activation's slope.
            torch.mul(dcn, cell_in, out=dgi[:, :hidden])
            if t:
                torch.mul(dcn, extra[t - 1, :n, :hidden], out=dgi[:, hidden : 2 * hidden])
            else:  # c_{-1} = 0
                dgi[:, hidden : 2 * hidden] = 0
            torch.mul(dcn, i, out=dgi[:, 2 * hidden : 3 * hidden])
            torch.mul(d, tanh_c, out=dgi[:, 3 * hidden :])
            slope = torch.addcmul(a, a, a, value=-1)  # sigmoid' = a - a^2
            torch.addcmul(one, cell_in, cell_in, value=-1, out=slope[:, 2 * hidden : 3 * hidden])  # tanh' = 1 - a^2
            dgi.mul_(slope)
            if t:
                torch.mul(dcn, f, out=dc[:n])
                torch.mm(dgi, weight_hh, out=d)
    return grad_gi, grad_gh


@torch.no_grad()
def final_state(kind: str, table: torch.Tensor, tokens: torch.Tensor, weight_hh: torch.Tensor, bias_hh: torch.Tensor,
                batch_sizes: list[int]) -> torch.Tensor:
    """Inference only: the same recurrence with nothing kept for a backward, updating the state in place.
    table: [vocab, G*H], each character's x W_ih^T + b_ih; tokens: [T, B] time-major, rows sorted longest first,
    so rows past batch_sizes[t] have finished and already hold their final h.

    Choices measured on the CPU (docs/speed.md): each gate gets its own contiguous [n, H] block and product
    (elementwise work on column slices of one [n, G*H] block is slower); each step gathers its rows of the table
    into buffers allocated once per call (allocating per step costs page faults); every tanh is
    2 sigmoid(2x) - 1, the doubling folded into the table and weights once (torch's CPU tanh costs more than its
    sigmoid)."""
    hidden = weight_hh.shape[1]
    gates, batch = weight_hh.shape[0] // hidden, tokens.shape[1]
    scale = table.new_ones(gates, hidden)
    scale[0 if kind == "rnn" else 2] = 2  # the tanh pre-activations: rnn's only gate, gru's candidate, lstm's g
    bias_hh = bias_hh.view(gates, hidden)
    if kind == "gru":  # reset/update see gi + gh, so their bias_hh joins the table; the candidate's stays with gh
        candidate_bias = 2 * bias_hh[2]
        bias_hh = torch.cat([bias_hh[:2], bias_hh.new_zeros(1, hidden)])
    tables = ((table.view(-1, gates, hidden) + bias_hh) * scale).transpose(0, 1).contiguous()  # [G, vocab, H]
    weights_t = (weight_hh.view(gates, hidden, hidden) * scale[:, :, None]).transpose(1, 2)  # W_k^T per gate
    pre, scratch = table.new_empty(gates, batch, hidden), table.new_empty(batch, hidden)
    h = table.new_zeros(batch, hidden)
    c = table.new_zeros(batch, hidden) if kind == "lstm" else None
    for t, n in enumerate(batch_sizes):
        h_prev, rows, gate = h[:n], tokens[t, :n], pre[:, :n]
        for k in range(gates):
            torch.index_select(tables[k], 0, rows, out=gate[k])
            if t and not (kind == "gru" and k == 2):
                gate[k].addmm_(h_prev, weights_t[k])
        if kind == "rnn":
            torch.sigmoid(gate[0], out=h_prev).mul_(2).sub_(1)
        elif kind == "gru":
            reset, update, cand = gate[0].sigmoid_(), gate[1].sigmoid_(), gate[2]
            gh_cand = torch.addmm(candidate_bias, h_prev, weights_t[2], out=scratch[:n]) if t else candidate_bias
            cand.addcmul_(reset, gh_cand).sigmoid_().mul_(2).sub_(1)
            torch.addcmul(cand, update, torch.sub(h_prev, cand, out=scratch[:n]), out=h_prev)
        else:
            i, f, cell_in, o = gate.sigmoid_()
            cell_in.mul_(2).sub_(1)
            c[:n].mul_(f).addcmul_(i, cell_in)
            torch.mul(o, torch.tanh(c[:n], out=scratch[:n]), out=h_prev)
    return h


class CellLoop(torch.autograd.Function):
    """Final hidden state of a batch sorted longest first. gi: [T, B, G*H] time-major input projections
    (bias_hh folded in for rnn/lstm, whose bias_hh argument is then None); lengths: [B];
    batch_sizes[t]: how many names are still running at step t."""

    @staticmethod
    def forward(ctx: Any, gi: torch.Tensor, weight_hh: torch.Tensor, bias_hh: torch.Tensor | None, kind: str,
                lengths: torch.Tensor, batch_sizes: list[int], record: Any) -> torch.Tensor:
        hs, acts, extra = _forward(kind, gi, weight_hh, bias_hh, batch_sizes)
        ctx.save_for_backward(hs, acts, weight_hh, *([] if extra is None else [extra]))
        ctx.kind, ctx.batch_sizes, ctx.record = kind, batch_sizes, record
        # Each name's final state was written at its own last step.
        return hs[lengths, torch.arange(gi.shape[1], device=hs.device)]

    @staticmethod
    def backward(ctx: Any, grad_h: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        hs, acts, weight_hh, *rest = ctx.saved_tensors
        grad_gi, grad_gh = _backward(ctx.kind, grad_h, hs, acts, rest[0] if rest else None, weight_hh,
                                     ctx.batch_sizes)
        steps, batch, gates = grad_gh.shape
        # Every use's gradient at once: one product over all (step, name) rows; step 0 multiplies h = 0.
        grad_w = grad_gh[1:].reshape(-1, gates).t() @ hs[1:-1].reshape(-1, hs.shape[-1])
        grad_bias = grad_gh.sum((0, 1)) if ctx.needs_input_grad[2] else None
        if ctx.record is not None:  # hand the per-step pieces to the gradient-accumulation logger
            ctx.record.hiddens = hs[:-1].transpose(0, 1)
            ctx.record.grad_gh = grad_gh.transpose(0, 1)
        return grad_gi, grad_w, grad_bias, None, None, None, None
