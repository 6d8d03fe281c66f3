"""A network's logits over a whole split, in the split's own order: what the steps after `fit` compare on
validation (the linear part's mix, the ensemble's size) and test (the margin)."""

from __future__ import annotations

from typing import Any

import torch


@torch.no_grad()
def logits_in_order(net: Any, dataset: Any, decided: bool = True, batch_size: int = 1024,
                    recurrent_only: bool = False) -> torch.Tensor:
    """The network's logits (decided, or before the decision layer) for every row of a split, in its own order;
    recurrent_only: its recurrent part's alone (CharRNN.readout)."""
    net.eval()
    device, parts = next(net.parameters()).device, []
    for start in range(0, len(dataset), batch_size):
        _, tokens, lengths = dataset.rows(list(range(start, min(start + batch_size, len(dataset)))))
        tokens, lengths = tokens.to(device), lengths.to(device)
        logits = net.raw_logits(tokens, lengths, recurrent_only) if recurrent_only else net.raw_logits(tokens, lengths)
        parts.append((net.decide(logits) if decided else logits).float().cpu())
    return torch.cat(parts)


def has_pairs(datamodule: Any) -> bool:
    """A corpus of (name, label) pairs (a folder or a table); the surnames pretraining is scored otherwise."""
    test = getattr(datamodule, "splits", {}).get("test")
    return bool(test) and isinstance(test[0], tuple)
