"""The Elman cell with ReLU (`model.cell=rnn_relu`): h_t = max(0, gi_t + gh_t), torch's
`nn.RNN(nonlinearity="relu")`. The Elman loop of rnn.py with another activation: no tanh to double."""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from nameorigin.model.cells.base import Tensor
from nameorigin.model.cells.rnn import Elman


class ElmanReLU(Elman):
    tanh_gates = ()
    torch_reference = partial(nn.RNN, nonlinearity="relu")

    def activation(self, pre: Tensor, out: Tensor | None = None) -> Tensor:
        return torch.relu(pre) if out is None else torch.clamp_min(pre, 0.0, out=out)

    def slope(self, a: Tensor) -> Tensor:
        return a > 0  # torch's ReLU has slope 0 at 0 too

    def inference_step(self, t: int, gate: Tensor, h: Tensor, c: None, scratch: Tensor, weights_t: Tensor,
                       bias_hh: Tensor) -> None:
        torch.clamp_min(gate[0], 0.0, out=h)


CELL = ElmanReLU()
