"""Scoring a dataset past one machine with Ray Data. NameScorer is a callable class for `Dataset.map_batches`:
Ray runs it as a pool of actors, so each loads the model once, and streams the blocks through them. A batch comes
back with the prediction columns of the one prediction schema (predict_frame's), each distinct name of the batch
scored once.

    import ray
    from nameorigin.serving.ray_data import NameScorer
    ds = ray.data.read_parquet("s3://bucket/people/")
    ds.map_batches(NameScorer, fn_constructor_kwargs={"model": "/shared/refit.ckpt", "column": "surname"},
                   batch_format="pandas", batch_size=65_536, concurrency=8).write_parquet("s3://bucket/scored/")

Ray is the optional [ray] extra, imported only by score_dataset; the rest of the package never imports it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

from nameorigin.base.errors import UserError
from nameorigin.serving.frame import predict_frame
from nameorigin.serving.predict import Predictor

RAY_BATCH_ROWS = 65_536  # rows per map_batches call: a name repeated across batches is scored once per batch
# Reading and writing Parquet are given no CPU of Ray's accounting, and the actor pool starts at one actor and
# grows to `concurrency`: with every CPU held by a scoring actor (one per core), the task that lists the input files
# (which always asks for a CPU) and the read tasks would wait for ever behind the actors they feed. Ray Data's
# backpressure still bounds how many I/O tasks run.
IO_CPUS = 0


class NameScorer:
    """One actor's scorer. `model`: the path of a .ckpt, .pt2 or .onnx every worker can read (shared storage), or a
    .ckpt's bytes, which Ray ships to the actors through its object store. The options are predict_frame's; a
    prior must be fixed (a tensor, "uniform" or a file): an estimate belongs to the whole dataset, not a batch.
    `threads`: torch's intra-op threads per actor (None leaves torch's default)."""

    def __init__(self, model: str | Path | bytes, column: str, top_k: int = 1, coverage: float | None = None,
                 explain: bool = False, abstain: bool = True, max_set_size: int | None = None, prior: Any = None,
                 threads: int | None = None):
        if isinstance(prior, str) and prior == "estimate":
            raise UserError("prior='estimate' would estimate a mix per batch: estimate it once over the dataset "
                            "(Predictor.estimate_prior) and pass the tensor, or pass a prior file")
        if threads:
            torch.set_num_threads(threads)
        self.predictor = load_model(model)
        if coverage is not None:
            self.predictor.set_threshold(coverage)  # an unstored level fails when the actor starts, not per batch
        self.column = column
        self.options = {"top_k": top_k, "coverage": coverage, "explain": explain, "abstain": abstain,
                        "max_set_size": max_set_size, "prior": prior}

    def __call__(self, batch: Any) -> Any:
        # markers: a Parquet cell spelling "NaN" or "NULL" is answered as the table command answers it.
        return predict_frame(batch, self.column, self.predictor, markers=True, **self.options)


def load_model(model: str | Path | bytes) -> Predictor:
    if not isinstance(model, bytes):
        return Predictor.load(model)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.ckpt"
        path.write_bytes(model)
        return Predictor.load(path)


def user_error_of(error: BaseException) -> UserError | None:
    """The UserError a failed Ray task or actor carries (Ray wraps what the worker raised), or None."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, UserError):
            return error
        cause = getattr(error, "cause", None)
        error = cause if isinstance(cause, BaseException) else error.__cause__
    return None


def score_dataset(model: str | Path, source: str, out: str, column: str, concurrency: int = 2,
                  batch_rows: int = RAY_BATCH_ROWS, threads: int | None = None, ship_model: bool = False,
                  preserve_order: bool = True, **options: Any) -> None:
    """Read Parquet at `source` (a file, folder or object-store URI), score `column`, write Parquet files under
    `out` (in the input's row order unless `preserve_order` is False). The model, the options and the column are
    checked here first, so a mistake is one line before any actor starts. Runs on whatever cluster ray.init()
    joined (a local one when none is running)."""
    try:
        import ray
    except ImportError:
        raise UserError("scoring with Ray needs Ray Data: pip install 'nameorigin[ray]'") from None
    NameScorer(model, column, **options)  # a bad model or option: one line here, not a dead actor's traceback
    scorer_args = {"model": Path(model).read_bytes() if ship_model else str(model), "column": column,
                   "threads": threads, **options}
    dataset = ray.data.read_parquet(source, num_cpus=IO_CPUS)
    columns = dataset.schema().names
    if column not in columns:
        raise UserError(f"column {column!r} is not in {source}: choose one of {', '.join(map(repr, columns))}")
    ray.data.DataContext.get_current().execution_options.preserve_order = preserve_order
    scored = dataset.map_batches(NameScorer, fn_constructor_kwargs=scorer_args, batch_format="pandas",
                                 batch_size=batch_rows, num_cpus=threads or 1,
                                 compute=ray.data.ActorPoolStrategy(min_size=1, max_size=concurrency))
    try:
        scored.write_parquet(out, ray_remote_args={"num_cpus": IO_CPUS})
    except Exception as error:
        cause = user_error_of(error)
        if cause is None:
            raise
        raise UserError(str(cause)) from None
