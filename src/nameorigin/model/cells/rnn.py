"""The Elman cell with tanh (`model.cell=rnn`): h_t = tanh(gi_t + gh_t), the PyTorch tutorial's cell."""

from __future__ import annotations

import torch
from torch import nn

from nameorigin.model.cells.base import CellSpec, Tensor, one_minus_square


class Elman(CellSpec):
    gates = 1
    summed_gates = (0,)
    tanh_gates = (0,)
    torch_reference = nn.RNN

    def activation(self, pre: Tensor, out: Tensor | None = None) -> Tensor:
        return torch.tanh(pre, out=out)

    def slope(self, a: Tensor) -> Tensor:
        """The activation's derivative, from its output."""
        return one_minus_square(a)

    def step(self, gi: Tensor, gh: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
        return self.activation(gi + gh), c

    def bptt_buffers(self, gi: Tensor, hs: Tensor) -> tuple[Tensor, None]:
        return hs[1:], None  # the one gate's activation is the state itself

    def bptt_forward(self, t: int, n: int, gi: Tensor, w_t: Tensor, bias_hh: Tensor | None, hs: Tensor,
                     acts: Tensor, extra: None) -> None:
        self.activation(torch.addmm(gi, hs[t, :n], w_t) if t else gi, acts[t, :n])

    def bptt_backward(self, t: int, n: int, dh: Tensor, dc: None, hs: Tensor, acts: Tensor, extra: None,
                      weight_hh: Tensor, dgi: Tensor, dgh: Tensor) -> None:
        torch.mul(dh, self.slope(acts[t, :n]), out=dgi)
        if t:
            torch.mm(dgi, weight_hh, out=dh)

    def inference_step(self, t: int, gate: Tensor, h: Tensor, c: None, scratch: Tensor, weights_t: Tensor,
                       bias_hh: Tensor) -> None:
        torch.sigmoid(gate[0], out=h).mul_(2).sub_(1)  # tanh(x) = 2 sigmoid(2x) - 1, the doubling done


CELL = Elman()
