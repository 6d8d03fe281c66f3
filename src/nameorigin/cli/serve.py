"""Serve a model over HTTP with LitServe: POST /predict (JSON in, the fields of `nameorigin-predict --format json`
out), GET /health, GET /info and the page at GET / (docs/serving.md "Over HTTP").

  nameorigin-serve outputs/<run>/checkpoints/refit.ckpt              # http://127.0.0.1:8000/
  curl -s localhost:8000/predict -d '{"names": ["Nakamura"], "coverage": 0.9}'
  NAMEORIGIN_API_KEY=... nameorigin-serve model.onnx --host 0.0.0.0  # every machine that reaches this one

Set NAMEORIGIN_API_KEY to require that key in the X-API-Key header of every POST /predict.
"""

from __future__ import annotations

import argparse
import os
import sys

from nameorigin.base.errors import exits_2_on_user_error
from nameorigin.base.extras import missing_extra
from nameorigin.serving.predict import newest_checkpoint

HOSTS = ("127.0.0.1", "0.0.0.0", "::")  # what LitServe binds


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    try:
        from nameorigin.serving.server import BATCH_TIMEOUT, MAX_BATCH_SIZE, MAX_BODY_BYTES, MAX_NAMES, THREADS, WORKERS
    except ImportError as error:
        raise missing_extra("nameorigin-serve", "serve", error) from None
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a .ckpt written by train.py, a .pt2/.onnx from nameorigin-export, or "
                        "'latest' for the newest run's model")
    parser.add_argument("--host", default="127.0.0.1", choices=HOSTS,
                        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 or :: for every "
                        "machine that can reach it, with a warning)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on, 1024-65535 (default 8000)")
    parser.add_argument("--max-names", type=int, default=MAX_NAMES,
                        help=f"names per request; more is refused with 422 (default {MAX_NAMES:,})")
    parser.add_argument("--max-body-mb", type=float, default=MAX_BODY_BYTES / 2**20,
                        help=f"largest request body in MiB; larger is refused with 413 (default "
                        f"{MAX_BODY_BYTES / 2**20:g})")
    parser.add_argument("--max-batch-size", type=int, default=MAX_BATCH_SIZE,
                        help=f"requests answered in one batch (default {MAX_BATCH_SIZE})")
    parser.add_argument("--batch-timeout", type=float, default=BATCH_TIMEOUT,
                        help=f"seconds a batch waits for more requests (default {BATCH_TIMEOUT:g})")
    parser.add_argument("--workers", type=int, default=WORKERS,
                        help=f"model worker processes, each with its own copy of the model (default {WORKERS})")
    parser.add_argument("--threads", type=int, default=THREADS,
                        help=f"torch threads per model worker (default {THREADS}; 0: torch's own choice)")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds a request may wait for its answer before a 504 (default 30)")
    parser.add_argument("--outputs", default="outputs", help="where 'latest' looks for runs (default outputs)")
    parser.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"),
                        help="the server's log level (default warning)")
    args = parser.parse_args(argv)
    if not 1024 <= args.port <= 65535:
        parser.error(f"--port {args.port} must be between 1024 and 65535")
    for flag in ("max_names", "max_batch_size", "workers"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.max_body_mb <= 0 or args.batch_timeout < 0 or args.timeout <= 0 or args.threads < 0:
        parser.error("--max-body-mb and --timeout must be positive, --batch-timeout and --threads at least 0")
    return args


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from nameorigin.serving.server import API_KEY_ENV, ServerSettings, build_server

    model = str(newest_checkpoint(args.outputs)) if args.model == "latest" else args.model
    key = os.environ.get(API_KEY_ENV) or None
    if args.host != "127.0.0.1":
        guard = "POST /predict needs the API key" if key else f"no API key is set ({API_KEY_ENV})"
        print(f"warning: listening on {args.host}: every machine that can reach this one can query the model; "
              f"{guard}", file=sys.stderr)
    server = build_server(model, ServerSettings(args.max_names, int(args.max_body_mb * 2**20), args.max_batch_size,
                                                args.batch_timeout, args.workers, args.threads, key, args.timeout))
    print(f"serving {model} on http://{'127.0.0.1' if args.host == '127.0.0.1' else args.host}:{args.port}/ "
          "(POST /predict, GET /health); Ctrl+C stops", file=sys.stderr, flush=True)
    server.run(host=args.host, port=args.port, generate_client_file=False, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
