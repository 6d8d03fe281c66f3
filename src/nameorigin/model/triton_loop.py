"""model.impl=triton: a cell's time loop inside one Triton kernel, forward and backward (the GRU's and the LSTM's).

bptt.py launches a handful of kernels per character; here each program owns a block of names and walks every
step itself, so a batch is two launches (forward, backward) plus the one product that gives the recurrent
weight's gradient, sum_t dgh_t^T h_{t-1}, as in bptt.py. Each step's recurrent product is tiled: a [rows, BN]
block of one gate's output at a time, accumulated over BK-wide slices of the previous state, which the program
reads back from the state buffer it wrote (hence the barrier between steps). The backward does the same with
W_hh against the gate gradients.

Rows need no sorting: a name that has ended keeps its state (forward) and passes its gradient through untouched
(backward), so each name's final state is the last step's, and the loop's shapes never depend on the lengths.
tanh is written 2 sigmoid(2x) - 1 (Triton's interpreter has no libdevice). On the CPU it runs under
TRITON_INTERPRET=1, where the tests compare it with the reference cell; `tl.dot` is asked for IEEE float32
there and TF32 on the GPU.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

ROWS = 16  # names per program: tl.dot's smallest tile


@triton.jit
def _tanh(x):
    return 2 * tl.sigmoid(2 * x) - 1


@triton.jit
def _program_rows(lengths, batch, ROWS: tl.constexpr):
    """This program's names: their rows, which of them exist (the last program's block may run past the batch),
    and their lengths."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    live = rows < batch
    return rows, live, tl.load(lengths + rows, mask=live, other=0)


@triton.jit
def _gate_product(h_prev, w_t, live, column, GH: tl.constexpr, ROWS: tl.constexpr, H: tl.constexpr,
                  BN: tl.constexpr, BK: tl.constexpr, PRECISION: tl.constexpr):
    """One [ROWS, BN] tile of h_{t-1} W_hh^T: the columns from `column` on of w_t ([H, GH]), over BK-wide slices
    of the previous state (h_prev: this program's rows of it)."""
    cols, ks = tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((ROWS, BN), dtype=tl.float32)
    for k0 in range(0, H, BK):
        h_k = tl.load(h_prev + (k0 + ks)[None, :], mask=live[:, None], other=0.0)
        acc += tl.dot(h_k, tl.load(w_t + (k0 + ks)[:, None] * GH + column + cols[None, :]), input_precision=PRECISION)
    return acc


@triton.jit
def _state_gradient(grad_gh, w_hh, rows, live, n0, GH: tl.constexpr, ROWS: tl.constexpr, H: tl.constexpr,
                    BN: tl.constexpr, BK: tl.constexpr, PRECISION: tl.constexpr):
    """One [ROWS, BN] tile of dgh_t W_hh (grad_gh: this step's [B, GH] gate gradients), what reaches h_{t-1}
    through the gates."""
    cols, ks = tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((ROWS, BN), dtype=tl.float32)
    for k0 in range(0, GH, BK):
        g = tl.load(grad_gh + rows[:, None] * GH + (k0 + ks)[None, :], mask=live[:, None], other=0.0)
        acc += tl.dot(g, tl.load(w_hh + (k0 + ks)[:, None] * H + (n0 + cols)[None, :]), input_precision=PRECISION)
    return acc


@triton.jit
def _gru_forward(gi, w_t, b_hh, lengths, hs, acts, ghn, steps, batch, ROWS: tl.constexpr,
                 H: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PRECISION: tl.constexpr):
    """hs[t + 1] from hs[t] for the program's ROWS names, every step. gi: [T, B, 3H]; w_t: W_hh^T, [H, 3H];
    acts: r, z, n per step [T, B, 3H]; ghn: the candidate's recurrent term h W_n^T + b_n, [T, B, H]."""
    rows, live, length = _program_rows(lengths, batch, ROWS)
    cols = tl.arange(0, BN)
    for t in range(steps):
        h_prev = hs + t * batch * H + rows[:, None] * H
        for n0 in range(0, H, BN):
            acc_r = _gate_product(h_prev, w_t, live, n0, 3 * H, ROWS, H, BN, BK, PRECISION)
            acc_z = _gate_product(h_prev, w_t, live, H + n0, 3 * H, ROWS, H, BN, BK, PRECISION)
            acc_n = _gate_product(h_prev, w_t, live, 2 * H + n0, 3 * H, ROWS, H, BN, BK, PRECISION)
            gate = t * batch * 3 * H + rows[:, None] * (3 * H) + (n0 + cols)[None, :]
            r = tl.sigmoid(tl.load(gi + gate, mask=live[:, None], other=0.0) + acc_r
                           + tl.load(b_hh + n0 + cols)[None, :])
            z = tl.sigmoid(tl.load(gi + gate + H, mask=live[:, None], other=0.0) + acc_z
                           + tl.load(b_hh + H + n0 + cols)[None, :])
            gh_n = acc_n + tl.load(b_hh + 2 * H + n0 + cols)[None, :]
            n = _tanh(tl.load(gi + gate + 2 * H, mask=live[:, None], other=0.0) + r * gh_n)
            h_old = tl.load(h_prev + (n0 + cols)[None, :], mask=live[:, None], other=0.0)
            h_new = tl.where((t < length)[:, None], n + z * (h_old - n), h_old)  # ended names keep their state
            tl.store(hs + (t + 1) * batch * H + rows[:, None] * H + (n0 + cols)[None, :], h_new, mask=live[:, None])
            tl.store(acts + gate, r, mask=live[:, None])
            tl.store(acts + gate + H, z, mask=live[:, None])
            tl.store(acts + gate + 2 * H, n, mask=live[:, None])
            tl.store(ghn + t * batch * H + rows[:, None] * H + (n0 + cols)[None, :], gh_n, mask=live[:, None])
        tl.debug_barrier()  # the next step reads every column of the state this one wrote


@triton.jit
def _gru_backward(dh, hs, acts, ghn, w_hh, lengths, grad_gi, grad_gh, steps, batch, ROWS: tl.constexpr,
                  H: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PRECISION: tl.constexpr):
    """From dL/dh_T (dh, [B, H], overwritten step by step with dL/dh_t): each step's gate gradients, then
    dL/dh_{t-1} = dgh_t W_hh + dL/dh_t * z_t, where the name was running, and dL/dh_t where it had ended."""
    rows, live, length = _program_rows(lengths, batch, ROWS)
    cols = tl.arange(0, BN)
    for step in range(steps):
        t = steps - 1 - step
        running = (t < length)[:, None]
        for n0 in range(0, H, BN):
            state = rows[:, None] * H + (n0 + cols)[None, :]
            gate = t * batch * 3 * H + rows[:, None] * (3 * H) + (n0 + cols)[None, :]
            d = tl.load(dh + state, mask=live[:, None], other=0.0)
            r = tl.load(acts + gate, mask=live[:, None], other=0.0)
            z = tl.load(acts + gate + H, mask=live[:, None], other=0.0)
            n = tl.load(acts + gate + 2 * H, mask=live[:, None], other=0.0)
            h_prev = tl.load(hs + t * batch * H + state, mask=live[:, None], other=0.0)
            gh_n = tl.load(ghn + t * batch * H + state, mask=live[:, None], other=0.0)
            d_n = tl.where(running, d * (1 - z) * (1 - n * n), 0.0)
            d_r = d_n * gh_n * r * (1 - r)
            d_z = tl.where(running, d * (h_prev - n) * z * (1 - z), 0.0)
            tl.store(grad_gi + gate, d_r, mask=live[:, None])
            tl.store(grad_gi + gate + H, d_z, mask=live[:, None])
            tl.store(grad_gi + gate + 2 * H, d_n, mask=live[:, None])
            tl.store(grad_gh + gate, d_r, mask=live[:, None])
            tl.store(grad_gh + gate + H, d_z, mask=live[:, None])
            tl.store(grad_gh + gate + 2 * H, d_n * r, mask=live[:, None])
        tl.debug_barrier()  # the product below reads every gate's gradient of this step
        for n0 in range(0, H, BN):
            acc = _state_gradient(grad_gh + t * batch * 3 * H, w_hh, rows, live, n0, 3 * H, ROWS, H, BN, BK, PRECISION)
            state = rows[:, None] * H + (n0 + cols)[None, :]
            d = tl.load(dh + state, mask=live[:, None], other=0.0)
            z = tl.load(acts + t * batch * 3 * H + rows[:, None] * (3 * H) + H + (n0 + cols)[None, :],
                        mask=live[:, None], other=0.0)
            tl.store(dh + state, tl.where(running, acc + d * z, d), mask=live[:, None])
        tl.debug_barrier()


@triton.jit
def _lstm_forward(gi, w_t, b_hh, lengths, hs, cs, acts, steps, batch, ROWS: tl.constexpr,
                  H: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PRECISION: tl.constexpr):
    """The LSTM's steps, as _gru_forward's: gates i, f, g, o in acts [T, B, 4H]; cs: c_t, [T + 1, B, H]."""
    rows, live, length = _program_rows(lengths, batch, ROWS)
    cols = tl.arange(0, BN)
    for t in range(steps):
        h_prev = hs + t * batch * H + rows[:, None] * H
        for n0 in range(0, H, BN):
            acc_i = _gate_product(h_prev, w_t, live, n0, 4 * H, ROWS, H, BN, BK, PRECISION)
            acc_f = _gate_product(h_prev, w_t, live, H + n0, 4 * H, ROWS, H, BN, BK, PRECISION)
            acc_g = _gate_product(h_prev, w_t, live, 2 * H + n0, 4 * H, ROWS, H, BN, BK, PRECISION)
            acc_o = _gate_product(h_prev, w_t, live, 3 * H + n0, 4 * H, ROWS, H, BN, BK, PRECISION)
            gate = t * batch * 4 * H + rows[:, None] * (4 * H) + (n0 + cols)[None, :]
            bias = b_hh + n0 + cols
            i = tl.sigmoid(tl.load(gi + gate, mask=live[:, None], other=0.0) + acc_i + tl.load(bias)[None, :])
            f = tl.sigmoid(tl.load(gi + gate + H, mask=live[:, None], other=0.0) + acc_f
                           + tl.load(bias + H)[None, :])
            g = _tanh(tl.load(gi + gate + 2 * H, mask=live[:, None], other=0.0) + acc_g
                      + tl.load(bias + 2 * H)[None, :])
            o = tl.sigmoid(tl.load(gi + gate + 3 * H, mask=live[:, None], other=0.0) + acc_o
                           + tl.load(bias + 3 * H)[None, :])
            state = rows[:, None] * H + (n0 + cols)[None, :]
            c_old = tl.load(cs + t * batch * H + state, mask=live[:, None], other=0.0)
            h_old = tl.load(h_prev + (n0 + cols)[None, :], mask=live[:, None], other=0.0)
            c_new = f * c_old + i * g
            running = (t < length)[:, None]  # ended names keep their state
            tl.store(cs + (t + 1) * batch * H + state, tl.where(running, c_new, c_old), mask=live[:, None])
            tl.store(hs + (t + 1) * batch * H + state, tl.where(running, o * _tanh(c_new), h_old),
                     mask=live[:, None])
            tl.store(acts + gate, i, mask=live[:, None])
            tl.store(acts + gate + H, f, mask=live[:, None])
            tl.store(acts + gate + 2 * H, g, mask=live[:, None])
            tl.store(acts + gate + 3 * H, o, mask=live[:, None])
        tl.debug_barrier()


@triton.jit
def _lstm_backward(dh, dc, cs, acts, w_hh, lengths, grad_pre, steps, batch, ROWS: tl.constexpr,
                   H: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PRECISION: tl.constexpr):
    """From dL/dh_T (dh) and dL/dc_T = 0 (dc): each step's pre-activation gradient (the same for gi and gh,
    [T, B, 4H]), then dL/dh_{t-1} = dpre_t W_hh and dL/dc_{t-1} = dL/dc_t * f_t where the name was running."""
    rows, live, length = _program_rows(lengths, batch, ROWS)
    cols = tl.arange(0, BN)
    for step in range(steps):
        t = steps - 1 - step
        running = (t < length)[:, None]
        for n0 in range(0, H, BN):
            state = rows[:, None] * H + (n0 + cols)[None, :]
            gate = t * batch * 4 * H + rows[:, None] * (4 * H) + (n0 + cols)[None, :]
            d = tl.load(dh + state, mask=live[:, None], other=0.0)
            d_c = tl.load(dc + state, mask=live[:, None], other=0.0)
            i = tl.load(acts + gate, mask=live[:, None], other=0.0)
            f = tl.load(acts + gate + H, mask=live[:, None], other=0.0)
            g = tl.load(acts + gate + 2 * H, mask=live[:, None], other=0.0)
            o = tl.load(acts + gate + 3 * H, mask=live[:, None], other=0.0)
            c_prev = tl.load(cs + t * batch * H + state, mask=live[:, None], other=0.0)
            tanh_c = _tanh(tl.load(cs + (t + 1) * batch * H + state, mask=live[:, None], other=0.0))
            d_c_all = d_c + d * o * (1 - tanh_c * tanh_c)
            tl.store(grad_pre + gate, tl.where(running, d_c_all * g * i * (1 - i), 0.0), mask=live[:, None])
            tl.store(grad_pre + gate + H, tl.where(running, d_c_all * c_prev * f * (1 - f), 0.0),
                     mask=live[:, None])
            tl.store(grad_pre + gate + 2 * H, tl.where(running, d_c_all * i * (1 - g * g), 0.0), mask=live[:, None])
            tl.store(grad_pre + gate + 3 * H, tl.where(running, d * tanh_c * o * (1 - o), 0.0), mask=live[:, None])
            tl.store(dc + state, tl.where(running, d_c_all * f, d_c), mask=live[:, None])
        tl.debug_barrier()  # the product below reads every gate's gradient of this step
        for n0 in range(0, H, BN):
            acc = _state_gradient(grad_pre + t * batch * 4 * H, w_hh, rows, live, n0, 4 * H, ROWS, H, BN, BK, PRECISION)
            state = rows[:, None] * H + (n0 + cols)[None, :]
            d = tl.load(dh + state, mask=live[:, None], other=0.0)
            tl.store(dh + state, tl.where(running, acc, d), mask=live[:, None])
        tl.debug_barrier()


def _tiles(hidden: int) -> dict[str, Any]:
    tile = min(64, hidden)
    precision = "ieee" if os.environ.get("TRITON_INTERPRET") == "1" else "tf32"
    return {"ROWS": ROWS, "H": hidden, "BN": tile, "BK": tile, "PRECISION": precision}


@dataclass(frozen=True)
class Kernels:
    """One cell's launches (its module in nameorigin.model.cells names them in `triton_kernels`).
    forward(grid, tiles, gi, w_t, bias_hh, lengths, hs, acts, steps, batch) fills hs and acts and returns what
    else its backward reads; backward(grid, tiles, dh, hs, acts, extra, w_hh, lengths, steps, batch) returns
    dL/d(gi) and dL/d(gh), [T, B, G*H] each."""

    forward: Callable[..., torch.Tensor]
    backward: Callable[..., tuple[torch.Tensor, torch.Tensor]]


def _launch_gru_forward(grid, tiles, gi, w_t, bias, lengths, hs, acts, steps, batch) -> torch.Tensor:
    ghn = gi.new_empty(steps, batch, hs.shape[-1])  # the candidate's recurrent term per step
    _gru_forward[grid](gi, w_t, bias, lengths, hs, acts, ghn, steps, batch, **tiles)
    return ghn


def _launch_gru_backward(grid, tiles, dh, hs, acts, ghn, w_hh, lengths, steps, batch) -> tuple[torch.Tensor, ...]:
    grad_gi, grad_gh = torch.empty_like(acts), torch.empty_like(acts)
    _gru_backward[grid](dh, hs, acts, ghn, w_hh, lengths, grad_gi, grad_gh, steps, batch, **tiles)
    return grad_gi, grad_gh


def _launch_lstm_forward(grid, tiles, gi, w_t, bias, lengths, hs, acts, steps, batch) -> torch.Tensor:
    cs = gi.new_empty(steps + 1, batch, hs.shape[-1])  # the cell state c_t, c_{-1} = 0
    cs[0] = 0
    _lstm_forward[grid](gi, w_t, bias, lengths, hs, cs, acts, steps, batch, **tiles)
    return cs


def _launch_lstm_backward(grid, tiles, dh, hs, acts, cs, w_hh, lengths, steps, batch) -> tuple[torch.Tensor, ...]:
    grad_pre = torch.empty_like(acts)  # the LSTM's gates see gi + gh: one gradient for both
    _lstm_backward[grid](dh, torch.zeros_like(dh), cs, acts, w_hh, lengths, grad_pre, steps, batch, **tiles)
    return grad_pre, grad_pre


GRU = Kernels(_launch_gru_forward, _launch_gru_backward)
LSTM = Kernels(_launch_lstm_forward, _launch_lstm_backward)


class TritonLoop(torch.autograd.Function):
    """Final hidden state of a batch (any row order). gi: [T, B, G*H] time-major input projections (bias_ih in);
    weight_hh: [G*H, H]; bias_hh: [G*H]; lengths: [B] on gi's device; cell: a CellSpec with `triton`."""

    @staticmethod
    def forward(ctx: Any, gi: torch.Tensor, weight_hh: torch.Tensor, bias_hh: torch.Tensor, lengths: torch.Tensor,
                cell: Any, record: Any) -> torch.Tensor:
        steps, batch, gates = gi.shape
        hidden = weight_hh.shape[1]
        gi = gi.float().contiguous()
        hs = gi.new_empty(steps + 1, batch, hidden)
        hs[0] = 0
        acts = gi.new_empty(steps, batch, gates)
        lengths = lengths.to(device=gi.device, dtype=torch.int32).contiguous()
        kernels = cell.triton_kernels()
        extra = kernels.forward((triton.cdiv(batch, ROWS),), _tiles(hidden), gi, weight_hh.t().contiguous(),
                                bias_hh.contiguous(), lengths, hs, acts, steps, batch)
        ctx.save_for_backward(hs, acts, extra, weight_hh, lengths)
        ctx.kernels, ctx.record = kernels, record
        return hs[steps]

    @staticmethod
    def backward(ctx: Any, grad_h: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        hs, acts, extra, weight_hh, lengths = ctx.saved_tensors
        steps, batch, gates = acts.shape
        dh = grad_h.float().contiguous().clone()
        grad_gi, grad_gh = ctx.kernels.backward((triton.cdiv(batch, ROWS),), _tiles(weight_hh.shape[1]), dh, hs, acts,
                                                extra, weight_hh.contiguous(), lengths, steps, batch)
        # Every use's gradient at once, as in bptt.py: one product over all (step, name) rows.
        grad_w = grad_gh.reshape(-1, gates).t() @ hs[:-1].reshape(-1, hs.shape[-1])
        if ctx.record is not None:  # the per-step pieces for the gradient-accumulation logger
            ctx.record.hiddens = hs[:-1].transpose(0, 1)
            ctx.record.grad_gh = grad_gh.transpose(0, 1)
        return grad_gi, grad_w, grad_gh.sum((0, 1)), None, None, None
