"""Capturing one forward pass's per-timestep tensors, so the cell's weight gradients can be split into one
contribution per use (timestep) and checked against autograd's `.grad` (nameorigin.fit.callbacks)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class StepCapture:
    """Per-timestep tensors from one forward pass; the gradients are filled in by hooks during backward."""

    lengths: torch.Tensor
    inputs: torch.Tensor | None = None  # [B, T, E]: x_t, what weight_ih multiplies at step t
    # h_{t-1}, what weight_hh multiplies at step t: a list per step (autograd) or [B, T, H] (bptt)
    hiddens: list[torch.Tensor] | torch.Tensor = field(default_factory=list)
    grad_gi: torch.Tensor | None = None  # dL/d(x_t W_ih^T + b_ih), [B, T, G*H]
    # dL/d(h_{t-1} W_hh^T + b_hh): t -> [B, G*H] filled by hooks (autograd), or [B, T, G*H] (bptt)
    grad_gh: dict[int, torch.Tensor] | torch.Tensor = field(default_factory=dict)

    def by_distance(self, values: torch.Tensor) -> torch.Tensor:
        """Reorder [B, T, ...] so index d is each name's d-th character from its end; padding becomes zero."""
        batch, steps = values.shape[:2]
        distance = torch.arange(steps, device=values.device)
        position = self.lengths.to(values.device)[:, None] - 1 - distance[None, :]
        valid = (position >= 0).to(values.dtype)
        index = position.clamp(min=0).view(batch, steps, *([1] * (values.dim() - 2))).expand_as(values)
        return values.gather(1, index) * valid.view(batch, steps, *([1] * (values.dim() - 2)))

    def contributions(self) -> dict[str, torch.Tensor]:
        """Each shared weight's gradient split by use: name -> [distance from last char, *weight.shape]."""
        if self.grad_gi is None or len(self.grad_gh) != len(self.hiddens):
            raise RuntimeError("contributions() needs a backward pass through the captured forward")
        grad_gh, hiddens = self.grad_gh, self.hiddens
        if isinstance(grad_gh, dict):
            grad_gh = torch.stack([grad_gh[t] for t in range(len(hiddens))], dim=1)
            hiddens = torch.stack(hiddens, dim=1)
        grad_gi, grad_gh = self.by_distance(self.grad_gi), self.by_distance(grad_gh)
        inputs, hiddens = self.by_distance(self.inputs), self.by_distance(hiddens)
        return {
            "weight_ih": torch.einsum("bdg,bde->dge", grad_gi, inputs),
            "weight_hh": torch.einsum("bdg,bdh->dgh", grad_gh, hiddens),
            "bias_ih": grad_gi.sum(0),
            "bias_hh": grad_gh.sum(0),
        }

    def watch_input_projection(self, gi: torch.Tensor, time_major: bool = False) -> None:
        """Keep dL/d(gi) when backward reaches the input projection of every timestep."""
        transpose = (lambda g: g.transpose(0, 1)) if time_major else (lambda g: g)
        gi.register_hook(lambda grad: setattr(self, "grad_gi", transpose(grad.detach())))

    def watch_step(self, t: int, h: torch.Tensor, gh: torch.Tensor) -> None:
        """Keep h_{t-1} and, during backward, dL/d(gh_t) of step t (the autograd loop)."""
        self.hiddens.append(h.detach())
        gh.register_hook(lambda grad: self.grad_gh.__setitem__(t, grad.detach()))
