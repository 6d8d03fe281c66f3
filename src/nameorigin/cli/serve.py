"""`nameorigin serve`: a model over HTTP with LitServe: POST /predict (JSON in, the fields of `nameorigin predict
--format json` out), GET /health, GET /info and the page at GET / (docs/serving.md "Over HTTP").

Set NAMEORIGIN_API_KEY to require that key in the X-API-Key header of every POST /predict."""

import os
import sys
from pathlib import Path
from typing import Annotated, Literal

import typer

from nameorigin.base.extras import missing_extra
from nameorigin.cli.predict import Outputs, model_path
from nameorigin.serving.server_settings import (
    BATCH_TIMEOUT,
    MAX_BATCH_SIZE,
    MAX_BODY_BYTES,
    MAX_NAMES,
    REQUEST_TIMEOUT,
    THREADS,
    WORKERS,
)

MAX_BODY_MB = MAX_BODY_BYTES / 2**20


def serve(model: Annotated[str, typer.Argument(help="a .ckpt written by train.py, a .pt2/.onnx from nameorigin "
                                               "export, or 'latest' for the newest run's model", show_default=False)],
          host: Annotated[Literal["127.0.0.1", "0.0.0.0", "::"], typer.Option(
              help="address to listen on: this machine only, or (0.0.0.0, ::) every machine that can reach it, "
              "with a warning")] = "127.0.0.1",
          port: Annotated[int, typer.Option(min=1024, max=65535, help="port to listen on")] = 8000,
          max_names: Annotated[int, typer.Option(min=1, help="names per request; more is refused with "
                                                 "422")] = MAX_NAMES,
          max_body_mb: Annotated[float, typer.Option(min=0.001, help="largest request body in MiB; larger is "
                                                     "refused with 413")] = MAX_BODY_MB,
          max_batch_size: Annotated[int, typer.Option(min=1, help="requests answered in one batch")] = MAX_BATCH_SIZE,
          batch_timeout: Annotated[float, typer.Option(min=0, help="seconds a batch waits for more "
                                                       "requests")] = BATCH_TIMEOUT,
          workers: Annotated[int, typer.Option(min=1, help="model worker processes, each with its own copy of the "
                                               "model")] = WORKERS,
          threads: Annotated[int, typer.Option(min=0, help="torch threads per model worker (0: torch's own "
                                               "choice)")] = THREADS,
          timeout: Annotated[float, typer.Option(min=0.001, help="seconds a request may wait for its answer before "
                                                 "a 504")] = REQUEST_TIMEOUT,
          log_level: Annotated[Literal["debug", "info", "warning", "error"], typer.Option(
              help="the server's log level")] = "warning",
          outputs: Outputs = Path("outputs")) -> int:
    """Serve a model over HTTP: an API (POST /predict) and a page at http://127.0.0.1:8000/, on LitServe."""
    try:
        from nameorigin.serving.server import API_KEY_ENV, ServerSettings, build_server
    except ImportError as error:
        raise missing_extra("nameorigin serve", "serve", error) from None
    path = model_path(model, outputs)
    key = os.environ.get(API_KEY_ENV) or None
    if host != "127.0.0.1":
        guard = "POST /predict needs the API key" if key else f"no API key is set ({API_KEY_ENV})"
        print(f"warning: listening on {host}: every machine that can reach this one can query the model; {guard}",
              file=sys.stderr)
    server = build_server(path, ServerSettings(max_names, int(max_body_mb * 2**20), max_batch_size, batch_timeout,
                                               workers, threads, key, timeout))
    print(f"serving {path} on http://{host}:{port}/ (POST /predict, GET /health); Ctrl+C stops", file=sys.stderr,
          flush=True)
    server.run(host=host, port=port, generate_client_file=False, log_level=log_level)
    return 0
