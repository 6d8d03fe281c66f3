"""The label mix of a group, with intervals: what share of a table's rows is of each label.

Three estimates from the calibrated probabilities of the rows' names (abstained and unusable rows left out and
counted):
- `mean`: the rows' mean probability per label;
- `em`: the EM estimate of the prior (nameorigin.serving.prior), each name weighted by its rows;
- `adjusted`: the mean probability corrected by the model's soft confusion matrix, measured on held-out names of
  known label (the reference: the validation names as best.ckpt answers them, which every checkpoint of a run
  carries; a refit trained on those names, so its own answers there would be in-sample and its intervals a sixth
  as wide as they should be): E[p | label k] is row k of that matrix, so the
  table's mean probability is its transpose times the true mix, which is solved for (black-box shift estimation
  on probabilities, Lipton et al. 2018).

Only `adjusted` has an interval: a percentile bootstrap that resamples the reference names as well as the table's
rows, so it carries the model's own uncertainty and holds its level (benchmarks.composition_check). An interval
for `mean` or `em` could resample the rows alone; their error is mostly the model's miscalibration, which the
rows cannot show, so such intervals held the true share far less often than they said and are not given.

None covers a drift in how names of one label are spelled (p(name | label) changing between the reference and the
table): every method assumes the table differs from the training data only in its label mix.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from nameorigin.serving.name_columns import (
    check_columns,
    frame_name_columns,
    joined_cells,
    joined_frame_cells,
    table_name_columns,
)
from nameorigin.serving.predict import BATCH_SIZE, Predictor
from nameorigin.serving.prior import estimate_prior
from nameorigin.serving.progress import Progress

METHODS = ("mean", "em", "adjusted")
INTERVAL_METHODS = ("adjusted",)
LEVEL, BOOTSTRAPS = 0.9, 200


@dataclass
class Reference:
    """Held-out names of known label, as the model sees them: their calibrated probabilities and true labels (the
    abstained ones left out, as in a table)."""

    probs: torch.Tensor
    targets: torch.Tensor
    measured_on: str = ""  # which names, answered by which model: stated with every composition

    def confusion(self, weights: torch.Tensor | None = None) -> torch.Tensor:
        """The soft confusion matrix: row k the mean probability vector of the names of label k (the identity's
        row for a label with no name)."""
        labels = self.probs.shape[1]
        weight = torch.ones(len(self.targets)) if weights is None else weights
        sums = torch.zeros(labels, labels).index_add_(0, self.targets, self.probs * weight[:, None])
        counts = torch.zeros(labels).index_add_(0, self.targets, weight)
        eye = torch.eye(labels)
        return torch.where(counts[:, None] > 0, sums / counts.clamp_min(1e-12)[:, None], eye)


@dataclass
class Composition:
    labels: list[str]
    rows: int  # rows counted in the estimates
    abstained: int  # rows whose name the model abstained on, left out
    unusable: int  # rows without a usable name, left out
    estimates: dict[str, list[float]] = field(default_factory=dict)  # method -> share per label
    # method -> (low, high) per label: INTERVAL_METHODS only, the ones whose intervals hold their level
    intervals: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    level: float = LEVEL
    reference: str = ""  # which names measured the adjusted method's confusion, or why there is no adjusted

    def as_dict(self) -> dict:
        return {"labels": self.labels, "rows": self.rows, "abstained": self.abstained, "unusable": self.unusable,
                "level": self.level, "reference": self.reference, "estimates": self.estimates,
                "intervals": {m: [list(pair) for pair in pairs] for m, pairs in self.intervals.items()}}

    def table(self) -> str:
        methods = list(self.estimates)
        head = f"{'label':<14}" + "".join(f" {m + f' ({self.level:.0%} interval)':>30}" if m in self.intervals
                                          else f" {m:>9}" for m in methods)
        lines = [head]
        order = np.argsort(-np.asarray(self.estimates[methods[-1]]))
        for j in order.tolist():
            cells = "".join(f" {self.estimates[m][j]:>9.1%} [{self.intervals[m][j][0]:>6.1%}, "
                            f"{self.intervals[m][j][1]:>6.1%}]" + " " * 3 if m in self.intervals
                            else f" {self.estimates[m][j]:>9.1%}" for m in methods)
            lines.append(f"{self.labels[j]:<14}{cells}")
        lines.append(f"{self.rows:,} rows counted; left out: {self.abstained:,} abstained, {self.unusable:,} without "
                     "a usable name. adjusted's interval resamples the rows and the reference names; mean and em "
                     "have none (their error is the model's miscalibration, which resampling rows cannot show)")
        if self.reference:
            lines.append(f"reference: {self.reference}")
        return "\n".join(lines)


def solve_mix(confusion: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
    """The mix q with confusionᵀ q = mean, clipped at 0 and renormalized (batched over leading dimensions). A
    singular matrix (a resample whose only names of two labels are one name listed under both) takes the
    least-squares solution of smallest norm."""
    system, target = confusion.transpose(-1, -2), mean.unsqueeze(-1)
    solved, info = torch.linalg.solve_ex(system, target)
    if bool((info != 0).any()):
        failed = info != 0
        solved[failed] = torch.linalg.pinv(system[failed]) @ target[failed]
    solved = solved.squeeze(-1).clamp_min(0)
    return solved / solved.sum(-1, keepdim=True).clamp_min(1e-12)


@dataclass(frozen=True)
class Resampling:
    """How the intervals are drawn: their level, the bootstrap replicates, the seed."""

    level: float = LEVEL
    bootstraps: int = BOOTSTRAPS
    seed: int = 0


def estimate(probs: torch.Tensor, counts: torch.Tensor, trained: torch.Tensor, labels: list[str],
             reference: Reference | None = None, resampling: Resampling = Resampling()) -> Composition:
    """The composition of rows whose distinct names have `probs` [n, labels] and row `counts` [n] (the rows left
    out are the caller's to count in)."""
    counts = counts.double()
    total = int(counts.sum())
    level, bootstraps = resampling.level, resampling.bootstraps
    result = Composition(labels, total, 0, 0, level=level,
                         reference=reference.measured_on if reference is not None else "")
    if total == 0:
        return result
    shares = (counts / counts.sum()).float()
    mean = shares @ probs
    em = estimate_prior(probs, trained, counts=counts)  # what --prior estimate finds for these rows
    confusion = reference.confusion() if reference is not None else None
    result.estimates = {"mean": mean.tolist(), "em": em.tolist()}
    if confusion is not None:
        result.estimates["adjusted"] = solve_mix(confusion, mean).tolist()
    if reference is None:
        return result
    generator = np.random.default_rng(resampling.seed)
    # The Poisson bootstrap: each name's rows drawn again as Poisson(rows), a multinomial resampling of the rows
    # to within its total, one vectorized draw; and the reference names resampled with them.
    draws = torch.from_numpy(generator.poisson(counts.numpy(), size=(bootstraps, len(counts)))).float()
    weights = draws / draws.sum(-1, keepdim=True).clamp_min(1)
    n = len(reference.targets)
    resampled = torch.from_numpy(generator.multinomial(n, np.full(n, 1 / n), size=bootstraps)).float()
    confusions = torch.stack([reference.confusion(weights) for weights in resampled])
    replicates = solve_mix(confusions, weights @ probs)
    tail = (1 - level) / 2
    low, high = torch.quantile(replicates, torch.tensor([tail, 1 - tail]), dim=0)
    result.intervals["adjusted"] = list(zip(low.tolist(), high.tolist(), strict=True))
    return result


def answered(predictor: Predictor, names: list[str], batch_size: int = BATCH_SIZE,
             full_names: bool = False) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """The calibrated probabilities of `names` and which are usable and which abstained (as a table would
    answer them): probs [n, labels] (zeros where unusable), usable [n], abstained [n]. `full_names`: for a model
    of parts, the names are full names to split (Predictor.as_text)."""
    tokens, lengths, errors = predictor.encode_many(names, full_names)
    usable = np.array([error is None for error in errors], dtype=bool)
    rows = torch.from_numpy(np.flatnonzero(usable))
    probs = torch.zeros(len(names), len(predictor.labels))
    abstained = np.zeros(len(names), dtype=bool)
    if len(rows):
        use_rule = bool(predictor.abstention)
        energy = torch.empty(len(rows)) if use_rule else None
        good = (tokens[rows], lengths[rows])
        probs[rows] = predictor.probabilities(good, batch_size, energy)
        if use_rule:
            from nameorigin.serving.abstain import abstentions

            abstained[rows.numpy()] = abstentions(predictor, good, energy, None, None, batch_size).abstained
    return probs, usable, abstained


def reference_from(predictor: Predictor, pairs: list[tuple[str, str]], abstain: bool = True) -> Reference:
    """A Reference from held-out (name, label) pairs (a name under two labels counts once under each)."""
    probs, usable, abstained = answered(predictor, [name for name, _ in pairs])
    keep = usable & ~abstained if abstain else usable
    targets = torch.tensor([predictor.labels.index(label) for _, label in pairs])
    rows = torch.from_numpy(np.flatnonzero(keep))
    return Reference(probs[rows], targets[rows])


def composition_of(predictor: Predictor, names: list[str], counts: list[int] | np.ndarray,
                   reference: Reference | None = None, abstain: bool = True,
                   resampling: Resampling = Resampling(), full_names: bool = False) -> Composition:
    """The composition of rows given as distinct names with their row counts; `reference`: None leaves the
    adjusted method out."""
    counts = np.asarray(counts, dtype=np.int64)
    probs, usable, abstained = answered(predictor, names, full_names=full_names)
    left_out = abstained if abstain else np.zeros_like(abstained)
    keep = usable & ~left_out
    rows = torch.from_numpy(np.flatnonzero(keep))
    found = estimate(probs[rows], torch.from_numpy(counts[keep]), predictor.trained_prior, list(predictor.labels),
                     reference, resampling)
    found.abstained, found.unusable = int(counts[usable & left_out].sum()), int(counts[~usable].sum())
    return found


def distinct_cells(cells: dict, normalize: str) -> tuple[list[str], np.ndarray, int]:
    """Cell -> rows, pooled by normalized name: the names, their row counts, and the rows holding a
    missing-value marker or nothing (unusable)."""
    from nameorigin.serving.distinct import DistinctNames

    groups = DistinctNames.group(list(cells), list(cells.values()), normalize)
    names = [key for key in groups.keys if isinstance(key, str)]
    counts = np.array([n for key, n in zip(groups.keys, groups.counts, strict=True) if isinstance(key, str)])
    markers = int(sum(n for key, n in zip(groups.keys, groups.counts, strict=True) if not isinstance(key, str)))
    return names, counts, markers


def table_composition(predictor: Predictor, source: str, column: str | list[str], delimiter: str | None = None,
                      reference: Reference | None = None, full_names: bool = False, **options) -> Composition:
    """The composition of a table file's rows (any table format, streamed through the one table reader); several
    columns: a name's parts, given first."""

    from nameorigin.base.tables import TableReader

    reader = TableReader(source, "--file", delimiter)
    columns = table_name_columns(reader, column, predictor.part_names, full_names)
    cells: Counter = Counter()
    with Progress("rows counted", reader.row_count()) as progress:
        for chunk in reader.chunks(columns):
            if len(columns) == 1:
                count_cells(cells, chunk, columns[0])
            else:
                cells.update(joined_cells([chunk.cells(name) for name in columns]))
            progress.advance(len(chunk))
    return cells_composition(predictor, cells, reference, full_names=full_names, **options)


def count_cells(cells: Counter, chunk: Any, column: str) -> None:
    """Add a chunk's cells of `column` to `cells`."""
    if hasattr(chunk, "batch"):  # Parquet: counted by pyarrow, each distinct cell once into Python
        import pyarrow as pa
        import pyarrow.compute as pc

        counted = pc.value_counts(chunk.batch.column(column).cast(pa.string()))
        cells.update(dict(zip(counted.field("values").to_pylist(), counted.field("counts").to_pylist(), strict=True)))
    else:
        cells.update(chunk.cells(column))


def cells_composition(predictor: Predictor, cells: dict, reference: Reference | None = None,
                      **options) -> Composition:
    names, counts, markers = distinct_cells(cells, predictor.normalize)
    found = composition_of(predictor, names, counts, reference, **options)
    found.unusable += markers
    return found


def frame_composition(frame, column: str | list[str], predictor: Predictor | str, reference: Reference | None = None,
                      full_names: bool = False, **options) -> Composition:
    """predict_frame's counterpart: the composition of a DataFrame column's rows (blank, NaN and None cells
    counted as unusable); the adjusted method from `reference`, else from the one the checkpoint carries."""
    import pandas as pd


    columns = frame_name_columns(frame, column)
    predictor = Predictor.load(predictor) if not isinstance(predictor, Predictor) else predictor
    check_columns(predictor.part_names, columns, full_names)
    if len(columns) > 1:
        cells = Counter(joined_frame_cells(frame, columns))
        return cells_composition(predictor, cells, reference or stored_reference(predictor), **options)
    counts = frame[columns[0]].value_counts(dropna=False)
    cells = {None if (not isinstance(cell, str) and bool(pd.isna(cell))) else cell: int(n)
             for cell, n in counts.items()}
    return cells_composition(predictor, cells, reference or stored_reference(predictor), full_names=full_names,
                             **options)


def stored_reference(predictor: Predictor) -> Reference | None:
    """The held-out reference the checkpoint carries (nameorigin.model.artifacts.HeldOutReference), or None."""
    stored = predictor.calibration.reference if predictor.calibration else None
    if stored is None or not stored.targets:
        return None
    sample = f" (a label-stratified sample of {len(stored.targets):,})" if len(stored.targets) < stored.held_out \
        else ""
    return Reference(torch.tensor(stored.probs, dtype=torch.float32), torch.tensor(stored.targets),
                     f"{stored.held_out:,} names of {stored.fitted_on}{sample}")


def checkpoint_reference(predictor: Predictor, root: str | None) -> tuple[Reference | None, str]:
    """The reference for the adjusted method and what it is: the one the checkpoint carries; for a checkpoint
    without one, the validation names of the corpus or table it trained on (root, or the shipped corpus when it
    is the one), answered now, unless the model trained on them (a refit), which leaves the adjusted method out."""
    from nameorigin.analysis.evaluate import checkpoint_splits
    from nameorigin.base.errors import UserError
    from nameorigin.data.batching import is_refit
    from nameorigin.data.corpus import shipped_corpus

    refit = is_refit(predictor.data_settings)
    if refit and root:
        raise UserError("--reference: this model trained on its corpus' validation names (a refit), so its "
                        "confusion there is in-sample and its intervals too narrow; drop --reference (the checkpoint "
                        "carries best.ckpt's held-out names) or pass the run's best.ckpt")
    stored = stored_reference(predictor)
    if stored is not None and not root:
        return stored, stored.measured_on
    if refit:
        return None, ("no adjusted estimate: this refitted model carries no held-out reference and trained on its "
                      "validation names; the run's best.ckpt gives one")
    try:
        splits = checkpoint_splits(predictor, root or shipped_corpus())
    except UserError:
        if root:
            raise
        return None, "no adjusted estimate: the checkpoint carries no reference; pass --reference with its corpus"
    reference = reference_from(predictor, splits["val"])
    reference.measured_on = f"{len(reference.targets):,} validation names of {root or 'the shipped corpus'}, " \
                            "answered by this model (held out from it)"
    return reference, reference.measured_on
