"""Predictor: answers from a checkpoint alone (vocab, labels, model args are inside), loaded weights-only.

Imports only torch and the model, so a one-name prediction starts fast; no Lightning, no Hydra.
"""

from __future__ import annotations

import itertools
import json
import pickle
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from nameorigin.model import CharRNN
from nameorigin.textnorm import UNK, normalize_name

MAX_NAME_LENGTH = 64  # longer input is cut: the corpus' longest name has 20 characters
MODEL_ARGS = ("cell", "hidden_size", "embedding_dim")
BATCH_SIZE = 1024  # names per forward pass: the fastest of 512/1024/2048 here (GRU 256, 2 CPU threads)


class PredictError(ValueError):
    """A problem with the checkpoint or the request; scripts turn it into one line and exit code 2."""


@dataclass(slots=True)
class Prediction:
    name: str
    predictions: list[tuple[str, float]] = field(default_factory=list)  # (language, probability), best first
    error: str | None = None

    def as_dict(self) -> dict:
        result = {"name": self.name,
                  "predictions": [{"language": lang, "probability": round(p, 6)} for lang, p in self.predictions]}
        if self.error:
            result["error"] = self.error
        return result


def load_checkpoint(path: str | Path) -> dict:
    """torch.load with weights_only=True: a checkpoint whose pickle would run code is refused, never executed."""
    path = Path(path)
    if not path.is_file():
        raise PredictError(f"checkpoint {path} does not exist: pass the path of a .ckpt file")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        reason = str(error).splitlines()[0] if str(error) else "unsafe content"
        raise PredictError(f"checkpoint {path} was refused by weights-only loading ({reason[:160]}): "
                           "it may run code; load only checkpoints you trained") from None
    except Exception as error:  # weights-only unpickling never runs code; anything else means a broken file
        raise PredictError(f"checkpoint {path} is not a readable torch checkpoint "
                           f"({type(error).__name__}): it may be truncated; use another .ckpt") from None
    hparams = checkpoint.get("hyper_parameters") if isinstance(checkpoint, dict) else None
    if not isinstance(hparams, dict) or not {"vocab", "labels", *MODEL_ARGS} <= hparams.keys():
        raise PredictError(f"checkpoint {path} is not a nameorigin checkpoint (no vocab/labels/model args): "
                           "pass one written by train.py")
    return checkpoint


class Predictor:
    """Batched top-k language prediction for names."""

    def __init__(self, net: CharRNN, vocab: Sequence[str], labels: Sequence[str], normalize: str = "ascii",
                 device: str = "cpu", data_settings: dict | None = None):
        self.net, self.vocab, self.labels, self.normalize = net.eval(), list(vocab), list(labels), normalize
        self.data_settings = data_settings or {}  # split settings + corpus hash, for evaluate()
        self.char_to_index = {c: i for i, c in enumerate(self.vocab)}
        self.device = torch.device(resolve_device(device))
        self.net.to(self.device)

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str = "cpu") -> Predictor:
        checkpoint = load_checkpoint(path)
        hp = checkpoint["hyper_parameters"]
        net = CharRNN(len(hp["vocab"]), len(hp["labels"]), **{k: hp[k] for k in MODEL_ARGS})
        prefix = "net."
        state = {k[len(prefix):]: v for k, v in checkpoint.get("state_dict", {}).items() if k.startswith(prefix)}
        try:
            net.load_state_dict(state)
        except RuntimeError:
            raise PredictError(f"checkpoint {path} does not match its own model settings: it is damaged or "
                               "from another version; retrain or pick another .ckpt") from None
        return cls(net, hp["vocab"], hp["labels"], hp.get("normalize", "ascii"), device,
                   checkpoint.get("NamesDataModule"))

    @classmethod
    def from_exported(cls, path: str | Path, device: str = "cpu") -> Predictor:
        """A TorchScript file written by scripts/export.py, with its .json sidecar beside it."""
        path, sidecar = Path(path), Path(path).with_suffix(".json")
        if not path.is_file() or not sidecar.is_file():
            raise PredictError(f"exported model {path} or its sidecar {sidecar.name} is missing: run scripts/export.py")
        try:
            meta = json.loads(sidecar.read_text())
            net = torch.jit.load(str(path), map_location="cpu")
        except (ValueError, RuntimeError) as error:
            raise PredictError(f"exported model {path} could not be read ({type(error).__name__}): "
                               "export it again") from None
        return cls(net, meta["vocab"], meta["labels"], meta.get("normalize", "ascii"), device)

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu") -> Predictor:
        """A training checkpoint (.ckpt) or an exported TorchScript model (.pt with a .json sidecar)."""
        exported = Path(path).suffix == ".pt"
        return cls.from_exported(path, device) if exported else cls.from_checkpoint(path, device)

    def encode(self, name: str) -> tuple[list[int], str | None]:
        """Indices for one raw name, or an explanation of why it cannot be answered."""
        clean = normalize_name(name, self.normalize)[:MAX_NAME_LENGTH]
        if not clean:
            return [], "no usable character after normalization"
        unk, lookup = self.char_to_index[UNK], self.char_to_index.get
        codes = [lookup(c, unk) for c in clean]
        if codes.count(unk) == len(codes):
            return [], "no character the model knows"
        return codes, None

    @torch.inference_mode()
    def probabilities(self, encoded: Sequence[Sequence[int]], batch_size: int = BATCH_SIZE) -> torch.Tensor:
        """Softmax over languages for pre-encoded names, batched by similar length."""
        out = torch.empty(len(encoded), len(self.labels))
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            lengths = torch.tensor([len(encoded[i]) for i in rows])
            tokens = torch.zeros(len(rows), int(lengths.max()), dtype=torch.long)
            # Row-major mask order matches the concatenated names: one tensor copy per batch.
            tokens[torch.arange(tokens.shape[1])[None, :] < lengths[:, None]] = torch.tensor(
                list(itertools.chain.from_iterable(encoded[i] for i in rows)), dtype=torch.long)
            logits = self.net(tokens.to(self.device), lengths.to(self.device))
            out[rows] = logits.float().softmax(-1).cpu()
        return out

    def predict(self, names: Iterable[str], top_k: int = 3, batch_size: int = BATCH_SIZE) -> list[Prediction]:
        if top_k < 1:
            raise PredictError(f"--top-k {top_k} must be at least 1")
        names = list(names)
        encoded = [self.encode(name) for name in names]
        good = [codes for codes, error in encoded if error is None]
        probs = self.probabilities(good, batch_size)
        top = probs.topk(min(top_k, len(self.labels)), dim=-1) if good else None
        rows = iter(zip(top.values.tolist(), top.indices.tolist(), strict=True)) if good else iter(())
        labels, results = self.labels, []
        for name, (_, error) in zip(names, encoded, strict=True):
            if error is not None:
                results.append(Prediction(name, [], error))
                continue
            values, indices = next(rows)
            results.append(Prediction(name, [(labels[j], p) for p, j in zip(values, indices, strict=True)]))
        return results


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise PredictError(f"--device {device}: use cpu, cuda or auto")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise PredictError(f"--device {device} but no CUDA device is available: use --device cpu")
    return device


def newest_checkpoint(outputs: str | Path = "outputs", name: str = "best.ckpt") -> Path:
    found = list(Path(outputs).glob(f"**/checkpoints/{name}"))
    if not found:
        raise PredictError(f"no {name} under {outputs}/: train first or pass a checkpoint path")
    return max(found, key=lambda p: p.stat().st_mtime)
