"""The GRU (`model.cell=gru`, the default), in torch's form: the reset gate scales the candidate's recurrent term
(bias included), so the candidate does not see gi + gh and the recurrent bias cannot be folded into gi.

    r = sigmoid(i_r + h_r), z = sigmoid(i_z + h_z), n = tanh(i_n + r * h_n), h' = n + z (h - n)
"""

from __future__ import annotations

import torch
from torch import nn

from nameorigin.model.cells.base import CellSpec, Tensor, one_minus_square, recurrent_product


class GRU(CellSpec):
    gates = 3
    summed_gates = (0, 1)
    tanh_gates = (2,)
    torch_reference = nn.GRU
    triton = True

    def step(self, gi: Tensor, gh: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
        i_r, i_z, i_n = gi.chunk(3, dim=1)
        h_r, h_z, h_n = gh.chunk(3, dim=1)
        reset, update = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
        candidate = torch.tanh(i_n + reset * h_n)
        return candidate + update * (h - candidate), c

    def bptt_buffers(self, gi: Tensor, hs: Tensor) -> tuple[Tensor, Tensor]:
        return gi.new_empty(gi.shape), gi.new_empty(hs.shape[0] - 1, *hs.shape[1:])  # extra: h_n of each step

    def bptt_forward(self, t: int, n: int, gi: Tensor, w_t: Tensor, bias_hh: Tensor | None, hs: Tensor,
                     acts: Tensor, extra: Tensor) -> None:
        hidden, h_prev, act = hs.shape[-1], hs[t, :n], acts[t, :n]
        gh = torch.addmm(bias_hh, h_prev, w_t) if t else bias_hh.expand(n, -1)
        torch.sigmoid(gi[:, : 2 * hidden] + gh[:, : 2 * hidden], out=act[:, : 2 * hidden])
        r, z = act[:, :hidden], act[:, hidden : 2 * hidden]
        torch.tanh(torch.addcmul(gi[:, 2 * hidden :], r, gh[:, 2 * hidden :]), out=act[:, 2 * hidden :])
        cand = act[:, 2 * hidden :]
        torch.addcmul(cand, z, h_prev - cand, out=hs[t + 1, :n])
        extra[t, :n] = gh[:, 2 * hidden :]

    def bptt_backward(self, t: int, n: int, dh: Tensor, dc: None, hs: Tensor, acts: Tensor, extra: Tensor,
                      weight_hh: Tensor, dgi: Tensor, dgh: Tensor) -> None:
        hidden, a = hs.shape[-1], acts[t, :n]
        r, z, cand = a[:, :hidden], a[:, hidden : 2 * hidden], a[:, 2 * hidden :]
        d_cand_pre = dh * (1 - z) * one_minus_square(cand)
        torch.mul(d_cand_pre * extra[t, :n], torch.addcmul(r, r, r, value=-1), out=dgi[:, :hidden])
        torch.mul(dh * (hs[t, :n] - cand), torch.addcmul(z, z, z, value=-1), out=dgi[:, hidden : 2 * hidden])
        dgi[:, 2 * hidden :] = d_cand_pre
        dgh[:, : 2 * hidden] = dgi[:, : 2 * hidden]
        torch.mul(d_cand_pre, r, out=dgh[:, 2 * hidden :])
        if t:
            torch.addmm(dh * z, dgh, weight_hh, out=dh)

    def inference_step(self, t: int, gate: Tensor, h: Tensor, c: None, scratch: Tensor, weights_t: Tensor,
                       bias_hh: Tensor) -> None:
        reset, update, cand = gate[0].sigmoid_(), gate[1].sigmoid_(), gate[2]
        gh_cand = recurrent_product(h, weights_t[2], bias_hh[2], scratch) if t else bias_hh[2]
        cand.addcmul_(reset, gh_cand).sigmoid_().mul_(2).sub_(1)
        torch.addcmul(cand, update, torch.sub(h, cand, out=scratch), out=h)

    def triton_kernels(self):
        from nameorigin.model import triton_loop  # triton is optional: imported when its loop runs

        return triton_loop.GRU


CELL = GRU()
