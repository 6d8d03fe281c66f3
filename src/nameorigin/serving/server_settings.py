"""How the server takes its load, stated apart from the server itself so the command's defaults can be read
without LitServe installed."""

from __future__ import annotations

from dataclasses import dataclass

MAX_NAMES = 10_000  # names per request
MAX_BODY_BYTES = 4 * 2**20  # 10,000 names of a few hundred bytes each fit; a larger body is answered 413
# Chosen by measurement (docs/serving.md "Over HTTP"): a batch of up to 32 requests, gathered for at most 2 ms (a
# lone request waits the whole batch_timeout, so it stays small beside the 10 ms one-name budget), and two model
# workers of one torch thread each, so one computes while the other gathers its next batch.
MAX_BATCH_SIZE, BATCH_TIMEOUT, WORKERS, THREADS = 32, 0.002, 2, 1
REQUEST_TIMEOUT = 30.0  # seconds a request may wait for its answer


@dataclass(frozen=True)
class ServerSettings:
    """How the server takes its load: the limits on a request, LitServe's batching, its model workers and their
    threads, the API key (None: /predict is open) and the seconds a request may wait."""

    max_names: int = MAX_NAMES
    max_body_bytes: int = MAX_BODY_BYTES
    max_batch_size: int = MAX_BATCH_SIZE
    batch_timeout: float = BATCH_TIMEOUT
    workers: int = WORKERS
    threads: int = THREADS
    api_key: str | None = None
    timeout: float = REQUEST_TIMEOUT
