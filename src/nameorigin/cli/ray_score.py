"""Score a Parquet dataset into a Parquet dataset with Ray Data: a pool of actors, each loading the model once, on
this machine or on the cluster that --address joins. Every row comes back with the prediction columns of
`nameorigin-predict --file --column` (docs/serving.md "Past one machine").

  nameorigin-ray-score refit.ckpt people.parquet scored/ --column surname
  nameorigin-ray-score /shared/refit.ckpt s3://bucket/people/ s3://bucket/scored/ --column surname --address auto
"""

from __future__ import annotations

import argparse
import sys
import time

from nameorigin.base.errors import exits_2_on_user_error
from nameorigin.base.extras import require_extra
from nameorigin.cli.flags import TABLE_TOP_K, add_prediction_flags, options_from
from nameorigin.serving.ray_data import RAY_BATCH_ROWS, ActorPool, score_dataset


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a .ckpt, .pt2 or .onnx; on a cluster, a path every worker can read, or "
                        "a .ckpt with --ship-model")
    parser.add_argument("source", help="Parquet input: a file, a folder of files, or an object-store URI")
    parser.add_argument("out", help="folder (or object-store URI) the scored Parquet files are written to")
    parser.add_argument("--column", required=True, help="the column holding the names")
    add_prediction_flags(parser, ["top_k", "coverage", "abstain", "max_set_size", "prior"])
    parser.add_argument("--concurrency", type=int, default=2,
                        help="scoring actors (default 2: one per core of a 2-core machine)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads per actor (default 1: the actors share out the cores)")
    parser.add_argument("--batch-rows", type=int, default=RAY_BATCH_ROWS,
                        help=f"rows per batch given to an actor (default {RAY_BATCH_ROWS:,}); each distinct name "
                        "of a batch is scored once")
    parser.add_argument("--ship-model", action="store_true",
                        help="send the .ckpt's bytes to the actors through Ray's object store instead of a path "
                        "(for clusters without shared storage)")
    parser.add_argument("--address", help="the Ray cluster to join ('auto' for the one this machine belongs to); "
                        "default: start a local one")
    parser.add_argument("--num-cpus", type=int, help="CPUs of the local cluster (default: all of this machine)")
    args = parser.parse_args(argv)
    for flag in ("concurrency", "threads", "batch_rows"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    return args


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ray = require_extra("ray", "ray", "nameorigin-ray-score")
    require_extra("ray.data", "ray", "nameorigin-ray-score")
    ray.data.DataContext.get_current().enable_progress_bars = False  # the command prints its own one line
    started = not ray.is_initialized()  # called from a program already on a cluster: use it, leave it running
    if started:
        ray.init(address=args.address, num_cpus=None if args.address else args.num_cpus, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    try:
        start = time.perf_counter()
        pool = ActorPool(args.concurrency, args.batch_rows, args.threads, args.ship_model)
        score_dataset(args.model, args.source, args.out, args.column, pool, options_from(args, TABLE_TOP_K))
        print(f"scored {args.source} into {args.out} in {time.perf_counter() - start:.1f} s "
              f"({args.concurrency} actors)")
    finally:
        if started:
            ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
