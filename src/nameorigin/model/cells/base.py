"""What a recurrent cell is, stated once per cell: the interface every module of `nameorigin.model.cells` fills in.

A cell is its equations written four ways, each tested against torch's own class for it (`torch_reference`):
- `step`: the reference, one timestep on whole tensors; the autograd loop, the explanations and the exported
  scan run it;
- `bptt_forward` / `bptt_backward`: one step of the hand-written backward through time (`model.impl=bptt`,
  nameorigin.model.bptt), writing into buffers the cell lays out itself (`bptt_buffers`);
- `inference_step`: one step of the in-place inference loop (`bptt.final_state`), after the loop has gathered each
  gate's table row and added the recurrent product of the gates in `summed_gates`.

Gate blocks follow torch's parameter layout ([G*H, ...] rows, gate k at rows k*H..(k+1)*H), so weights copy to and
from `torch_reference`. A gate in `summed_gates` sees gi + gh; when every gate does (`folds_bias`), bias_hh joins
the input projection and the gradients of gi and gh are one tensor. Gates in `tanh_gates` are computed by the
inference loop as 2 sigmoid(2x) - 1 (torch's CPU tanh costs more than its sigmoid, docs/speed.md), so their
table, weights and bias arrive doubled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn

Tensor = torch.Tensor


class CellSpec:
    """One recurrent cell. Subclasses set the class attributes and write the steps."""

    gates: ClassVar[int]  # gate blocks of H rows each
    summed_gates: ClassVar[tuple[int, ...]]  # the gates whose pre-activation is gi + gh
    tanh_gates: ClassVar[tuple[int, ...]] = ()  # the gates the inference loop computes as 2 sigmoid(2x) - 1
    carries_memory: ClassVar[bool] = False  # a second state c besides h (the LSTM's)
    torch_reference: ClassVar[Callable[..., nn.RNNBase]]  # torch's class, for parity tests and the fused benchmark
    triton: ClassVar[bool] = False  # model.impl=triton has kernels for it (triton_kernels)

    @property
    def folds_bias(self) -> bool:
        """Every gate sees gi + gh: the two biases are one, and so are the gradients of gi and gh."""
        return len(self.summed_gates) == self.gates

    def step(self, gi: Tensor, gh: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
        """One timestep from the input projection `gi` and the recurrent projection `gh` (biases included).
        The state is always (h, c); cells without memory pass c through."""
        raise NotImplementedError

    def bptt_buffers(self, gi: Tensor, hs: Tensor) -> tuple[Tensor, Tensor | None]:
        """acts: [T, B, G*H] gate activations kept for the backward; extra: whatever else the backward reads."""
        return gi.new_empty(gi.shape), None

    def bptt_forward(self, t: int, n: int, gi: Tensor, w_t: Tensor, bias_hh: Tensor | None, hs: Tensor,
                     acts: Tensor, extra: Tensor | None) -> None:
        """Step t for the first n rows (the names still running): reads hs[t, :n] and gi ([n, G*H]), writes
        hs[t + 1, :n], acts[t, :n] and extra. w_t is W_hh^T; bias_hh is None when it is folded into gi. At t = 0
        the state is zero, so the recurrent product is skipped."""
        raise NotImplementedError

    def bptt_backward(self, t: int, n: int, dh: Tensor, dc: Tensor | None, hs: Tensor, acts: Tensor,
                      extra: Tensor | None, weight_hh: Tensor, dgi: Tensor, dgh: Tensor) -> None:
        """Step t backwards for the first n rows: from dh = dL/dh_t ([n, H], and dc = dL/dc_t for a cell with
        memory) writes dgi = dL/d(gi_t) and dgh = dL/d(gh_t) ([n, G*H]; one tensor when `folds_bias`), then
        overwrites dh (and dc) with the gradient w.r.t. the previous state, except at t = 0, whose state is zero."""
        raise NotImplementedError

    def inference_step(self, t: int, gate: Tensor, h: Tensor, c: Tensor | None, scratch: Tensor,
                       weights_t: Tensor, bias_hh: Tensor) -> None:
        """Step t in place for the running rows: gate [G, n, H] holds each gate's table row plus, for the gates in
        `summed_gates` (after step 0), its recurrent product; h and c ([n, H]) are overwritten with the new state.
        weights_t [G, H, H] and bias_hh [G, H] are per gate, tanh gates doubled, for the gates outside
        `summed_gates`. scratch: an [n, H] buffer."""
        raise NotImplementedError

    def triton_kernels(self) -> Any:
        """The Triton loop's kernels for this cell (nameorigin.model.triton_loop), for cells with `triton`."""
        raise NotImplementedError


def recurrent_product(h: Tensor, weight_t: Tensor, bias: Tensor | None, out: Tensor) -> Tensor:
    """out = bias + h W^T (or out += h W^T when `bias` is None), for one gate of the inference loop. With weights in
    a lower precision than the state (Predictor precision="bf16"), the product is taken in theirs and added to the
    float32 state's gate: the state itself is never rounded."""
    if weight_t.dtype == h.dtype:
        return out.addmm_(h, weight_t) if bias is None else torch.addmm(bias, h, weight_t, out=out)
    product = torch.mm(h.to(weight_t.dtype), weight_t)
    return out.add_(product) if bias is None else torch.add(bias, product, out=out)


def one_minus_square(a: Tensor) -> Tensor:
    """tanh' from tanh's output: 1 - a^2."""
    return torch.addcmul(a.new_ones(()), a, a, value=-1)
