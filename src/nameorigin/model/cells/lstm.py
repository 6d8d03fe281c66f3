"""The LSTM (`model.cell=lstm`): gates i, f, g, o all see gi + gh, and a memory c beside the state h.

    c' = sigmoid(f) c + sigmoid(i) tanh(g), h' = sigmoid(o) tanh(c')
"""

from __future__ import annotations

import torch
from torch import nn

from nameorigin.model.cells.base import CellSpec, Tensor


class LSTM(CellSpec):
    gates = 4
    summed_gates = (0, 1, 2, 3)
    tanh_gates = (2,)
    carries_memory = True
    torch_reference = nn.LSTM
    triton = True

    def step(self, gi: Tensor, gh: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
        i, f, g, o = (gi + gh).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c

    def bptt_buffers(self, gi: Tensor, hs: Tensor) -> tuple[Tensor, Tensor]:
        steps, batch, hidden = gi.shape[0], gi.shape[1], hs.shape[-1]
        return gi.new_empty(gi.shape), gi.new_empty(steps, batch, 2 * hidden)  # extra: c_t and tanh(c_t)

    def bptt_forward(self, t: int, n: int, gi: Tensor, w_t: Tensor, bias_hh: Tensor | None, hs: Tensor,
                     acts: Tensor, extra: Tensor) -> None:
        hidden, act = hs.shape[-1], acts[t, :n]
        if t:
            torch.addmm(gi, hs[t, :n], w_t, out=act)
        else:
            act.copy_(gi)
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

    def bptt_backward(self, t: int, n: int, dh: Tensor, dc: Tensor, hs: Tensor, acts: Tensor, extra: Tensor,
                      weight_hh: Tensor, dgi: Tensor, dgh: Tensor) -> None:
        hidden, a = hs.shape[-1], acts[t, :n]
        one = a.new_ones(())
        i, f, cell_in, o = a.chunk(4, dim=1)
        tanh_c = extra[t, :n, hidden:]
        dcn = torch.addcmul(one, tanh_c, tanh_c, value=-1).mul_(o)
        dcn = torch.addcmul(dc, dh, dcn)
        # Upstream gradient of each gate's activation, written in place, then times each activation's slope.
        torch.mul(dcn, cell_in, out=dgi[:, :hidden])
        if t:
            torch.mul(dcn, extra[t - 1, :n, :hidden], out=dgi[:, hidden : 2 * hidden])
        else:  # c_{-1} = 0
            dgi[:, hidden : 2 * hidden] = 0
        torch.mul(dcn, i, out=dgi[:, 2 * hidden : 3 * hidden])
        torch.mul(dh, tanh_c, out=dgi[:, 3 * hidden :])
        slope = torch.addcmul(a, a, a, value=-1)  # sigmoid' = a - a^2
        torch.addcmul(one, cell_in, cell_in, value=-1, out=slope[:, 2 * hidden : 3 * hidden])  # tanh' = 1 - a^2
        dgi.mul_(slope)
        if t:
            torch.mul(dcn, f, out=dc)
            torch.mm(dgi, weight_hh, out=dh)

    def inference_step(self, t: int, gate: Tensor, h: Tensor, c: Tensor, scratch: Tensor, weights_t: Tensor,
                       bias_hh: Tensor) -> None:
        i, f, cell_in, o = gate.sigmoid_()
        cell_in.mul_(2).sub_(1)
        c.mul_(f).addcmul_(i, cell_in)
        torch.mul(o, torch.tanh(c, out=scratch), out=h)

    def triton_kernels(self):
        from nameorigin.model import triton_loop  # triton is optional: imported when its loop runs

        return triton_loop.LSTM


CELL = LSTM()
