"""`nameorigin ray-score`: a Parquet dataset scored into a Parquet dataset with Ray Data, a pool of actors each
loading the model once, on this machine or on the cluster that --address joins. Every row comes back with the
prediction columns of `nameorigin predict --file --column` (docs/http-and-clusters.md "Past one machine")."""

import time
from typing import Annotated, Any

import typer

from nameorigin.base.extras import require_extra
from nameorigin.cli.app import TABLE_TOP_K, predict_options, takes_options
from nameorigin.serving.progress import wanted
from nameorigin.serving.ray_data import RAY_BATCH_ROWS, ActorPool, score_dataset


@takes_options(("top_k", "coverage", "abstain", "max_set_size", "prior", "labels"))
def ray_score(model: Annotated[str, typer.Argument(help="a .ckpt, .pt2 or .onnx; on a cluster, a path every worker "
                                                   "can read, or a .ckpt with --ship-model", show_default=False)],
              source: Annotated[str, typer.Argument(help="Parquet input: a file, a folder of files, or an "
                                                    "object-store URI", show_default=False)],
              out: Annotated[str, typer.Argument(help="folder (or object-store URI) the scored Parquet files are "
                                                 "written to", show_default=False)],
              column: Annotated[list[str], typer.Option(help="the column holding the names; once per part for a "
                                                        "model of parts, given first", show_default=False)],
              concurrency: Annotated[int, typer.Option(min=1, help="scoring actors (one per core)")] = 2,
              threads: Annotated[int, typer.Option(min=1, help="torch threads per actor")] = 1,
              batch_rows: Annotated[int, typer.Option(min=1, help="rows per batch given to an actor; each "
                                                      "distinct name of a batch is scored once")] = RAY_BATCH_ROWS,
              ship_model: Annotated[bool, typer.Option("--ship-model", help="send the .ckpt's bytes to the actors "
                                                       "through Ray's object store instead of a path")] = False,
              address: Annotated[str | None, typer.Option(help="the Ray cluster to join ('auto' for the one this "
                                                          "machine belongs to); default: start a local one")] = None,
              num_cpus: Annotated[int | None, typer.Option(min=1, help="CPUs of the local cluster (default: all "
                                                           "of this machine)")] = None,
              options: Any = None) -> int:
    """Score a Parquet dataset with Ray Data, on this machine or a cluster."""
    ray = require_extra("ray", "ray", "nameorigin ray-score")
    require_extra("ray.data", "ray", "nameorigin ray-score")
    chosen = predict_options(options, TABLE_TOP_K)
    # Ray Data's own bars on a terminal (nameorigin.serving.progress's rule); the summary line alone elsewhere.
    ray.data.DataContext.get_current().enable_progress_bars = wanted()
    started = not ray.is_initialized()  # called from a program already on a cluster: use it, leave it running
    if started:
        ray.init(address=address, num_cpus=None if address else num_cpus, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    try:
        start = time.perf_counter()
        score_dataset(model, source, out, column, ActorPool(concurrency, batch_rows, threads, ship_model), chosen)
        print(f"scored {source} into {out} in {time.perf_counter() - start:.1f} s ({concurrency} actors)")
    finally:
        if started:
            ray.shutdown()
    return 0
