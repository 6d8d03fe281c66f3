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
             batch_sizes: list[int]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    steps, batch, _ = gi.shape
    hidden = weight_hh.shape[1]
    hs = gi.new_zeros(steps + 1, batch, hidden)  # hs[t] = h_{t-1}; rows that finished carry their last state
    acts = gi.new_zeros(steps, batch, gi.shape[2])  # gate activations per step
    extra = gi.new_zeros(steps + 1 if kind == "lstm" else steps, batch, hidden) if kind != "rnn" else None
    w_t = weight_hh.t()
    for t, n in enumerate(batch_sizes):
        h_prev = hs[t, :n]
        gh = torch.addmm(bias_hh, h_prev, w_t)
        g = gi[t, :n]
        if kind == "rnn":
            h_new = torch.tanh(g + gh)
            acts[t, :n] = h_new
        elif kind == "gru":
            rz = torch.sigmoid(g[:, : 2 * hidden] + gh[:, : 2 * hidden])
            r, z = rz[:, :hidden], rz[:, hidden:]
            cand = torch.tanh(torch.addcmul(g[:, 2 * hidden :], r, gh[:, 2 * hidden :]))
            h_new = torch.addcmul(cand, z, h_prev - cand)
            acts[t, :n, : 2 * hidden] = rz
            acts[t, :n, 2 * hidden :] = cand
            extra[t, :n] = gh[:, 2 * hidden :]  # the recurrent candidate term, which reset gates
        else:
            act = torch.sigmoid(g + gh)  # gates i, f, g, o; the cell input g gets tanh instead
            act[:, 2 * hidden : 3 * hidden] = torch.tanh(g[:, 2 * hidden : 3 * hidden] + gh[:, 2 * hidden : 3 * hidden])
            i, f, cell_in, o = act.chunk(4, dim=1)
            c_new = torch.addcmul(f * extra[t, :n], i, cell_in)
            h_new = o * torch.tanh(c_new)
            acts[t, :n] = act
            extra[t + 1] = extra[t]
            extra[t + 1, :n] = c_new  # extra[t] = c_{t-1}
        hs[t + 1] = hs[t]
        hs[t + 1, :n] = h_new
    return hs, {"acts": acts, "extra": extra}


def _backward(kind: str, grad_h: torch.Tensor, hs: torch.Tensor, acts: torch.Tensor, extra: torch.Tensor | None,
              weight_hh: torch.Tensor, batch_sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns dL/d(gi) and dL/d(gh) for every step, [T, B, G*H] each (zero where a name had ended)."""
    steps, batch, gates = acts.shape
    hidden = weight_hh.shape[1]
    grad_gi = acts.new_zeros(steps, batch, gates)
    grad_gh = grad_gi if kind != "gru" else acts.new_zeros(steps, batch, gates)
    dh = grad_h.clone()
    dc = torch.zeros_like(dh) if kind == "lstm" else None
    for t in range(steps - 1, -1, -1):
        n = batch_sizes[t]
        d = dh[:n]
        a = acts[t, :n]
        if kind == "rnn":
            grad_gi[t, :n] = d * (1 - a * a)
            dh_direct = None
        elif kind == "gru":
            r, z, cand = a[:, :hidden], a[:, hidden : 2 * hidden], a[:, 2 * hidden :]
            d_cand_pre = d * (1 - z) * (1 - cand * cand)
            grad_gi[t, :n, :hidden] = d_cand_pre * extra[t, :n] * r * (1 - r)
            grad_gi[t, :n, hidden : 2 * hidden] = d * (hs[t, :n] - cand) * z * (1 - z)
            grad_gi[t, :n, 2 * hidden :] = d_cand_pre
            grad_gh[t, :n, : 2 * hidden] = grad_gi[t, :n, : 2 * hidden]
            grad_gh[t, :n, 2 * hidden :] = d_cand_pre * r
            dh_direct = d * z
        else:
            i, f, cell_in, o = a.chunk(4, dim=1)
            c_new = extra[t + 1, :n]
            tanh_c = torch.tanh(c_new)
            dcn = dc[:n] + d * o * (1 - tanh_c * tanh_c)
            grad_gi[t, :n] = torch.cat([dcn * cell_in * i * (1 - i), dcn * extra[t, :n] * f * (1 - f),
                                        dcn * i * (1 - cell_in * cell_in), d * tanh_c * o * (1 - o)], dim=1)
            dc[:n] = dcn * f
            dh_direct = None
        dh_prev = grad_gh[t, :n] @ weight_hh
        dh[:n] = dh_prev if dh_direct is None else dh_prev + dh_direct
    return grad_gi, grad_gh


class CellLoop(torch.autograd.Function):
    """Final hidden state of a length-sorted batch. gi: [T, B, G*H] time-major input projections."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)  # buffers and backward stay float32
    def forward(ctx: Any, gi: torch.Tensor, weight_hh: torch.Tensor, bias_hh: torch.Tensor, kind: str,
                batch_sizes: list[int], record: Any) -> torch.Tensor:
        hs, saved = _forward(kind, gi, weight_hh, bias_hh, batch_sizes)
        ctx.save_for_backward(hs, saved["acts"], weight_hh, *([saved["extra"]] if saved["extra"] is not None else []))
        ctx.kind, ctx.batch_sizes, ctx.record = kind, batch_sizes, record
        return hs[-1]

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
        return grad_gi, grad_w, grad_gh.sum((0, 1)), None, None, None
