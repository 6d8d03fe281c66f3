"""Everything a prediction takes, stated once: PredictOptions. The Predictor, distinct-name scoring, tables,
frames, Ray and the server take it whole; the command's flags and the server's request fields are read off its
fields (their help is each field's `help`), so an option is one entry here and a check of it one line below.

Two kinds of check: what the options say on their own (`__post_init__`: a top-k of 0, a set size without sets),
and what they ask of one model (`for_model`: a coverage level it stores, labels it knows, an explanation it can
give). Every refusal names the option as the caller wrote it (`top_k`, `coverage`), whichever door it came in by.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

import torch

from nameorigin.base.errors import UserError
from nameorigin.serving.prior import read_prior

if TYPE_CHECKING:
    from nameorigin.serving.predict import Predictor

PRECISIONS = {"float32": None, "bf16": torch.bfloat16}  # the recurrent products' dtype (None: the weights' own)
BATCH_SIZE = 4096  # names per forward pass: on a large table, sorted by length, 4096 beat 1024, 2048 and 8192 here
ESTIMATE = "estimate"


def option(default: Any, help: str, request: bool = True) -> Any:
    """A field of PredictOptions: `help` says what it does (the flag's help and the request field's description);
    `request`: whether an HTTP request may set it."""
    return field(default=default, metadata={"help": help, "request": request})


@dataclass(frozen=True)
class PredictOptions:
    """How to answer names. Frozen and checked on creation; `for_model` checks it against one model."""

    top_k: int = option(3, "ranked labels per name")
    coverage: float | None = option(None, "add each name's prediction set at this stored coverage level (e.g. 0.9): "
                                          "the labels that hold the true one that often")
    explain: bool = option(False, "say why the top label: its score split into one contribution per character, "
                                  "per n-gram and for known-name evidence (a .ckpt only)")
    abstain: bool = option(True, "abstain on names out of the model's depth, when the model holds the rule (their "
                                 "scores still given)")
    max_set_size: int | None = option(None, "with coverage: abstain when a name's prediction set holds more "
                                            "labels than this")
    # "uniform", "estimate", a JSON file of label -> share (not over HTTP), a mapping, or a tensor in label order.
    prior: Any = option(None, "the label mix of the names being scored: 'uniform', 'estimate' (from these names, by "
                              "EM) or label -> share (a JSON file on the command line); re-weights the probabilities "
                              "by Bayes' rule")
    labels: Sequence[str] | None = option(None, "answer among these labels only (comma-separated on the command "
                                                "line): the probabilities renormalized over them, for names known "
                                                "to come from a few of the model's labels")
    full_names: bool = option(False, "a model of given and family names: each name, or the one column of a table, "
                                     "is a full name, split into its parts by nameparser")
    batch_size: int = option(BATCH_SIZE, "names per forward pass", request=False)
    precision: str = option("float32", "float32, or bf16: the recurrent products in bfloat16, the state kept in "
                                       "float32 (a .ckpt only; its cost in docs/speed.md)", request=False)

    def __post_init__(self) -> None:
        for name in ("top_k", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"{name} {value!r} must be a whole number, at least 1")
        if self.precision not in PRECISIONS:
            raise UserError(f"precision {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        if self.coverage is not None and (isinstance(self.coverage, bool) or not isinstance(self.coverage, int | float)
                                          or not 0 < self.coverage < 1):
            raise UserError(f"coverage {self.coverage!r} must be a level between 0 and 1, such as 0.9")
        if self.max_set_size is not None:
            if self.coverage is None:
                raise UserError("max_set_size abstains on large prediction sets: use it with coverage")
            if isinstance(self.max_set_size, bool) or not isinstance(self.max_set_size, int) or self.max_set_size < 1:
                raise UserError(f"max_set_size {self.max_set_size!r} must be a whole number, at least 1")
        if self.prior is not None and self.coverage is not None:
            raise UserError("coverage sets are calibrated for the training population's label mix, which prior "
                            "replaces: drop one of them")
        if self.labels is not None:
            self.check_labels()
        if self.prior is not None and not isinstance(self.prior, str | dict | torch.Tensor):
            raise UserError(f"prior must be 'uniform', 'estimate', a JSON file or label -> share, not "
                            f"{type(self.prior).__name__}")

    def check_labels(self) -> None:
        labels = self.labels.split(",") if isinstance(self.labels, str) else self.labels
        if not isinstance(labels, Sequence) or not all(isinstance(label, str) for label in labels):
            raise UserError("labels must be a list of the model's labels, or one string of them comma-separated")
        labels = tuple(label.strip() for label in labels if label.strip())
        if not labels:
            raise UserError("labels is empty: name at least one of the model's labels, or leave it out")
        if self.coverage is not None or self.explain:
            raise UserError("labels answers among some labels; coverage sets and explanations are of every label: "
                            "drop one of them")
        object.__setattr__(self, "labels", labels)  # frozen: normalized once, here

    @property
    def estimates_prior(self) -> bool:
        return isinstance(self.prior, str) and self.prior == ESTIMATE

    def for_model(self, predictor: Predictor) -> BoundOptions:
        """These options checked against `predictor`, once: the coverage level's threshold(s) read, a named prior
        read into a tensor in its label order ("estimate" stays: it comes from the names). Entry points bind once
        and pass the bound options on; binding them again returns them as they are."""
        if isinstance(self, BoundOptions):
            return self
        if self.explain and not predictor.explains:
            raise UserError("explain reads the model's own layers: pass the .ckpt, not an exported program")
        if self.precision != "float32" and not predictor.runs_own_loop:
            raise UserError(f"precision {self.precision} runs in the checkpoint's own single-layer loop: score with "
                            "a one-layer .ckpt, or drop precision")
        if self.full_names and predictor.part_names is None:
            raise UserError("full_names: this model reads a name as one string, whole names already; drop full_names")
        threshold = None if self.coverage is None else predictor.threshold_for(self.coverage)
        unknown = [label for label in self.labels or () if label not in predictor.labels]
        if unknown:
            raise UserError(f"labels: {', '.join(unknown)} not a label of this model; its labels are "
                            f"{', '.join(predictor.labels)}")
        prior = self.prior
        if not (prior is None or self.estimates_prior or isinstance(prior, torch.Tensor)):
            prior = read_prior(prior, predictor.labels)
        values = {f.name: getattr(self, f.name) for f in fields(PredictOptions)}
        return BoundOptions(**{**values, "prior": prior}, threshold=threshold)


@dataclass(frozen=True)
class BoundOptions(PredictOptions):
    """PredictOptions checked against one model (PredictOptions.for_model), with what that check read: the
    coverage level's threshold(s) (one per label for class-conditional sets)."""

    threshold: float | list[float] | None = None


TABLE_OPTIONS = PredictOptions(top_k=1)  # a table's rows: the best label per row unless asked for more


def options_of(options: PredictOptions | None, settings: dict[str, Any],
               default: PredictOptions = PredictOptions()) -> PredictOptions:
    """What a caller asked for: a PredictOptions, or its fields as keywords (`settings`, over `default`)."""
    if options is not None and settings:
        raise TypeError("pass PredictOptions or its fields as keywords, not both")
    if options is not None:
        return options
    unknown = sorted(set(settings) - {f.name for f in fields(PredictOptions)})
    if unknown:
        raise TypeError(f"{', '.join(unknown)}: not a prediction option; the options are "
                        f"{', '.join(f.name for f in fields(PredictOptions))}")
    return replace(default, **settings)


def option_fields(request_only: bool = False) -> list[Any]:
    """PredictOptions' fields (those a request may set, with `request_only`)."""
    return [f for f in fields(PredictOptions) if f.metadata["request"] or not request_only]
