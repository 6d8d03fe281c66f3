"""LitServe's own floor on this machine: the same server setup as `nameorigin serve` (two workers, batches of up to
32 requests within 2 ms) around a model that answers nothing, loaded with the same requests as
benchmarks.serve_load at 32 concurrent requests of 64 names. What the HTTP side costs per request here is not the
model's: it is the floor under the server's names per CPU-second.

  python -m benchmarks.serve_floor
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import litserve as ls

from benchmarks import clone_env
from benchmarks.serve_load import free_port, group_cpu_seconds, level, stop_server
from nameorigin.serving.server_settings import BATCH_TIMEOUT, MAX_BATCH_SIZE, WORKERS


class Echo(ls.LitAPI):
    """Decodes a request, answers each name with an empty object: LitServe's path without a model."""

    def setup(self, device: str) -> None:
        pass

    def decode_request(self, request: dict) -> list:
        return request["names"]

    def predict(self, batch: list) -> list:
        return [[{} for _ in names] for names in batch]

    def encode_response(self, output: list) -> dict:
        return {"predictions": output}


def serve(port: int) -> None:
    api = Echo(max_batch_size=MAX_BATCH_SIZE, batch_timeout=BATCH_TIMEOUT)
    ls.LitServer(api, accelerator="cpu", devices=1, workers_per_device=WORKERS).run(
        port=port, generate_client_file=False, log_level="warning")


def main() -> int:
    import urllib.request

    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", f"from benchmarks.serve_floor import serve; serve({port})"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                              env=clone_env())
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                    break
            except OSError:
                time.sleep(0.2)
        names = [f"Name{i}" for i in range(64 * 2000)]
        url = f"http://127.0.0.1:{port}/predict"
        asyncio.run(level(url, names, 32, 64, 300, 5))
        cpu = group_cpu_seconds(server.pid)
        result = asyncio.run(level(url, names, 32, 64, 2000, 10))
        result["server_cpu_s"] = group_cpu_seconds(server.pid) - cpu
        result["server_cpu_ms_per_request"] = 1000 * result["server_cpu_s"] / result["requests"]
        print(json.dumps(result, indent=1))
    finally:
        stop_server(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
