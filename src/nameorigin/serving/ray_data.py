"""Scoring a dataset past one machine with Ray Data. NameScorer is a callable class for `Dataset.map_batches`:
Ray runs it as a pool of actors, so each loads the model once, and streams the blocks through them. A batch comes
back with the prediction columns of the table command (`nameorigin predict --file --column`, the one prediction
schema). Each actor keeps the answers it has given, as the table command does, so a name is scored at most once
per actor however many batches hold it.

    import ray
    from nameorigin import PredictOptions
    from nameorigin.serving.ray_data import NameScorer
    ds = ray.data.read_parquet("s3://bucket/people/")
    ds.map_batches(NameScorer, fn_constructor_kwargs={"model": "/shared/refit.ckpt", "column": "surname",
                                                      "options": PredictOptions(top_k=2)},
                   batch_format="pyarrow", batch_size=262_144,
                   compute=ray.data.ActorPoolStrategy(min_size=1, max_size=8)).write_parquet("s3://bucket/scored/")

Ray is the optional [ray] extra, imported only by score_dataset; the rest of the package never imports it.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nameorigin.base.atomic import write_folder_atomically
from nameorigin.base.errors import UserError
from nameorigin.base.extras import require_extra
from nameorigin.serving.name_columns import check_columns, joined_cells, name_columns
from nameorigin.serving.options import TABLE_OPTIONS, PredictOptions, options_of
from nameorigin.serving.predict import Predictor
from nameorigin.serving.schema import table_columns
from nameorigin.serving.table import AnswerBook

RAY_BATCH_ROWS = 262_144  # rows per map_batches call
# Reading and writing Parquet are given no CPU of Ray's accounting: with every CPU held by a scoring actor (one per
# core), a read task that asked for one would wait for ever behind the actors it feeds. Ray Data's backpressure
# still bounds how many run.
IO_CPUS = 0


class NameScorer:
    """One actor's scorer, for `batch_format="pyarrow"`. `model`: the path of a .ckpt, .pt2 or .onnx every worker
    can read (shared storage), or a .ckpt's bytes, which Ray ships to the actors through its object store.
    `options`: as for tables; a prior must be fixed (a tensor, "uniform" or a file): an estimate belongs to the
    whole dataset, not a batch. `threads`: torch's intra-op threads per actor (None leaves torch's default)."""

    def __init__(self, model: str | Path | bytes, column: str | list[str], options: PredictOptions | None = None,
                 threads: int | None = None, **settings: Any):
        options = options_of(options, settings, TABLE_OPTIONS)
        if options.estimates_prior:
            raise UserError("prior 'estimate' would estimate a mix per batch: estimate it once over the dataset "
                            "(Predictor.estimate_prior) and pass the tensor, or pass a prior file")
        if threads:
            torch.set_num_threads(threads)
        self.predictor = load_model(model)
        self.columns = name_columns(column)  # the names' column, or a name's parts' columns, given first
        check_columns(self.predictor.part_names, self.columns, options.full_names)
        # Checked against the model here: a bad option fails when the actor starts, not per batch.
        self.book = AnswerBook(self.predictor, options, typed=True, merge=True)
        self.shape = self.book.shape

    def __call__(self, batch: Any) -> Any:
        """A pyarrow Table with the prediction columns appended (plain, not dictionary-encoded: batches from
        different actors are concatenated and written together)."""
        for column in self.columns:
            if column not in batch.column_names:
                raise UserError(f"column {column!r} is not in the batch: choose one of "
                                f"{', '.join(map(repr, batch.column_names))}")
        import pyarrow as pa

        names = [batch.column(column).combine_chunks().cast(pa.string()) for column in self.columns]
        names = names[0] if len(names) == 1 else pa.array(joined_cells([part.to_pylist() for part in names]),
                                                          pa.string())
        entries = self.book.answer_column(names)
        for name, array in zip(table_columns(self.shape), self.book.arrays(entries, dictionaries=False),
                               strict=True):
            batch = batch.append_column(name, array)
        return batch


def load_model(model: str | Path | bytes) -> Predictor:
    if not isinstance(model, bytes):
        return Predictor.load(model)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.ckpt"
        path.write_bytes(model)
        return Predictor.load(path)


def parquet_columns(source: str) -> list[str]:
    """The column names of a Parquet file, folder or object-store URI, read from its metadata alone."""
    import pyarrow.dataset as pds

    try:
        return pds.dataset(source, format="parquet").schema.names
    except (OSError, ValueError) as error:  # a missing path, or files that are not Parquet
        reason = str(error).splitlines()[0][:160] if str(error) else type(error).__name__
        raise UserError(f"{source} cannot be read as Parquet ({reason}): pass a Parquet file, folder or URI") from None


def user_error_of(error: BaseException) -> UserError | None:
    """The UserError a failed Ray task or actor carries (Ray wraps what the worker raised), or None."""
    return cause_of(error, UserError)


def cause_of(error: BaseException, kind: type) -> Any:
    """The exception of `kind` a failed Ray task or actor carries (Ray wraps what the worker raised), or None."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, kind):
            return error
        cause = getattr(error, "cause", None)
        error = cause if isinstance(cause, BaseException) else error.__cause__
    return None


@dataclass(frozen=True)
class ActorPool:
    """How the scoring runs on the cluster: `concurrency` actors of `threads` torch threads each, `batch_rows`
    rows a call, the model sent through the object store (`ship_model`) or read from a shared path, and the
    input's row order kept or not."""

    concurrency: int = 2
    batch_rows: int = RAY_BATCH_ROWS
    threads: int | None = None
    ship_model: bool = False
    preserve_order: bool = True


def score_dataset(model: str | Path, source: str, out: str, column: str | list[str], pool: ActorPool = ActorPool(),
                  options: PredictOptions | None = None, **settings: Any) -> None:
    """Read Parquet at `source` (a file, folder or object-store URI), score `column`, write Parquet files under
    `out` (in the input's row order unless the pool says otherwise). The model, the options and the column are
    checked here first, so a mistake is one line before any actor starts. Runs on whatever cluster ray.init()
    joined (a local one when none is running)."""
    ray = require_extra("ray", "ray", "scoring with Ray")
    require_extra("ray.data", "ray", "scoring with Ray")
    options = options_of(options, settings, TABLE_OPTIONS)
    NameScorer(model, column, options)  # a bad model or option: one line here, not a dead actor's traceback
    scorer_args = {"model": Path(model).read_bytes() if pool.ship_model else str(model), "column": column,
                   "threads": pool.threads, "options": options}
    columns = parquet_columns(source)
    for name in name_columns(column):
        if name not in columns:
            raise UserError(f"column {name!r} is not in {source}: choose one of {', '.join(map(repr, columns))}")
    cpus = ray.cluster_resources().get("CPU", 0)
    actors, threads = pool.concurrency, pool.threads or 1
    if actors * threads > cpus:  # the pool would wait for ever for CPUs the cluster does not have
        raise UserError(f"{actors} actors of {threads} threads need {actors * threads} CPUs and the cluster has "
                        f"{cpus:g}: ask for fewer actors or threads")
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = pool.preserve_order
    # The first read path: its read tasks take the CPU count they are given, and it splits a large row group into
    # blocks the actors share. The newer one lists files in a task that always asks for a CPU.
    context.use_datasource_v2 = False
    dataset = ray.data.read_parquet(source, num_cpus=IO_CPUS)
    scored = dataset.map_batches(NameScorer, fn_constructor_kwargs=scorer_args, batch_format="pyarrow",
                                 batch_size=pool.batch_rows, num_cpus=pool.threads or 1,
                                 compute=ray.data.ActorPoolStrategy(size=pool.concurrency))
    def write(folder: Path | str) -> None:
        try:
            scored.write_parquet(str(folder), ray_remote_args={"num_cpus": IO_CPUS})
        except Exception as error:
            if (cause := user_error_of(error)) is not None:
                raise UserError(str(cause)) from None
            if (failed := cause_of(error, OSError)) is not None:  # a worker's failed write (a full disk)
                raise failed from None
            raise

    if "://" in out:  # an object store: written in place, as its own atomic puts
        write(out)
    else:  # a local folder: the previous one stays whole until the new one is complete
        write_folder_atomically(out, write)
