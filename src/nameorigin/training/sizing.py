"""Settings that fit the data: what a run leaves null (`model.hidden_size: null`, `data.batch_size: null`, ...) is
picked here from the training split's size and label count, before the model is built.

The rule is a table of tiers by training pairs, so a user reads in one line what their table gets and why. The
small tier is the 18-language corpus' tuned default (16k training names); the large tier is what validation
picked on name2nat's NaNa (890k). The medium tier sits between them. The figures behind each tier:
docs/configuration.md#settings-that-fit-the-data. A setting given on the command line or in an experiment file
is never touched: only nulls are filled.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from nameorigin.base.errors import UserError
from nameorigin.config import LEFT_TO_DATA

log = logging.getLogger(__name__)

# Past this many labels a large table earns the large n-gram head (validation on NaNa: +1.1 points) and then
# memorizes its names within two epochs; with fewer, the large head only makes validation peak after one epoch.
MANY_LABELS = 20
# The n-gram head holds buckets x labels weights (and AdamW two more of each): past this many, halve the buckets.
NGRAM_TABLE_LIMIT = 2**26


@dataclass(frozen=True)
class Tier:
    """The settings one size of table gets; `up_to` is the largest training split (pairs) it covers."""

    name: str
    up_to: float
    why: str
    hidden_size: int
    directions: int
    impl: str
    batch_size: int
    max_epochs: int
    lr: float
    ngram_buckets: int
    ngram_max: int
    dropout: float
    label_smoothing: float
    # Validation this often within an epoch (a fraction of it): a large table's best model can fall between
    # epoch ends (on NaNa a quarter-epoch validation beat every epoch end), so it is checked four times an epoch.
    val_check_interval: float
    # Instead of max_epochs, ngram_buckets and ngram_max with more than MANY_LABELS labels:
    many_labels: tuple[int, int, int] | None = None


TIERS = (
    Tier("small", 50_000, "up to 50k training pairs: the 18-language corpus' settings, tuned on its validation split; "
         "the bptt loop at batch 256 and lr 6e-3, twice autograd's names/s at batch 64 at equal validation accuracy "
         "(docs/speed.md)",
         hidden_size=256, directions=1, impl="bptt", batch_size=256, max_epochs=12, lr=6e-3,
         ngram_buckets=2**16, ngram_max=4, dropout=0.3, label_smoothing=0.1, val_check_interval=1.0),
    Tier("medium", 300_000, "50k-300k training pairs: between the small and large tiers' settings",
         hidden_size=256, directions=1, impl="bptt", batch_size=256, max_epochs=6, lr=3e-3,
         ngram_buckets=2**17, ngram_max=5, dropout=0.2, label_smoothing=0.05, val_check_interval=1.0),
    Tier("large", float("inf"), "over 300k training pairs: the settings validation picked on the first-name gender "
         "table (447k)",
         hidden_size=256, directions=1, impl="bptt", batch_size=512, max_epochs=10, lr=3e-3,
         ngram_buckets=2**16, ngram_max=4, dropout=0.1, label_smoothing=0.0, val_check_interval=0.25,
         many_labels=(2, 2**18, 5)),
)

# Where each picked setting lives in the composed config: every key the run may leave to the data.
KEYS = {key.rsplit(".", 1)[1]: key for key in LEFT_TO_DATA}


@dataclass(frozen=True)
class Pick:
    key: str
    value: Any
    why: str


def tier_for(train_pairs: int) -> Tier:
    return next(tier for tier in TIERS if train_pairs <= tier.up_to)


def rule(train_pairs: int, labels: int, soft_targets: bool) -> list[Pick]:
    """Every setting the rule decides for a training split of this size, each with its reason."""
    tier = tier_for(train_pairs)
    because = f"{tier.name} tier ({train_pairs:,} training pairs; {tier.why})"
    picks = {field.name: Pick(KEYS[field.name], getattr(tier, field.name), because)
             for field in dataclasses.fields(Tier) if field.name in KEYS}
    if tier.many_labels and labels > MANY_LABELS:
        many = f"{because}, with {labels} labels (over {MANY_LABELS}: what validation picked on NaNa)"
        for key, value in zip(("max_epochs", "ngram_buckets", "ngram_max"), tier.many_labels, strict=True):
            picks[key] = Pick(KEYS[key], value, many)
    buckets = first = picks["ngram_buckets"].value
    while buckets * labels > NGRAM_TABLE_LIMIT and buckets > 2**12:
        buckets //= 2
    if buckets != first:
        why = f"{picks['ngram_buckets'].why}, halved until buckets x {labels} labels <= 2^26 weights"
        picks["ngram_buckets"] = Pick(KEYS["ngram_buckets"], buckets, why)
    if soft_targets and tier.label_smoothing:
        picks["label_smoothing"] = Pick(KEYS["label_smoothing"], 0.0, "the targets are the data's shares: "
                                        "nothing to smooth")
    return list(picks.values())


def picks_for(cfg: DictConfig, train_pairs: int, labels: int, soft_targets: bool) -> list[Pick]:
    """The rule's pick for every setting `cfg` left null (none when the run left nothing to the data); `cfg` is
    only read: nameorigin.training.plan puts the picks into the run's settings."""
    made = [pick for pick in rule(train_pairs, labels, soft_targets)
            if OmegaConf.select(cfg, pick.key, default="absent") is None]
    if made:
        log.info("picked from the data: %s", describe(made))
    return made


def objective_pick(cfg: DictConfig, shares_or_counts: bool) -> Pick | None:
    """What validation picks by, when the run left `objective` null: the share of people right on a table with
    counts or shares (the figure the margin reports for it), accuracy elsewhere. A people-weighted objective on a
    table without either is refused: every name is one person there."""
    if cfg.objective is not None:
        if cfg.objective == "val/person_acc" and not shares_or_counts:
            raise UserError("objective=val/person_acc needs a table with counts or shares (data.weight_column or "
                            "data.share_columns): use objective=val/acc")
        return None
    if shares_or_counts:
        return Pick("objective", "val/person_acc", "a table with counts or shares: validation picks by the share of "
                    "people right, the figure its margin reports")
    return Pick("objective", "val/acc", "one label per name and no counts: validation picks by accuracy")


def describe(picks: list[Pick]) -> str:
    """The picks grouped by their reason, in one line: what train.log and the model card say."""
    by_reason: dict[str, list[str]] = {}
    for pick in picks:
        by_reason.setdefault(pick.why, []).append(f"{pick.key}={pick.value}")
    return "; ".join(f"{', '.join(keys)} ({why})" for why, keys in by_reason.items())

