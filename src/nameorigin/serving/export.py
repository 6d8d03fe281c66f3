"""Export a checkpoint's model in current formats: a `torch.export` program (.pt2) and ONNX (.onnx), each with
a JSON sidecar (vocabulary, labels, normalization, calibration, split settings, model card), so serving needs
neither Lightning nor this package's training code.

The timestep loop is written as a `scan` (torch's higher-order op for loops), so both formats keep the batch
size and the number of characters dynamic instead of unrolling the loop for one name length.
"""

from __future__ import annotations

import io
import json
import logging
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch._higher_order_ops.scan import scan

from nameorigin.base.atomic import write_atomically, write_bytes_synced
from nameorigin.base.textnorm import MAX_NAME_LENGTH  # the longest name the Predictor passes
from nameorigin.model.artifacts import EXPORT_FORMAT
from nameorigin.model.charrnn import CharRNN
from nameorigin.model.ensemble import Ensemble

# torch 2.13's exporter builds pytree LeafSpecs it has itself deprecated: nothing a user can act on.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning)
FORMATS = ("pt2", "onnx")


class ExportableCharRNN(nn.Module):
    """CharRNN's eval-mode forward: (tokens [B, T] int64, lengths [B] int64) -> decision logits [B, labels]
    (logit adjustment and temperature included), with each cell's own `step` inside a scan: for two directions
    the second on the names reversed, for several layers each on the states of the one below."""

    def __init__(self, net: CharRNN):
        super().__init__()
        net = net.eval()
        self.table_names = {}  # cell -> the buffer holding its first-layer input projections
        with torch.no_grad():  # each character's input projection for the first layer, as the inference loop uses it
            for name in net.layer_names[0]:
                cell = getattr(net, name)
                self.register_buffer(f"table_{name}", net.projection_table(cell, cell.bias_ih).detach().clone())
                self.table_names[cell] = f"table_{name}"
        self.net = net  # its layers, readout (heads, n-grams, known names) and decision layer are used as they are

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        h = self.net.run_layers(self.scan_loop, tokens, lengths)
        return self.net.decide(self.net.readout(h, tokens, lengths))

    def scan_loop(self, net: CharRNN, cell: nn.Module, inputs: torch.Tensor, lengths: torch.Tensor, record: None,
                  one_length: bool = False, every_step: bool = False) -> torch.Tensor:
        """A loop of nameorigin.model.loops' shape for CharRNN.run_layers: the final state [B, H] of the cell over
        its inputs (tokens, or the states below), or every step's [B, T, H]."""
        gi = F.linear(inputs, cell.weight_ih, cell.bias_ih) if inputs.is_floating_point() \
            else F.embedding(inputs, getattr(self, self.table_names[cell]))
        steps = torch.arange(gi.shape[1], device=gi.device)[:, None].expand(-1, gi.shape[0])

        def step(carry: tuple[torch.Tensor, torch.Tensor], xs: tuple[torch.Tensor, torch.Tensor]) -> tuple:
            (h, c), (gi, t) = carry, xs
            h_new, c_new = cell.step(gi, F.linear(h, cell.weight_hh, cell.bias_hh), h, c)
            running = (t < lengths)[:, None]  # finished names keep their last state
            h, c = torch.where(running, h_new, h), torch.where(running, c_new, c)
            # scan needs a per-step output: the state itself for a layer below the top, else a sliver, unused
            return (h, c), h.clone() if every_step else h[:, :1].clone()

        zeros = gi.new_zeros(gi.shape[0], cell.hidden_size)
        (h, _), per_step = scan(step, (zeros, zeros.clone()), (gi.transpose(0, 1), steps))
        return per_step.transpose(0, 1) if every_step else h


class ExportableEnsemble(nn.Module):
    """Ensemble's eval-mode forward: each member as ExportableCharRNN (its decision layer neutral: raw logits), their
    mean, then the ensemble's decision layer."""

    def __init__(self, net: Ensemble):
        super().__init__()
        self.members = nn.ModuleList(ExportableCharRNN(member) for member in net.eval().members)
        # The decision layer's buffers alone: the members must not be reachable twice in the module tree.
        self.register_buffer("logit_offset", net.logit_offset.detach().clone())
        self.register_buffer("temperature", net.temperature.detach().clone())

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        logits = torch.stack([member(tokens, lengths) for member in self.members]).mean(0)
        return (logits + self.logit_offset) / self.temperature


def exportable(net: CharRNN | Ensemble) -> nn.Module:
    return ExportableEnsemble(net) if isinstance(net, Ensemble) else ExportableCharRNN(net)


def example_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([[2, 3, 4], [5, 6, 0]]), torch.tensor([3, 2])


def dynamic_shapes() -> tuple[dict, dict]:
    batch, steps = torch.export.Dim("batch", max=1 << 20), torch.export.Dim("steps", max=MAX_NAME_LENGTH)
    return {0: batch, 1: steps}, {0: batch}


def sidecar_path(model_path: str | Path) -> Path:
    return Path(model_path).with_suffix(".json")


def onnx_limitation(net: CharRNN) -> str | None:
    """Why this model cannot be ONNX, or None: ONNX has no searchsorted for the known-name lookup."""
    if net.transfer is not None and net.transfer.known is not None:
        return "the known-name lookup (searchsorted) has no ONNX operator: export it with --formats pt2"
    return None


def export_model(predictor: Any, stem: str | Path, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """Write `stem`.pt2 and/or `stem`.onnx, and `stem`.json beside them. Every program is built before the
    first file is written, so a failed export leaves no file behind. Returns the paths written."""
    stem = Path(stem)
    if "onnx" in formats and (reason := onnx_limitation(predictor.net)):
        raise ValueError(f"cannot write ONNX for this model: {reason}")
    module = exportable(predictor.net.cpu()).eval()
    program = torch.export.export(module, example_inputs(), dynamic_shapes=dynamic_shapes())
    writers = {}
    if "pt2" in formats:
        saved = io.BytesIO()  # in memory first: torch's zip writer aborts the process on a failed write
        torch.export.save(program, saved)
        writers[stem.with_suffix(".pt2")] = write_bytes_synced(saved.getbuffer())
    if "onnx" in formats:
        import onnxscript  # noqa: F401  (the exporter needs it: fail here with its name, before any file)

        logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)  # torchvision ops
        onnx_program = torch.onnx.export(program, example_inputs(), dynamo=True, input_names=["tokens", "lengths"],
                                         output_names=["logits"], verbose=False)
        writers[stem.with_suffix(".onnx")] = lambda p: onnx_program.save(str(p), external_data=False)
    # The split settings let `nameorigin evaluate` score the exported program on its own held-out names.
    meta = {"format": EXPORT_FORMAT, **predictor.meta.plain()}
    writers[sidecar_path(stem.with_suffix(".pt2"))] = lambda p: p.write_text(json.dumps(meta, ensure_ascii=False))
    for path, write in writers.items():
        write_atomically(path, write)
    return list(writers)


class ExportedNet:
    """An exported program behind the interface Predictor uses: called with (tokens, lengths), returns logits."""

    def __init__(self, path: Path):
        if path.suffix == ".onnx":
            import onnxruntime  # optional: the [export] extra

            self.session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            self.module = None
        else:
            self.module, self.session = torch.export.load(str(path)).module(), None

    def __call__(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        if self.session is None:
            return self.module(tokens.cpu(), lengths.cpu())
        (logits,) = self.session.run(None, {"tokens": tokens.cpu().numpy(), "lengths": lengths.cpu().numpy()})
        return torch.from_numpy(logits)

    def eval(self) -> ExportedNet:
        return self

    def to(self, device: Any) -> ExportedNet:
        return self
