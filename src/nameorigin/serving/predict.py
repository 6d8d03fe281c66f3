"""Predictor: answers from a checkpoint alone (vocab, labels, model args are inside), loaded weights-only.

Imports only torch and the model, so a one-name prediction starts fast; no Lightning, no Hydra.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nameorigin.base.checkpoint_io import load_checkpoint
from nameorigin.base.errors import UserError
from nameorigin.base.extras import missing_extra
from nameorigin.base.parts import glue_parts, join_parts, parts_of
from nameorigin.base.textnorm import MAX_NAME_LENGTH, UNK, encode_names, normalize_name
from nameorigin.model.artifacts import Calibration, ServingMeta
from nameorigin.model.calibration import level_key, prediction_sets
from nameorigin.model.charrnn import CharRNN, batch_tokens
from nameorigin.model.ensemble import Ensemble, net_from_checkpoint
from nameorigin.model.explain import NameExplanation, explain_names
from nameorigin.model.novelty import CharTrigrams
from nameorigin.serving.abstain import UNUSABLE, Verdicts, abstentions
from nameorigin.serving.answers import Answers, Prediction, scattered
from nameorigin.serving.export import ExportedNet
from nameorigin.serving.options import BATCH_SIZE, PRECISIONS, PredictOptions, options_of
from nameorigin.serving.prior import check_estimable, estimate_prior, reweight
from nameorigin.serving.runs import newest_checkpoint
from nameorigin.serving.schema import OutputOptions

NO_USABLE_CHARACTER, NO_KNOWN_CHARACTER = "no usable character after normalization", "no character the model knows"
TOO_LONG = f"longer than {MAX_NAME_LENGTH} characters: not one name"
EXPORTED_SUFFIXES = (".pt2", ".onnx")

class Predictor:
    """Batched top-k language prediction for names, with calibrated probabilities and prediction sets when the
    checkpoint holds them (`calibrated=False` gives the probabilities before temperature scaling)."""

    def __init__(self, net: CharRNN | ExportedNet, meta: ServingMeta, device: str = "cpu"):
        self.net, self.meta = net.eval(), meta
        self.vocab, self.labels, self.normalize, self.label_name = meta.vocab, meta.labels, meta.normalize, \
            meta.label_name
        self.data_settings, self.model_card = meta.data_settings, meta.model_card  # for evaluation and exports
        self.calibration = meta.calibration or Calibration()  # the temperature is already inside the network
        # a country model's ISO code -> country name (the checkpoint's label_names, in label order)
        self.label_titles = dict(zip(self.labels, meta.label_names, strict=True)) if meta.label_names else None
        # The model divides by the fitted temperature; multiplying by it again undoes the scaling on request.
        self.undo_temperature = 1.0 if meta.calibrated else float(self.calibration.temperature)
        self.char_to_index = {c: i for i, c in enumerate(self.vocab)}
        # A model of parts reads each name as its parts (nameorigin.base.parts); None: one string.
        self.part_names = list(meta.name_parts["names"]) if meta.name_parts else None
        self.glues_parts = bool(meta.name_parts) and meta.name_parts.get("join") == "space"
        self.training_shares = torch.tensor(meta.training_shares, dtype=torch.float) if meta.training_shares else \
            torch.full((len(self.labels),), 1 / len(self.labels))
        # The label mix the served probabilities carry, which --prior divides out (nameorigin.serving.prior): their
        # mean on best.ckpt's held-out validation names where calibration measured it, else the training shares.
        # The mean is what EM needs: on names drawn in the training mix it then returns the training mix.
        measured = self.calibration.label_prior if meta.calibrated else None
        self.trained_prior = torch.tensor(measured, dtype=torch.float) if measured else self.training_shares
        self.abstention = self.calibration.abstention  # the rule fitted on held-out names, or None
        self.novelty = CharTrigrams.from_state(self.abstention.novelty) if self.abstention else None
        self.device = torch.device(resolve_device(device))
        self.net.to(self.device)

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str = "cpu", calibrated: bool = True) -> Predictor:
        checkpoint = load_checkpoint(path)
        try:
            net = net_from_checkpoint(checkpoint)
        except (RuntimeError, TypeError):
            raise UserError(f"checkpoint {path} does not match its own model settings: it is damaged or "
                            "from another version; retrain or pick another .ckpt") from None
        return cls(net, replace(ServingMeta.from_checkpoint(checkpoint), calibrated=calibrated), device)

    @classmethod
    def from_exported(cls, path: str | Path, calibrated: bool = True) -> Predictor:
        """A .pt2 (torch.export) or .onnx program written by nameorigin export, with its .json sidecar."""
        path = Path(path)
        meta = replace(ServingMeta.from_plain(read_sidecar(path)), calibrated=calibrated)
        try:
            net = ExportedNet(path)
        except ImportError as error:
            raise missing_extra(f"reading {path.name}", "export", error) from None
        except Exception as error:  # a damaged or foreign file, whatever the runtime raises for it
            raise UserError(f"exported model {path} could not be read ({type(error).__name__}): "
                               "export it again") from None
        return cls(net, meta)

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu", calibrated: bool = True) -> Predictor:
        """A training checkpoint (.ckpt) or an exported program (.pt2 or .onnx, with a .json sidecar); "latest":
        the newest run's model under outputs/ (newest_checkpoint), as the commands read it."""
        if str(path) == "latest":
            path = newest_checkpoint()
        if Path(path).suffix in EXPORTED_SUFFIXES:
            return cls.from_exported(path, calibrated)
        return cls.from_checkpoint(path, device, calibrated)

    def threshold_for(self, coverage: float) -> float | list[float]:
        """The conformal threshold stored for this coverage level (one per label for class-conditional sets,
        calibration.sets=mondrian); a clear error for any other level."""
        if self.undo_temperature != 1.0:
            raise UserError("coverage sets are fitted on the calibrated probabilities: load the model calibrated "
                            "(drop --uncalibrated)")
        levels = self.calibration.conformal
        if not levels:
            raise UserError(f"coverage {coverage:g}: this model stores no prediction-set levels (it was trained "
                            "with calibration.enabled=false); drop coverage")
        if level_key(coverage) not in levels:
            raise UserError(f"coverage {coverage:g} is not a level stored in this model: choose one of "
                            f"{', '.join(levels)}")
        return self.calibration.threshold(level_key(coverage))

    def encode(self, name: str, full_names: bool = False) -> tuple[list[int], str | None]:
        """Indices for one raw name, or an explanation of why it cannot be answered."""
        tokens, lengths, errors = self.encode_many([name], full_names)
        return tokens[0, : int(lengths[0])].tolist() if errors[0] is None else [], errors[0]

    def as_text(self, name: str | Sequence[str], full_names: bool = False) -> str:
        """One name as the model reads it: a string as it is for a model of one string; for a model of parts, its
        parts (a list, a string holding the boundary, or with `full_names` a full name nameorigin.base.parts.parts_of
        splits) normalized and joined. A list for a model of one string, or the wrong number of parts, is refused."""
        parts = parts_of(name, self.part_names, full_names)
        if parts is None:
            return name
        joined = join_parts([normalize_name(part, self.normalize) for part in parts])
        return glue_parts(joined) if self.glues_parts else joined

    def encode_many(self, names: Sequence[str | Sequence[str]],
                    full_names: bool = False) -> tuple[torch.Tensor, torch.Tensor, list[str | None]]:
        """encode() for many names at once: right-padded indices [N, longest] (uint8 when the vocabulary fits),
        lengths, and why each name cannot be answered (None where it can). The indices come from one numpy pass
        (encode_names) instead of a Python list per name: on a GPU the host's work per name sets the rate."""
        return self.encode_texts([self.as_text(name, full_names) for name in names])

    def encode_texts(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor, list[str | None]]:
        """encode_many() of names already as the model reads them (as_text's strings)."""
        clean = [normalize_name(text, self.normalize) for text in texts]
        errors = [None if 0 < len(c) <= MAX_NAME_LENGTH else NO_USABLE_CHARACTER if not c else TOO_LONG
                  for c in clean]
        tokens, lengths = encode_names([c if e is None else "" for c, e in zip(clean, errors, strict=True)],
                                       self.char_to_index)
        all_unknown = ((tokens == self.char_to_index[UNK]).sum(1) == lengths) & (lengths > 0)
        for row in all_unknown.nonzero().flatten().tolist():
            errors[row] = NO_KNOWN_CHARACTER
        return tokens, lengths, errors

    @torch.inference_mode()
    def probabilities(self, encoded: Sequence[Sequence[int]] | tuple[torch.Tensor, torch.Tensor],
                      batch_size: int = BATCH_SIZE, energy: torch.Tensor | None = None,
                      precision: str = "float32") -> torch.Tensor:
        """Softmax over languages for pre-encoded names (lists of indices, or encode_many's padded tokens and
        lengths), batched by similar length; with `energy` (a tensor, one per name), also the logsumexp of each
        name's decided logits, written into it. `precision` (PredictOptions.precision): bf16 takes the recurrent
        products in bfloat16."""
        tokens, lengths = encoded if isinstance(encoded, tuple) else batch_tokens(encoded, torch.device("cpu"))
        out = torch.empty(len(lengths), len(self.labels))
        order = torch.argsort(lengths, stable=True)
        with self.products_in(precision):
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                width = int(lengths[rows[-1]])  # sorted: the batch's longest is its last
                logits = self.net(tokens[rows, :width].to(self.device, torch.long),
                                  lengths[rows].to(self.device)).float()
                out[rows] = (logits * self.undo_temperature).softmax(-1).cpu()
                if energy is not None:
                    energy[rows] = logits.logsumexp(-1).cpu()
        return out

    @contextmanager
    def products_in(self, precision: str) -> Iterator[None]:
        """The recurrent products in `precision` (PredictOptions.precision) for the forward passes inside."""
        if precision == "float32":
            yield
            return
        self.net.product_dtype = PRECISIONS[precision]
        try:
            yield
        finally:
            self.net.product_dtype = None

    @property
    def explains(self) -> bool:
        """Whether it can say why (explain): it reads the model's own layers, which an exported program hides."""
        return isinstance(self.net, CharRNN | Ensemble)

    @property
    def runs_own_loop(self) -> bool:
        """Whether its forward is the in-place inference loop (nameorigin.model.bptt.final_state), which alone can
        take its products in another precision: a one-layer .ckpt, not an exported program."""
        return isinstance(self.net, CharRNN | Ensemble) and len(self.net.layer_names) == 1

    def output_options(self, options: PredictOptions) -> OutputOptions:
        """The shape of the answers to `options`: what decides the columns and fields of every output."""
        return OutputOptions(options.top_k, options.coverage, options.explain, self.label_name, self.normalize)

    def predict(self, names: Iterable[str | Sequence[str]], options: PredictOptions | None = None,
                **settings: Any) -> list[Prediction]:
        """Top-k labels per name and, with `coverage`, the conformal prediction set at that level; with `explain`,
        why the top one (nameorigin.model.explain). With `abstain` (and a checkpoint that holds the rule), a name
        out of the model's depth comes back abstained with its reason, its scores still given
        (nameorigin.serving.abstain). `prior`: the target population's label shares, "uniform" or "estimate"
        (nameorigin.serving.prior). `options` (a PredictOptions), or its fields as keywords."""
        return self.answer(names, options, **settings).predictions(self.label_titles, self.label_name)

    def answer(self, names: Iterable[str | Sequence[str]], options: PredictOptions | None = None,
               **settings: Any) -> Answers:
        """predict()'s answers as columns (nameorigin.serving.answers): no Python object per name."""
        options = options_of(options, settings).for_model(self)  # bound options pass as they are
        threshold = options.threshold
        names = [self.as_text(name, options.full_names) for name in names]  # parts joined: what the answers show
        tokens, lengths, error_list = self.encode_texts(names)
        errors = np.array([*error_list, None], dtype=object)[:-1]
        answered = np.flatnonzero(np.equal(errors, None))
        rows = torch.from_numpy(answered)
        good, any_good = (tokens[rows], lengths[rows]), len(answered) > 0
        abstain = options.abstain and any_good and bool(self.abstention)
        energy = torch.empty(len(answered)) if abstain else None
        probs = self.probabilities(good, options.batch_size, energy, options.precision)
        prior = estimated = None
        if options.prior is not None and (any_good or options.estimates_prior):
            prior = options.prior
            if options.estimates_prior:  # from these very names
                check_estimable(len(probs))
                prior = estimated = estimate_prior(probs, self.trained_prior)
            probs = reweight(probs, self.trained_prior, prior)
        why = None
        if options.explain and any_good:
            codes = [row[:n].tolist() for row, n in zip(good[0], good[1].tolist(), strict=True)]
            why = self.explain_encoded(codes, [normalize_name(names[row], self.normalize) for row in answered.tolist()],
                                       options.batch_size)
            for explanation in why if self.part_names else ():
                explanation.name_part_names = self.part_names
        if options.labels:
            probs = self.restricted(probs, options.labels)
        top = probs.topk(min(options.top_k, len(options.labels or self.labels)), dim=-1)
        top_index = np.full((len(names), options.top_k), -1, dtype=np.int64)
        top_probability = np.full((len(names), options.top_k), np.nan)
        top_index[answered, : top.indices.shape[1]] = top.indices.numpy()
        top_probability[answered, : top.indices.shape[1]] = top.values.double().numpy()
        sets, set_sizes = (self._sets(probs, threshold) if threshold is not None and any_good else (None, None))
        verdicts = abstentions(self, good, energy, set_sizes, options.max_set_size, options.batch_size) if abstain \
            else Verdicts.none(len(answered))
        reason_code, reason = scattered(len(names), answered, verdicts.codes), scattered(len(names), answered,
                                                                                        verdicts.reasons)
        unusable = np.flatnonzero(np.not_equal(errors, None))
        reason_code[unusable], reason[unusable] = UNUSABLE, errors[unusable]
        return Answers(names, self.labels, errors, top_index, top_probability, reason_code, reason,
                       scattered(len(names), answered, sets), scattered(len(names), answered, why), estimated)

    def restricted(self, probs: torch.Tensor, labels: Sequence[str]) -> torch.Tensor:
        """The probabilities over `labels` alone, renormalized: p(y | x, y in labels)."""
        keep = torch.zeros(len(self.labels), dtype=torch.bool)
        keep[[self.labels.index(label) for label in labels]] = True
        kept = probs * keep
        return kept / kept.sum(-1, keepdim=True).clamp_min(1e-30)

    def estimate_prior(self, names: Iterable[str], batch_size: int = BATCH_SIZE, chunk: int = 65536,
                       counts: Sequence[int] | None = None, full_names: bool = False) -> torch.Tensor:
        """The label mix of a stream of names (EM over all of them at once), for callers that then predict it in
        chunks with this fixed prior, as tables do: an estimate per chunk would give each chunk its own mix.
        `counts`: how many rows each name stands for, when each distinct name is scored once."""
        names, parts, weights = iter(names), [], []
        counted = iter(counts) if counts is not None else itertools.repeat(1)
        while block := list(itertools.islice(names, chunk)):
            tokens, lengths, errors = self.encode_many(block, full_names)
            rows = list(itertools.islice(counted, len(block)))
            usable = torch.tensor([row for row, error in enumerate(errors) if error is None], dtype=torch.long)
            if len(usable):
                parts.append(self.probabilities((tokens[usable], lengths[usable]), batch_size))
                weights.append(torch.tensor(rows, dtype=torch.float64)[usable])
        probs = torch.cat(parts) if parts else torch.empty(0, len(self.labels))
        weight = torch.cat(weights) if weights else torch.empty(0, dtype=torch.float64)
        check_estimable(int(weight.sum()))
        return estimate_prior(probs, self.trained_prior, counts=weight)

    def explain(self, names: Iterable[str | Sequence[str]], batch_size: int = BATCH_SIZE) -> list[Prediction]:
        """The top label of each name and why: its contributions (nameorigin.model.explain)."""
        return self.predict(names, PredictOptions(top_k=1, batch_size=batch_size, explain=True))

    @torch.inference_mode()
    def explain_encoded(self, encoded: Sequence[Sequence[int]], names: Sequence[str],
                        batch_size: int = BATCH_SIZE) -> list[NameExplanation]:
        return explain_names(self.net, encoded, names, self.labels, batch_size, self.undo_temperature)

    def _sets(self, probs: torch.Tensor, threshold: float | list[float]) -> tuple[list[list[str]], torch.Tensor]:
        """Each name's prediction set, most probable first, and the sets' sizes."""
        members = prediction_sets(probs, threshold)
        order = probs.argsort(-1, descending=True)
        ranked = members.gather(1, order)
        return ([[self.labels[j] for j, keep in zip(row, flags, strict=True) if keep]
                 for row, flags in zip(order.tolist(), ranked.tolist(), strict=True)], members.sum(1))


def read_sidecar(path: str | Path) -> dict:
    """The .json written beside an exported program: vocabulary, labels, calibration, split settings, card."""
    path = Path(path)
    sidecar = path.with_suffix(".json")
    if not path.is_file() or not sidecar.is_file():
        raise UserError(f"exported model {path} or its sidecar {sidecar.name} is missing: run nameorigin export")
    try:
        return json.loads(sidecar.read_text())
    except (ValueError, OSError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise UserError(f"exported model {path} could not be read ({type(error).__name__}): "
                           "export it again") from None


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise UserError(f"--device {device}: use cpu, cuda or auto")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device {device} but no CUDA device is available: use --device cpu")
    return device
