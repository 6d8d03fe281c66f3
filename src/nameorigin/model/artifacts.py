"""What training hands to serving, typed: the calibration fitted on validation, the abstention rule, and
everything a Predictor needs beside the network (ServingMeta).

Each travels as plain types (`plain()`), so `torch.load(weights_only=True)` reads a checkpoint and an export's
sidecar is JSON; `from_plain()` reads them back, ignoring keys it does not know and giving a key a file predates
its default. Checkpoints carry CHECKPOINT_FORMAT; those written before it have no "format" key and read the same.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

CHECKPOINT_FORMAT = "nameorigin-checkpoint-2"
# The refit's served model beside best.ckpt in a run's checkpoints/ (nameorigin.training.refit writes it).
REFIT_FILE = "refit.ckpt"
# A run's figures and served model's path (nameorigin.training.outputs); a pretraining's names the starting point it
# published under STARTING_POINT_KEY, so that "latest" (nameorigin.serving.runs) never answers with it.
RESULTS_FILE = "results.json"
STARTING_POINT_KEY = "published_starting_point"
PUBLISHED_CORPUS_KEY = "published_corpus_sha256"  # beside it: the corpus it learnt from (StartingPoint.record)
EXPORT_FORMAT = "nameorigin-export-4"


def known_fields(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {key: value for key, value in values.items() if key in names}


@dataclass
class AbstentionRule:
    """When a name is out of the model's depth (nameorigin.training.calibration fits it, serving/abstain.py reads
    it): more than `max_unknown_share` of its characters unseen, or an out-of-distribution score under
    `threshold`, the score standardized by `scale` (novelty and energy: [mean, std] on validation)."""

    threshold: float
    scale: dict[str, list[float]]
    novelty: dict[str, Any]  # nameorigin.model.novelty.CharTrigrams.state()
    false_abstention: float = 0.05
    max_unknown_share: float = 0.5
    val_abstained: float | None = None
    fitted_on: str = ""

    def plain(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_plain(cls, values: dict[str, Any] | None) -> AbstentionRule | None:
        return cls(**known_fields(cls, values)) if values else None


@dataclass
class HeldOutReference:
    """Names the model did not train on, as it answers them: their calibrated probabilities and true labels (the
    names the abstention rule turns away left out). `--composition`'s adjusted method reads the model's soft
    confusion from them (nameorigin.analysis.composition). Fitted for best.ckpt on the validation names and carried
    to the refit, which trained on those names: its own answers there would be in-sample, its confusion near the
    identity, and its intervals too narrow. A seeded, label-stratified sample where the split holds more than
    REFERENCE_VALUES probabilities (`held_out` says how many names there were)."""

    probs: list[list[float]]
    targets: list[int]
    held_out: int = 0
    fitted_on: str = ""

    def plain(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_plain(cls, values: dict[str, Any] | None) -> HeldOutReference | None:
        return cls(**known_fields(cls, values)) if values else None


REFERENCE_VALUES = 250_000  # probabilities a checkpoint keeps of its reference (names x labels)


@dataclass
class Calibration:
    """Fitted on validation after training (nameorigin.model.calibration.calibrate): the temperature (already
    inside the network), the conformal thresholds by coverage level, the label mix of the calibrated
    probabilities (which --prior divides out), and the abstention rule."""

    temperature: float = 1.0
    temperature_at_bound: bool = False
    bins: int = 15
    val_size: int = 0
    val_ece_raw: float | None = None
    val_ece: float | None = None
    val_ece_shares: float | None = None
    conformal: dict[str, float] = field(default_factory=dict)  # level_key(coverage) -> probability threshold
    # Class-conditional (Mondrian) thresholds: level -> one per label; the labels too rare for their own quantile
    # (they take the marginal threshold). `sets` says which of the two kinds the model serves.
    conformal_by_label: dict[str, list[float]] = field(default_factory=dict)
    conformal_fallback: dict[str, list[int]] = field(default_factory=dict)
    sets: str = "marginal"
    conformal_score: str = ""
    label_prior: list[float] | None = None
    abstention: AbstentionRule | None = None
    reference: HeldOutReference | None = None
    carried_from: str | None = None  # the refit's: "best.ckpt", whose validation fitted it
    fitted_on: str = ""  # which names fitted the temperature and thresholds, and which model answered them

    def set_kinds(self, level: str) -> list[str]:
        """The kinds of prediction set fitted at a stored level: marginal, and mondrian where it was fitted."""
        return ["marginal", "mondrian"] if level in self.conformal_by_label else ["marginal"]

    def threshold(self, level: str, sets: str | None = None) -> float | list[float]:
        """The threshold(s) of a stored level for the kind of sets asked (default: the kind this model serves)."""
        if (sets or self.sets) == "mondrian" and level in self.conformal_by_label:
            return list(self.conformal_by_label[level])
        return float(self.conformal[level])

    def plain(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        values["abstention"] = self.abstention.plain() if self.abstention else None
        values["reference"] = self.reference.plain() if self.reference else None
        return values

    @classmethod
    def from_plain(cls, values: dict[str, Any] | None) -> Calibration | None:
        if not values:
            return None
        known = known_fields(cls, values)
        known["abstention"] = AbstentionRule.from_plain(known.get("abstention"))
        known["reference"] = HeldOutReference.from_plain(known.get("reference"))
        return cls(**known)


@dataclass
class ServingMeta:
    """Everything a Predictor needs beside the network, from a checkpoint or an export's sidecar."""

    vocab: list[str]
    labels: list[str]
    normalize: str = "ascii"
    label_name: str = "language"  # what a label is (data.label_name): output columns and JSON keys
    label_names: list[str] | None = None  # a country model's country name per ISO code
    data_settings: dict[str, Any] = field(default_factory=dict)  # split settings + corpus hash, for nameorigin evaluate
    calibration: Calibration | None = None
    model_card: str | None = None
    training_shares: list[float] | None = None  # the label mix the probabilities carry by construction
    calibrated: bool = True  # False: serve the probabilities before temperature scaling (a serving choice)
    margin: dict[str, Any] | None = None  # nameorigin.evaluation.margin: the run's margin over the n-gram baseline
    # A model of parts: {"names": [given, family], "join": "boundary" | "space"} (nameorigin.base.parts)
    name_parts: dict[str, Any] | None = None

    def plain(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        values["calibration"] = self.calibration.plain() if self.calibration else None
        values.pop("calibrated")
        return values

    @classmethod
    def from_plain(cls, values: dict[str, Any]) -> ServingMeta:
        known = known_fields(cls, values)
        known["calibration"] = Calibration.from_plain(known.get("calibration"))
        if "trained_prior" in values and "training_shares" not in values:  # sidecars of nameorigin-export-3
            known["training_shares"] = values["trained_prior"]
        settings = known.get("data_settings") or {}
        known.setdefault("label_name", settings.get("label_name", "language"))
        known["data_settings"] = settings
        return cls(**known)

    @classmethod
    def from_checkpoint(cls, checkpoint: dict[str, Any]) -> ServingMeta:
        """A training checkpoint's serving meta, read from where train.py stores each part."""
        hp = checkpoint["hyper_parameters"]
        settings = checkpoint.get("data") or {}
        return cls(vocab=list(hp["vocab"]), labels=list(hp["labels"]), normalize=hp["config"]["normalize"],
                   label_name=settings.get("label_name", "language"), label_names=hp.get("label_names"),
                   data_settings=settings, calibration=Calibration.from_plain(checkpoint.get("calibration")),
                   model_card=checkpoint.get("model_card"), training_shares=training_shares(hp),
                   margin=checkpoint.get("margin"), name_parts=hp["config"].get("name_parts"))


def training_shares(hparams: dict[str, Any]) -> list[float] | None:
    """The label shares a checkpoint's probabilities carry by construction: its training prior to the power
    1 - tau (logit adjustment divides tau of it out)."""
    prior, tau = hparams.get("class_prior"), float(hparams["config"].get("logit_adjustment") or 0.0)
    if not prior:
        return None
    powered = [share ** (1 - tau) for share in prior]
    return [share / sum(powered) for share in powered]
