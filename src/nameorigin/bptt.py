"""A hand-written backward through time for the cell loop (`model.impl=bptt`).

Autograd records ~15 graph nodes per timestep; here the forward keeps each step's gate activations in
preallocated buffers, and the backward walks the steps in reverse computing only what flows to the previous
hidden state. Each step's gradient w.r.t. the recurrent pre-activation is kept, so the recurrent weight's
gradient is ONE matrix product at the end: sum_t dgh_t^T h_{t-1}, the same sum autograd would build use by use.

Rows are sorted by length (longest first) so step t touches only the `batch_sizes[t]` names still running,
as packed sequences do. The plain autograd loop in model.py stays the reference this is tested against.
"""

from __future__ import annotations

from typing import Any

import torch


def _forward(kind: str, gi: torch.Tensor, weight_hh: torch.Tensor, bias_hh: torch.Tensor,
             batch_sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """hs[t] = h_{t-1} of the rows active at step t; acts = gate activations; extra = per-cell state kept for
    the backward (GRU: the recurrent candidate term; LSTM: c_t and tanh(c_t)). Finished rows are not touched."""
    steps, batch, gates = gi.shape
    hidden = weight_hh.shape[1]
    hs = gi.new_zeros(steps + 1, batch, hidden)
    acts = gi.new_empty(steps, batch, gates)
    extra = {"rnn": None, "gru": gi.new_empty(steps, batch, hidden),
             "lstm": gi.new_zeros(steps + 1, batch, 2 * hidden)}[kind]
    w_t = weight_hh.t()
    if kind != "gru":  # gates = gi + gh: fold the recurrent bias in once, then one addmm per step
        gi = gi + bias_hh
    for t, n in enumerate(batch_sizes):
        h_prev, act = hs[t, :n], acts[t, :n]
        g = gi[t, :n]
        if kind != "gru":
            pre = torch.addmm(g, h_prev, w_t)
        else:
            gh = torch.addmm(bias_hh, h_prev, w_t)
        if kind == "rnn":
            torch.tanh(pre, out=act)
            hs[t + 1, :n] = act
        elif kind == "gru":
            torch.sigmoid(g[:, : 2 * hidden] + gh[:, : 2 * hidden], out=act[:, : 2 * hidden])
            r, z = act[:, :hidden], act[:, hidden : 2 * hidden]
            torch.tanh(torch.addcmul(g[:, 2 * hidden :], r, gh[:, 2 * hidden :]), out=act[:, 2 * hidden :])
            cand = act[:, 2 * hidden :]
            hs[t + 1, :n] = torch.addcmul(cand, z, h_prev - cand)
            extra[t, :n] = gh[:, 2 * hidden :]
        else:
            torch.sigmoid(pre, out=act)  # gates i, f, g, o; the cell input g gets tanh instead
            torch.tanh(pre[:, 2 * hidden : 3 * hidden], out=act[:, 2 * hidden : 3 * hidden])
            i, f, cell_in, o = act.chunk(4, dim=1)
            c_new = torch.addcmul(f * extra[t, :n, :hidden], i, cell_in)
            extra[t + 1, :n, :hidden] = c_new
            tanh_c = extra[t + 1, :n, hidden:]
            torch.tanh(c_new, out=tanh_c)
            hs[t + 1, :n] = o * tanh_c
    return hs, acts, extra


def _backward(kind: str, grad_h: torch.Tensor, hs: torch.Tensor, acts: torch.Tensor, extra: torch.Tensor | None,
              weight_hh: torch.Tensor, batch_sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns dL/d(gi) and dL/d(gh) for every step, [T, B, G*H] each (zero where a name had ended)."""
    steps, batch, gates = acts.shape
    hidden = weight_hh.shape[1]
    grad_gi = acts.new_zeros(steps, batch, gates)
    grad_gh = grad_gi if kind != "gru" else acts.new_zeros(steps, batch, gates)
    dh = torch.zeros_like(grad_h)
    dc = torch.zeros_like(grad_h) if kind == "lstm" else None
    for t in range(steps - 1, -1, -1):
        n = batch_sizes[t]
        ending = batch_sizes[t + 1] if t + 1 < steps else 0
        dh[ending:n] = grad_h[ending:n]  # rows sorted longest first: these names end at step t
        d, a, dgi = dh[:n], acts[t, :n], grad_gi[t, :n]
        if kind == "rnn":
            torch.mul(d, 1 - a * a, out=dgi)
            dh[:n] = dgi @ weight_hh
        elif kind == "gru":
            r, z, cand = a[:, :hidden], a[:, hidden : 2 * hidden], a[:, 2 * hidden :]
            d_cand_pre = d * (1 - z) * (1 - cand * cand)
            dgi[:, :hidden] = d_cand_pre * extra[t, :n] * r * (1 - r)
            dgi[:, hidden : 2 * hidden] = d * (hs[t, :n] - cand) * z * (1 - z)
            dgi[:, 2 * hidden :] = d_cand_pre
            dgh = grad_gh[t, :n]
            dgh[:, : 2 * hidden] = dgi[:, : 2 * hidden]
            torch.mul(d_cand_pre, r, out=dgh[:, 2 * hidden :])
            dh[:n] = torch.addmm(d * z, dgh, weight_hh)
        else:
            i, f, cell_in, o = a.chunk(4, dim=1)
            tanh_c = extra[t + 1, :n, hidden:]
            dcn = torch.addcmul(dc[:n], d * o, 1 - tanh_c * tanh_c)
            # Upstream gradient of each gate's activation, written in place, then times each activation's slope.
            torch.mul(dcn, cell_in, out=dgi[:, :hidden])
            torch.mul(dcn, extra[t, :n, :hidden], out=dgi[:, hidden : 2 * hidden])
            torch.mul(dcn, i, out=dgi[:, 2 * hidden : 3 * hidden])
            torch.mul(d, tanh_c, out=dgi[:, 3 * hidden :])
            slope = a * (1 - a)
            torch.mul(cell_in, cell_in, out=slope[:, 2 * hidden : 3 * hidden]).neg_().add_(1)
            dgi.mul_(slope)
            dc[:n] = dcn * f
            dh[:n] = dgi @ weight_hh
    return grad_gi, grad_gh


@torch.no_grad()
def final_state(kind: str, gi: torch.Tensor, weight_hh: torch.Tensor, bias_hh: torch.Tensor,
                batch_sizes: list[int]) -> torch.Tensor:
    """Inference only: the same recurrence with nothing kept for a backward, updating the state in place.
    Rows are sorted longest first, so rows past batch_sizes[t] have finished and already hold their final h."""
    steps, batch, _ = gi.shape
    hidden = weight_hh.shape[1]
    h = gi.new_zeros(batch, hidden)
    c = gi.new_zeros(batch, hidden) if kind == "lstm" else None
    w_t = weight_hh.t()
    if kind != "gru":
        gi = gi + bias_hh
    for t, n in enumerate(batch_sizes):
        h_prev, g = h[:n], gi[t, :n]
        if kind == "rnn":
            h[:n] = torch.tanh(torch.addmm(g, h_prev, w_t))
        elif kind == "gru":
            gh = torch.addmm(bias_hh, h_prev, w_t)
            rz = torch.sigmoid(g[:, : 2 * hidden] + gh[:, : 2 * hidden])
            cand = torch.tanh(torch.addcmul(g[:, 2 * hidden :], rz[:, :hidden], gh[:, 2 * hidden :]))
            h[:n] = torch.addcmul(cand, rz[:, hidden:], h_prev - cand)
        else:
            pre = torch.addmm(g, h_prev, w_t)
            i, f, _, o = torch.sigmoid(pre).chunk(4, dim=1)
            cell_in = torch.tanh(pre[:, 2 * hidden : 3 * hidden])
            c[:n] = torch.addcmul(f * c[:n], i, cell_in)
            h[:n] = o * torch.tanh(c[:n])
    return h


class CellLoop(torch.autograd.Function):
    """Final hidden state of a batch sorted longest first. gi: [T, B, G*H] time-major input projections;
    lengths: [B]; batch_sizes[t]: how many names are still running at step t."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)  # buffers and backward stay float32
    def forward(ctx: Any, gi: torch.Tensor, weight_hh: torch.Tensor, bias_hh: torch.Tensor, kind: str,
                lengths: torch.Tensor, batch_sizes: list[int], record: Any) -> torch.Tensor:
        hs, acts, extra = _forward(kind, gi, weight_hh, bias_hh, batch_sizes)
        ctx.save_for_backward(hs, acts, weight_hh, *([] if extra is None else [extra]))
        ctx.kind, ctx.batch_sizes, ctx.record = kind, batch_sizes, record
        # Each name's final state was written at its own last step.
        return hs[lengths, torch.arange(gi.shape[1], device=hs.device)]

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx: Any, grad_h: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        hs, acts, weight_hh, *rest = ctx.saved_tensors
        grad_gi, grad_gh = _backward(ctx.kind, grad_h, hs, acts, rest[0] if rest else None, weight_hh,
                                     ctx.batch_sizes)
        steps, batch, gates = grad_gh.shape
        # Every use's gradient at once: one product over all (step, name) rows.
        grad_w = grad_gh.reshape(steps * batch, gates).t() @ hs[:-1].reshape(steps * batch, -1)
        if ctx.record is not None:  # hand the per-step pieces to the gradient-accumulation logger
            ctx.record.hiddens = hs[:-1].transpose(0, 1)
            ctx.record.grad_gh = grad_gh.transpose(0, 1)
        return grad_gi, grad_w, grad_gh.sum((0, 1)), None, None, None, None
