"""TorchScript export: the checkpoint's model as one file that runs with torch alone (no Lightning, no this
package), plus a JSON sidecar with the vocabulary, labels and normalization."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from nameorigin.model import CharRNN


class ScriptableCharRNN(nn.Module):
    """CharRNN's inference path (the cell's own `step`) in a form torch.jit.script compiles.
    forward(tokens [B, T] int64, lengths [B] int64) -> logits [B, languages]."""

    def __init__(self, net: CharRNN):
        super().__init__()
        table = net.embedding.weight if net.embedding is not None else torch.eye(net.vocab_size)
        self.register_buffer("embedding", table.detach().clone())  # one-hot input = rows of the identity
        self.cell, self.head = net.cell, net.head

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        gi = F.linear(F.embedding(tokens, self.embedding), self.cell.weight_ih, self.cell.bias_ih)
        h = torch.zeros(tokens.size(0), self.cell.hidden_size, dtype=gi.dtype, device=gi.device)
        c = torch.zeros_like(h)
        for t in range(tokens.size(1)):
            h_new, c_new = self.cell.step(gi[:, t], F.linear(h, self.cell.weight_hh, self.cell.bias_hh), h, c)
            keep = (lengths > t).unsqueeze(1)
            h, c = torch.where(keep, h_new, h), torch.where(keep, c_new, c)
        return self.head(h)


def sidecar_path(model_path: str | Path) -> Path:
    return Path(model_path).with_suffix(".json")


def export_torchscript(predictor, out: str | Path) -> Path:
    """Write `out` (TorchScript) and `out` with .json (vocab, labels, normalize), each atomically."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    scripted = torch.jit.script(ScriptableCharRNN(predictor.net.cpu()).eval())
    meta = {"format": "nameorigin-torchscript-1", "vocab": predictor.vocab, "labels": predictor.labels,
            "normalize": predictor.normalize}
    for path, write in ((out, lambda p: scripted.save(str(p))),
                        (sidecar_path(out), lambda p: p.write_text(json.dumps(meta, ensure_ascii=False)))):
        tmp = path.with_name(f".{path.name}.tmp")
        write(tmp)
        os.replace(tmp, path)
    return out
