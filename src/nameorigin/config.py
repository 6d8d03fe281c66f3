"""The typed schema of every config group, stated once.

Each dataclass holds its group's defaults and is registered in Hydra's ConfigStore; the group's YAML files name it
(`defaults: [<schema>, _self_]`) and write only what differs (tests/test_config.py keeps it so). So OmegaConf
refuses an unknown key, a wrong type or a choice outside an Enum when the config is composed, and `__post_init__`
checks ranges and rules across fields when the typed config is turned into objects (`OmegaConf.to_object`, or a
constructor building its own config), before anything is built or read.

Fields that shape the model's weights carry `metadata={"shapes": ...}`: "encoder" for what fine-tuning carries
over (the embedding and the cell), "head" for the rest. The resume check and the fine-tuning check read those
marks instead of lists of names. A field added after checkpoints were written carries `metadata={"absent": ...}`:
what those checkpoints, which lack it, meant (`from_plain`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from nameorigin.base.errors import UserError
from nameorigin.base.formats import described
from nameorigin.base.parts import PARSED_PARTS


class Choice(str, Enum):  # noqa: UP042 (not StrEnum: its str() and format() differ, which OmegaConf and messages read)
    """An Enum whose members are the plain words of the YAML: they compare, hash and print as those strings."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Cell(Choice):
    """model.cell: each member is a module of nameorigin.model.cells, named as its word, stating the whole cell."""

    rnn = "rnn"
    rnn_relu = "rnn_relu"
    gru = "gru"
    lstm = "lstm"


class Impl(Choice):
    autograd = "autograd"  # the plain loop: the reference
    bptt = "bptt"  # the hand-written backward through time (nameorigin.model.bptt)
    triton = "triton"  # a cell's time loop inside one Triton kernel (nameorigin.model.triton_loop)


class FastPath(Choice):
    auto = "auto"  # on when training on one CUDA device (trainer=gpu), off otherwise
    on = "on"  # also without CUDA, where the same step runs eagerly (tests; what one-length batches change)
    off = "off"  # the dynamic step, batches of mixed lengths


class NgramHash(Choice):
    """model.ngram_hash: how a window's code becomes a bucket (nameorigin.model.ngram.BUCKET_OF)."""

    mixed = "mixed"  # every character of the window moves its bucket, whatever the vocabulary's size
    polynomial = "polynomial"  # the code mod the bucket count: what checkpoints written before the setting hold


class TransferUse(Choice):
    auto = "auto"  # with a starting point, a transferred candidate trains beside the plain one; validation picks
    always = "always"  # the transferred model only (refused when the starting point is missing)
    never = "never"  # the plain model only


class Normalize(Choice):
    ascii = "ascii"  # NFD, accents and other non-ASCII characters dropped
    none = "none"  # characters as written


ENCODER, HEAD = {"shapes": "encoder"}, {"shapes": "head"}
# The hash checkpoints written before model.ngram_hash used: their n-gram weights are read through it.
HASHED_BEFORE = {"absent": NgramHash.polynomial}
# Settings a run may leave to the data (null in the YAML): nameorigin.training.sizing picks them from the table's
# size and label count before the model is built. Python callers pass numbers, or get the schema's defaults.
# This is the one list of them: the rule's tiers set each (sizing.KEYS), and the search's default space is drawn
# from them.
LEFT_TO_DATA = ("model.hidden_size", "model.directions", "model.impl", "model.ngram_buckets", "model.ngram_max",
                "model.dropout", "model.label_smoothing", "model.optimizer.lr", "data.batch_size",
                "trainer.max_epochs", "trainer.val_check_interval")
# What validation can pick by (the `objective` setting), in words for the logs and the card.
OBJECTIVES = {"val/acc": "accuracy", "val/person_acc": "people-weighted accuracy"}
CORPUS_URL = "https://download.pytorch.org/tutorial/data.zip"


def shape_fields(config: Any, *kinds: str) -> list[str]:
    """The fields of a config dataclass marked as shaping weights (of the given kinds, or any)."""
    return [f.name for f in dataclasses.fields(config)
            if f.metadata.get("shapes") and (not kinds or f.metadata["shapes"] in kinds)]


def flat_settings(settings: dict, prefix: str = "") -> dict[str, Any]:
    """Nested settings as dotted keys ({"model.hidden_size": 256, ...}), other values as they are."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            out.update(flat_settings(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def plain(config: Any) -> dict[str, Any]:
    """A config dataclass as plain Python types (Enums as their words), for checkpoints read weights-only."""
    values = dataclasses.asdict(config)
    return {key: value.value if isinstance(value, Enum) else value for key, value in values.items()}


def from_plain(cls: type, values: dict[str, Any]) -> Any:
    """The config dataclass `cls` from a plain dict, ignoring keys it does not have (a checkpoint's extras); a field
    the dict lacks takes its "absent" metadata where it has one (what a checkpoint written before it meant)."""
    fields = dataclasses.fields(cls)
    absent = {f.name: f.metadata["absent"] for f in fields if "absent" in f.metadata and f.name not in values}
    names = {f.name for f in fields}
    return cls(**{key: value for key, value in values.items() if key in names}, **absent)


def whole(key: str, value: Any, minimum: int = 0) -> None:
    if value is None and key in LEFT_TO_DATA:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UserError(f"{key}={value!r} must be a whole number >= {minimum}")


def rate(key: str, value: Any, low: float = 0.0, high: float = 1.0) -> None:
    """value in [low, high)."""
    if value is None and key in LEFT_TO_DATA:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not (math.isfinite(value)
                                                                             and low <= value < high):
        raise UserError(f"{key}={value!r} must be a number in [{low:g}, {high:g})")


def choice(key: str, enum: type[Choice], value: Any) -> Choice:
    """A constructor called from Python may pass the word itself: turn it into the Enum or refuse it."""
    if value is None and key in LEFT_TO_DATA:
        return None
    try:
        return enum(value)
    except ValueError:
        raise UserError(f"{key}={value!r} is not one of {', '.join(member.value for member in enum)}") from None


@dataclass
class NetConfig:
    """nameorigin.model.charrnn.CharRNN: the cell, its sizes and the n-gram head beside it."""

    cell: Cell = field(default=Cell.gru, metadata=ENCODER)
    hidden_size: int | None = field(default=256, metadata=ENCODER)
    embedding_dim: int = field(default=64, metadata=ENCODER)  # 0: one-hot input, as in the PyTorch tutorial
    # 2: a second cell reads each name backwards
    directions: int | None = field(default=1, metadata=ENCODER)
    layers: int = field(default=1, metadata=ENCODER)  # cells stacked, each layer reading the states below
    # hashed character n-grams; 0 turns the head off
    ngram_buckets: int | None = field(default=65536, metadata=HEAD)
    ngram_max: int | None = field(default=4, metadata=HEAD)
    ngram_hash: NgramHash = field(default=NgramHash.mixed, metadata={**HEAD, **HASHED_BEFORE})
    dropout: float | None = 0.3
    input_dropout: float = 0.0
    # in training, each n-gram of a name left out of the n-gram head's sum with this chance (the rest scaled up):
    # the head cannot carry a name on the few n-grams only it has, so the recurrent part learns it too
    ngram_dropout: float = 0.0
    impl: Impl | None = Impl.autograd

    def __post_init__(self) -> None:
        self.cell, self.impl = choice("model.cell", Cell, self.cell), choice("model.impl", Impl, self.impl)
        self.ngram_hash = choice("model.ngram_hash", NgramHash, self.ngram_hash)
        whole("model.hidden_size", self.hidden_size, 1)
        whole("model.embedding_dim", self.embedding_dim)
        if self.directions not in (1, 2, None) or isinstance(self.directions, bool):
            raise UserError(f"model.directions={self.directions!r} must be 1 (reading each name forwards) or 2 "
                            "(forwards and backwards)")
        whole("model.ngram_buckets", self.ngram_buckets)
        if self.ngram_buckets is not None and self.ngram_buckets >= 2**31:
            raise UserError(f"model.ngram_buckets={self.ngram_buckets} must be below 2^31 (the hash's range)")
        whole("model.ngram_max", self.ngram_max, 1)
        rate("model.dropout", self.dropout)
        rate("model.input_dropout", self.input_dropout)
        rate("model.ngram_dropout", self.ngram_dropout, 0.0, 0.99)
        whole("model.layers", self.layers, 1)
        if self.impl == Impl.triton and self.layers > 1:
            raise UserError(f"model.impl=triton runs one layer (model.layers={self.layers}): use model.impl=bptt")
        size = self.hidden_size
        if self.impl == Impl.triton and size is not None and (size < 16 or size & (size - 1)):
            raise UserError(f"model.hidden_size={self.hidden_size}: model.impl=triton takes a power of two >= 16 "
                            "(its tiles)")


@dataclass
class ModelConfig(NetConfig):
    """The `model` group: the network's config plus how it is trained (nameorigin.fit.module.NameClassifier)."""

    label_smoothing: float | None = 0.0
    class_weights: Any = None  # null | balanced | sqrt (from training counts) | one positive number per label
    logit_adjustment: float = 0.0  # > 0: predict with logits - tau * log(training prior)
    soft_targets: bool | None = None  # null: a share table's or the surnames' shares; true: languages share a target
    normalize: Normalize = Normalize.ascii
    # Set from the data, never by hand: a table of parts' {"names": [given, ..., family], "join": boundary | space}
    # (nameorigin.base.parts); null: one string
    name_parts: Any = None
    init_from: str | None = None  # fine-tuning: a checkpoint of experiment=surnames_pretrain
    # The n-gram head also fitted alone (L2, penalty picked on validation) and mixed with the network at the weight
    # validation picks (nameorigin.training.linear_mix); false: the head trains with the network alone
    linear_part: bool = True
    transfer_features: bool = True  # keep the pretrained country head as features
    known_names_cache: str | None = None  # a surnames cache: the exact name's country shares as evidence
    evidence_hidden: int = field(default=0, metadata=HEAD)  # > 0: a hidden layer between those shares and logits
    pretrained_lr_scale: float = 1.0  # learning-rate factor for the pretrained embedding, cell and country head
    fast_path: FastPath = FastPath.auto  # the CUDA-graphed step (nameorigin.fit.graphed)
    optimizer: Any = None  # a _partial_ optimizer: torch.optim.AdamW when null
    scheduler: Any = None  # a _partial_ schedule, or null

    def __post_init__(self) -> None:
        super().__post_init__()
        self.normalize = choice("model.normalize", Normalize, self.normalize)
        self.fast_path = choice("model.fast_path", FastPath, self.fast_path)
        rate("model.label_smoothing", self.label_smoothing)
        rate("model.logit_adjustment", self.logit_adjustment, 0.0, math.inf)
        rate("model.pretrained_lr_scale", self.pretrained_lr_scale, 0.0, math.inf)
        whole("model.evidence_hidden", self.evidence_hidden)
        weights = self.class_weights
        if not (weights is None or weights in ("balanced", "sqrt") or isinstance(weights, list | tuple) and all(
                isinstance(w, int | float) and not isinstance(w, bool) and w > 0 for w in weights)):
            raise UserError(f"model.class_weights={weights!r}: use balanced, sqrt, null or a list of positive "
                            "numbers, one per label")
        parts = self.name_parts
        if parts is not None and not (isinstance(parts, dict) and len(parts.get("names") or []) >= 2
                                      and parts.get("join") in ("boundary", "space")):
            raise UserError(f"model.name_parts={parts!r} is set from the data: drop it and give the table's parts "
                            "as data.name_columns=[given,family] or data.split_full_name=true")
        if self.known_names_cache and not self.init_from:
            raise UserError(f"model.known_names_cache={self.known_names_cache} is part of fine-tuning: use it with "
                            "model.init_from (experiment=finetune), or set model.known_names_cache=null")


@dataclass
class TransferShape:
    """What a pretrained checkpoint adds to the network when fine-tuning (nameorigin.training.transfer); every
    field shapes weights."""

    source_classes: int = field(default=0, metadata=HEAD)  # the pretrained country head's countries
    source_ngram_buckets: int = field(default=0, metadata=HEAD)  # its n-gram head's buckets
    source_ngram_hash: NgramHash = field(default=NgramHash.mixed, metadata={**HEAD, **HASHED_BEFORE})  # and hash
    known_names: int = field(default=0, metadata=HEAD)  # rows of the known-name table
    known_countries: int = field(default=0, metadata=HEAD)
    # The pretrained vocabulary's size where the run's training names grew it (0: not grown): the parts read
    # each new character as the pretrained model would, folded (é as e), through a buffer of that many entries.
    source_vocab: int = field(default=0, metadata=HEAD)

    def __post_init__(self) -> None:
        self.source_ngram_hash = choice("source_ngram_hash", NgramHash, self.source_ngram_hash)
        if self.known_names and not self.known_countries:
            raise UserError("known_names needs known_countries: the number of countries in the table")

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in dataclasses.fields(self) if f.type == "int")


def check_split(fractions: Any) -> None:
    """Validation and test must be non-empty: the epoch, the temperature and the conformal thresholds are picked
    on validation, and test is the one held-out score."""
    values = list(fractions)
    if len(values) != 3 or min(values) < 0 or abs(sum(values) - 1) > 1e-6 or 0 in values[1:]:
        raise UserError(f"data.split_fractions={values} must be three numbers (train, val, test) summing to 1, "
                        "with val and test above 0, e.g. [0.8,0.1,0.1]")


@dataclass
class LoaderConfig:
    """What every corpus' DataModule shares."""

    split_fractions: list[float] = field(default_factory=lambda: [0.8, 0.1, 0.1])
    split_seed: int = 0
    # The training batches' order, drawn anew each epoch from (order_seed, epoch): conf/data sets it to the run's
    # seed, so the training seed varies the order and the split seed only the split.
    order_seed: int = 0
    batch_size: int | None = 64
    num_workers: int = 0  # batches are slices of pre-encoded tensors: workers only add start-up time
    normalize: Normalize = Normalize.ascii
    label_name: str = "language"  # what a label is: prediction columns, JSON keys and the model card say it
    # A table of rows to leave out of training only (columns name and given_label: `nameorigin audit`'s suspects);
    # validation and test keep them, so the figures stay comparable with a run that trained on them.
    exclude: str | None = None

    def __post_init__(self) -> None:
        self.normalize = choice("data.normalize", Normalize, self.normalize)
        self.split_fractions = [float(f) for f in self.split_fractions]
        check_split(self.split_fractions)
        whole("data.split_seed", self.split_seed)
        whole("data.order_seed", self.order_seed)
        whole("data.batch_size", self.batch_size, 1)
        whole("data.num_workers", self.num_workers)
        if not self.label_name.isidentifier():  # it becomes a column name and a JSON key
            raise UserError(f"data.label_name={self.label_name!r} must be one word of letters, digits or _, "
                            "e.g. origin")


@dataclass
class NamesDataConfig(LoaderConfig):
    """nameorigin.data.names.NamesDataModule: a folder of <Language>.txt files."""

    _target_: str = "nameorigin.data.names.NamesDataModule"
    root: str | None = None  # a folder of <Language>.txt files; null: the corpus shipped in the package
    url: str = CORPUS_URL
    download: bool = False  # fetch the tutorial corpus into data.root only when asked: a mistyped root is refused

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.root is not None and not str(self.root).strip():  # Path(""): a download would unpack into the cwd
            raise UserError("data.root is empty: pass a folder of <Language>.txt files, or null for the shipped "
                            "corpus")


@dataclass
class TableDataConfig(LoaderConfig):
    """nameorigin.data.table.TableDataModule: a CSV or TSV of labelled names with a header row."""

    _target_: str = "nameorigin.data.table.TableDataModule"
    path: str = ""
    name_column: str = "name"
    label_column: str = "label"
    label_separator: str = ";"  # several labels in one cell: a name under several labels
    delimiter: str | None = None  # null: tab for .tsv/.tab, else comma; "tab" for a tab
    share_columns: list[str] | None = None  # one numeric column per label: soft targets (label_column unused)
    weight_column: str | None = None  # a count or weight per row, for the training loss
    rows: str = "names"  # names: a row per name (or per name and label); people: a row per person, counted
    label_name: str = "label"
    # A name in parts, one column each, given first and family last (data.name_columns=[first_name,last_name]):
    # the model reads a boundary between them. Replaces name_column.
    name_columns: list[str] | None = None
    # name_column holds full names, split by nameparser into [given, family] ("Lincoln, Abraham" too).
    split_full_name: bool = False
    # How a model reads the parts: boundary (a token between them) or space ("Given Family" as one string, on
    # the same split: what knowing the parts buys).
    join_parts: str = "boundary"

    @property
    def name_source(self) -> list[str]:
        """The columns a row's name is read from, in order."""
        return list(self.name_columns) if self.name_columns else [self.name_column]

    @property
    def parts(self) -> list[str] | None:
        """The parts a model of this table reads, or None for one string."""
        return list(self.name_columns) if self.name_columns else list(PARSED_PARTS) if self.split_full_name \
            else None

    def check_parts(self) -> None:
        if self.name_columns is not None:
            columns = self.name_columns = [str(column) for column in self.name_columns]
            if len(columns) < 2 or len(set(columns)) != len(columns) or not all(c.strip() for c in columns):
                raise UserError(f"data.name_columns={columns} must name two or more distinct columns, given name "
                                "first and family name last, e.g. data.name_columns=[first_name,last_name]")
            if self.split_full_name:
                raise UserError("data.split_full_name=true splits the one column data.name_column: drop it, or "
                                "drop data.name_columns")
        if self.join_parts not in ("boundary", "space"):
            raise UserError(f"data.join_parts={self.join_parts} is not a way to read parts: pass boundary (a token "
                            "between the parts) or space (one string)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not str(self.path).strip():
            raise UserError(f"data.path is missing: pass data.path=<a table file of names: {described()}>")
        if not self.label_separator:
            raise UserError("data.label_separator is empty: pass the character between labels in a cell, e.g. ;")
        if self.share_columns is not None:
            shares = self.share_columns = [str(column) for column in self.share_columns]
            if len(set(shares)) < 2 or len(set(shares)) != len(shares) or not all(c.strip() for c in shares):
                raise UserError(f"data.share_columns={shares} must name two or more distinct columns, one per "
                                "label, e.g. data.share_columns=[F,M]")
            taken = {*self.name_source, self.weight_column} & set(shares)
            if taken:
                raise UserError(f"data.share_columns={shares} holds {', '.join(sorted(taken))}, the name or "
                                "weight column: name the label columns only")
        self.check_parts()
        if self.rows not in ("names", "people"):
            raise UserError(f"data.rows={self.rows} is not a kind of row: pass data.rows=names (a row per name) or "
                            "data.rows=people (a row per person, counted into each name's label shares)")
        if self.rows == "people" and self.share_columns is not None:
            raise UserError("data.rows=people reads one person's label from data.label_column, not shares: drop "
                            "data.share_columns, or use data.rows=names for a table of shares per name")
        if self.rows == "people" and self.weight_column is not None:
            raise UserError("data.rows=people counts every row as one person: drop data.weight_column, or use "
                            "data.rows=names with it for rows that already hold counts")
        if self.weight_column is not None and self.weight_column in self.name_source:
            raise UserError(f"data.weight_column={self.weight_column} is the name column: name the column of counts "
                            "or weights")


NAME_LISTS = ("last_names", "first_names")  # names-dataset's lists, each a pickle in the package


@dataclass
class SurnamesDataConfig(LoaderConfig):
    """nameorigin.data.surnames.SurnamesDataModule: names-dataset's names and their country shares."""

    _target_: str = "nameorigin.data.surnames.SurnamesDataModule"
    cache: str = "data/surnames"
    limit: int = 0  # > 0: a deterministic sample of this many names
    split_fractions: list[float] = field(default_factory=lambda: [0.98, 0.01, 0.01])
    batch_size: int | None = 512
    label_name: str = "country"
    sources: list[str] = field(default_factory=lambda: ["last_names"])  # and/or first_names
    package: str | None = None  # a folder holding the lists' pickles; null: the installed names-dataset's own
    min_char_names: int = 50  # with normalize=none: a character fewer names hold drops those names
    # Runs (each a list of train.py overrides, "experiment=first_name_gender") whose validation and test names,
    # and their spelling variants, the converted cache leaves out; a run whose table is not there is skipped.
    leave_out_of: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        whole("data.limit", self.limit)
        whole("data.min_char_names", self.min_char_names, 1)
        wrong = [s for s in self.sources if s not in NAME_LISTS]
        if wrong or not self.sources or len(set(self.sources)) != len(self.sources):
            raise UserError(f"data.sources={list(self.sources)}: list each of {', '.join(NAME_LISTS)} at most once")
        self.sources = list(self.sources)


@dataclass
class CalibrationConfig:
    """nameorigin.model.calibration: the temperature and conformal thresholds fitted on validation."""

    enabled: bool = True
    coverages: list[float] = field(default_factory=lambda: [0.8, 0.9, 0.95])
    sets: str = "marginal"  # the prediction sets served: marginal, or mondrian (a threshold per label); both fitted
    bins: int = 15
    false_abstention: float = 0.05  # the share of validation names the out-of-distribution rule abstains on
    max_unknown_share: float = 0.5  # abstain when more of a name's characters than this were never in training

    def __post_init__(self) -> None:
        for coverage in self.coverages:
            if not 0 < coverage < 1:
                raise UserError(f"calibration.coverages: {coverage} must be a number between 0 and 1")
        if self.sets not in ("marginal", "mondrian"):
            raise UserError(f"calibration.sets={self.sets} is not a kind of prediction set: pass marginal (one "
                            "threshold, coverage over all names) or mondrian (a threshold per label)")
        whole("calibration.bins", self.bins, 1)
        rate("calibration.false_abstention", self.false_abstention)
        rate("calibration.max_unknown_share", self.max_unknown_share)


@dataclass
class RefitConfig:
    """nameorigin.training.refit: a fresh model on train + validation once validation has picked the settings."""

    enabled: bool = True


@dataclass
class SearchConfig:
    """nameorigin.training.search: the settings the run left to the data, searched on its validation split."""

    budget_minutes: float = 0.0  # 0: no search, the rule's settings (nameorigin.training.sizing)
    max_trials: int = 100
    seed: int = 0  # the sampler's
    # Validation reports per epoch: the pruner's unit. A large table's epoch is minutes (NaNa's 8), so there 4
    # lets a hopeless candidate stop after a quarter of one.
    reports_per_epoch: int = 1
    space: Any = None  # {key: [choices] or {low, high, log}}: your own settings searched; null: the default space

    def __post_init__(self) -> None:
        if not isinstance(self.budget_minutes, int | float) or self.budget_minutes < 0:
            raise UserError(f"search.budget_minutes={self.budget_minutes!r} must be a number of minutes, 0 or more")
        whole("search.max_trials", self.max_trials, 1)
        whole("search.reports_per_epoch", self.reports_per_epoch, 1)


@dataclass
class MarginConfig:
    """nameorigin.evaluation.margin: after the test, the n-gram baseline fitted on the run's own split and the
    model's margin over it, with its paired interval, in the results, train.log, the card and the checkpoint."""

    enabled: bool = True


@dataclass
class TransferConfig:
    """nameorigin.training.transfer: start a run from the surnames model that `make pretrain` builds once (its
    encoder, its country head as features, the exact name's country shares as evidence), decided on validation."""

    use: TransferUse = TransferUse.auto
    starting_point: str = "data/pretrained/surnames.ckpt"  # where experiment=surnames_pretrain publishes its model
    known_names_cache: str | None = "data/surnames"  # the surnames cache that pretraining converted; null: no lookup
    evidence_hidden: int = 64  # the known-name evidence's hidden layer (docs/pretraining.md)
    pretrained_lr_scale: float = 0.3  # learning-rate factor for the pretrained embedding, cell and country head
    publish: str | None = None  # a pretraining run copies its served model here (experiment=surnames_pretrain)

    def __post_init__(self) -> None:
        self.use = choice("transfer.use", TransferUse, self.use)
        whole("transfer.evidence_hidden", self.evidence_hidden)
        rate("transfer.pretrained_lr_scale", self.pretrained_lr_scale, 0.0, math.inf)


@dataclass
class EnsembleConfig:
    """nameorigin.training.ensemble: more networks of the kind the run serves, each from its own seed (the run's
    seed + 1, + 2, ...), on the same split; validation picks how many of them are served as one model."""

    members: int = 1  # the most networks tried (1: one network, no ensemble)
    min_gain: float = 0.002  # each network more must lift validation accuracy by more than this (-1: keep all)

    def __post_init__(self) -> None:
        whole("ensemble.members", self.members, 1)
        rate("ensemble.min_gain", self.min_gain, -1.0, 1.0)


@dataclass
class CardConfig:
    """nameorigin.training.card: MODEL_CARD.md in the run folder and inside the checkpoint."""

    enabled: bool = True


@dataclass
class TrainConfig:
    """The primary config (conf/train.yaml). Groups without a schema of their own (trainer, callbacks, logger,
    paths) are Lightning's and Hydra's settings, checked by those libraries."""

    data: Any = None
    model: ModelConfig = field(default_factory=ModelConfig)
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    refit: RefitConfig = field(default_factory=RefitConfig)
    margin: MarginConfig = field(default_factory=MarginConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    transfer: TransferConfig = field(default_factory=TransferConfig)
    ensemble: EnsembleConfig = field(default_factory=EnsembleConfig)
    card: CardConfig = field(default_factory=CardConfig)
    trainer: Any = None
    callbacks: Any = None
    logger: Any = None
    paths: Any = None
    task_name: str = "train"
    seed: int = 0
    ckpt_path: str | None = None  # resume: a .ckpt, or "last" for the newest run's last.ckpt
    # What validation picks by: best.ckpt's epoch, the transferred candidate or the plain one, the search's settings.
    # null: the table's own (nameorigin.training.sizing.objective_pick): val/person_acc, the share of people right,
    # on a table with counts or shares (the figure its margin reports), val/acc elsewhere.
    objective: str | None = None
    optimized_metric: str | None = "val/acc_best"  # what train.py returns, for sweepers
    test: bool = True  # after fit, test the chosen checkpoint on the held-out split


def check_run(cfg: Any) -> None:
    """Rules across groups, and the trainer settings nameorigin relies on: refused before anything runs."""
    if not 0 <= cfg.seed < 2**32:  # numpy's range, which seed_everything enforces
        raise UserError(f"seed={cfg.seed} must be between 0 and 2**32 - 1")
    epochs = cfg.trainer.get("max_epochs")
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int)):
        raise UserError(f"trainer.max_epochs={epochs!r} must be a whole number")
    if epochs is not None and epochs != -1 and epochs < 1:  # -1 is Lightning's "no limit"
        raise UserError(f"trainer.max_epochs={epochs} trains nothing: pass a positive number of epochs")
    if cfg.get("objective") not in (None, *OBJECTIVES):
        raise UserError(f"objective={cfg.objective}: use {', '.join(OBJECTIVES)} or null (the table's own)")
    if cfg.task_name == "finetune" and not cfg.model.init_from:
        raise UserError("model.init_from is missing: pass model.init_from=<best.ckpt of experiment=surnames_pretrain>")
    if cfg.refit.enabled and str(cfg.data.get("_target_", "")).endswith("SurnamesDataModule"):
        raise UserError("refit.enabled=true is for the names corpus: the surnames pretraining has no refit; pass "
                        "refit.enabled=false")
    precision, clip = str(cfg.trainer.get("precision")), cfg.trainer.get("gradient_clip_val")
    if precision.startswith("16") and clip and (cfg.model.optimizer or {}).get("fused"):
        # float16's loss scaler unscales inside a fused step, after Lightning would have clipped: it refuses mid-run
        raise UserError(f"model.optimizer.fused=true cannot clip gradients (trainer.gradient_clip_val={clip}) under "
                        f"trainer.precision={precision}: pass model.optimizer.fused=false or "
                        "trainer.precision=bf16-mixed")


def register() -> None:
    """Put the schemas in Hydra's ConfigStore, under the names the YAML defaults lists use. train.py calls it
    before composing; nothing else needs Hydra (serving and the model import this module without it)."""
    from pathlib import Path

    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    store = ConfigStore.instance()
    for (group, name), node in SCHEMAS.items():
        store.store(group=group, name=name, node=node)
    # ${abspath:...}: a path made absolute where the run starts (an SQLite URI must not depend on a later cwd).
    OmegaConf.register_new_resolver("abspath", lambda path: str(Path(path).resolve()), replace=True)


# (group, name) -> schema: what a YAML file's defaults list names. The file sets only what differs from it.
SCHEMAS: dict[tuple[str | None, str], type] = {
    (None, "train_schema"): TrainConfig,
    ("model", "model_schema"): ModelConfig,
    ("data", "names_schema"): NamesDataConfig,
    ("data", "surnames_schema"): SurnamesDataConfig,
    ("data", "table_schema"): TableDataConfig,
    ("calibration", "calibration_schema"): CalibrationConfig,
    ("refit", "refit_schema"): RefitConfig,
    ("margin", "margin_schema"): MarginConfig,
    ("search", "search_schema"): SearchConfig,
    ("card", "card_schema"): CardConfig,
    ("transfer", "transfer_schema"): TransferConfig,
    ("ensemble", "ensemble_schema"): EnsembleConfig,
}
