"""Ensemble: k CharRNNs of one shape, trained from different seeds, served as one network.

Its raw logits are the mean of its members' raw logits (each member's decision layer left neutral), and its own
decision layer (logit adjustment, temperature) follows, as a single CharRNN's does. The mean of logits keeps every
additive part of the members additive: the explanation of the ensemble is the mean of its members' explanations,
and the linear part mixes into each member alike (nameorigin.training.linear_mix).
"""

from __future__ import annotations

import torch
from torch import nn

from nameorigin.base.parts import boundary_index
from nameorigin.config import ModelConfig, NetConfig, TransferShape, from_plain
from nameorigin.model.charrnn import CharRNN, build_net


class Ensemble(nn.Module):
    """Members' mean raw logits -> the decision layer (`logit_offset`, `temperature`, kept as buffers)."""

    def __init__(self, members: list[CharRNN]):
        super().__init__()
        if len(members) < 2:
            raise ValueError("an ensemble has at least two members")
        self.members = nn.ModuleList(members)
        first = members[0]
        self.config, self.vocab_size, self.layer_names = first.config, first.vocab_size, first.layer_names
        self.register_buffer("logit_offset", torch.zeros_like(first.logit_offset))
        self.register_buffer("temperature", torch.ones(()))

    @property
    def transfer(self) -> nn.Module | None:
        """The first member's pretrained parts: every member was built from the same starting point."""
        return self.members[0].transfer

    @property
    def product_dtype(self) -> torch.dtype | None:
        return self.members[0].product_dtype

    @product_dtype.setter
    def product_dtype(self, dtype: torch.dtype | None) -> None:
        for member in self.members:
            member.product_dtype = dtype

    def raw_logits(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The members' mean logits before the decision layer."""
        return torch.stack([member.raw_logits(tokens, lengths) for member in self.members]).mean(0)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        logits = self.raw_logits(tokens, lengths)
        return logits if self.training else self.decide(logits)

    def decide(self, logits: torch.Tensor) -> torch.Tensor:
        return (logits + self.logit_offset) / self.temperature


def named_members(net: nn.Module) -> list[tuple[str, CharRNN]]:
    """The networks inside a served net with the prefix of their weights in its state: an ensemble's members
    ("members.0.", ...), or the net itself ("")."""
    if isinstance(net, Ensemble):
        return [(f"members.{i}.", member) for i, member in enumerate(net.members)]
    return [("", net)]


def build_served_net(config: NetConfig, vocab_size: int, num_classes: int, transfer: TransferShape | None = None,
                     members: int = 1, boundary: int = -1) -> CharRNN | Ensemble:
    """One network, or an ensemble of `members` networks of that shape."""
    if members == 1:
        return build_net(config, vocab_size, num_classes, transfer, boundary)
    return Ensemble([build_net(config, vocab_size, num_classes, transfer, boundary) for _ in range(members)])


def net_from_checkpoint(checkpoint: dict) -> CharRNN | Ensemble:
    """The network a checkpoint describes (an ensemble where it has members), with its weights."""
    hp = checkpoint["hyper_parameters"]
    transfer = from_plain(TransferShape, hp["transfer"]) if hp.get("transfer") else None
    config = from_plain(ModelConfig, hp["config"])
    net = build_served_net(config, len(hp["vocab"]), len(hp["labels"]), transfer, int(hp.get("members") or 1),
                           boundary_index(hp["vocab"], config.name_parts))
    prefix = "net."
    net.load_state_dict({k[len(prefix):]: v for k, v in checkpoint.get("state_dict", {}).items()
                         if k.startswith(prefix)})
    return net
