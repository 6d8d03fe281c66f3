"""Load-test `nameorigin serve` on this machine: start it on a free port of 127.0.0.1, send requests at
concurrency 1, 8, 32 and 64 with 1 and 64 names each (bounded in requests and seconds per level), report p50 / p95 /
p99 latency and names/s beside the in-process Predictor's names/s on the same names, then send hostile requests
and check that each got a 4xx and that /health and a normal answer are unchanged after. The load generator runs
on the same cores as the server, which it slows down.

  python -m benchmarks.serve_load outputs/<run>/checkpoints/refit.ckpt
  python -m benchmarks.serve_load model.onnx --requests 500 --hostile 2000 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from nameorigin.base.errors import UserError, exits_2_on_user_error
from nameorigin.base.extras import require_extra

if TYPE_CHECKING:
    import aiohttp  # the [serve] extra: imported where the load runs

LEVELS = ((1, 1), (8, 1), (32, 1), (64, 1), (1, 64), (8, 64), (32, 64), (64, 64))  # (concurrency, names a request)
PROBE = ["Nakamura", "Virtanen", "Dovesky", "O'Brien", "Rossi"]


async def timed_post(session: aiohttp.ClientSession, url: str, body: bytes) -> float:
    """Seconds for one valid request, answered and read; any answer but 200 stops the benchmark."""
    start = time.perf_counter()
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as answer:
        await answer.read()
        if answer.status != 200:
            raise UserError(f"the server answered {answer.status} to a valid request under load")
    return time.perf_counter() - start


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(model: str, port: int, extra: list[str], env: dict | None = None) -> subprocess.Popen:
    """`nameorigin serve` in its own process group (the caller kills the group), ready on /health."""
    import urllib.request

    server = subprocess.Popen([sys.executable, "-m", "nameorigin", "serve", model, "--port", str(port), *extra],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                              env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise UserError(f"the server exited ({server.returncode}): {server.stderr.read().decode().strip()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as answer:
                if answer.status == 200:
                    return server
        except OSError:
            time.sleep(0.2)
    stop_server(server)
    raise UserError("the server did not become ready within 120 s")


def stop_server(server: subprocess.Popen) -> None:
    try:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(server.pid, signal.SIGKILL)
    except OSError:
        pass


async def level(url: str, names: list[str], concurrency: int, per_request: int, requests: int,
                seconds: float) -> dict:
    """`concurrency` clients, each sending its next request when the last is answered, until `requests` are sent
    or `seconds` have passed."""
    import aiohttp

    latencies: list[float] = []
    sent = 0
    bodies = [json.dumps({"names": names[i:i + per_request]}).encode()
              for i in range(0, min(len(names), 2000 * per_request), per_request)]
    deadline = time.perf_counter() + seconds

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal sent
        while sent < requests and time.perf_counter() < deadline:
            body = bodies[sent % len(bodies)]
            sent += 1
            latencies.append(await timed_post(session, url, body))

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        async with session.post(url, data=bodies[0], headers={"Content-Type": "application/json"}) as first:
            await first.read()  # the first connection is open before timing starts
        start = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
        wall = time.perf_counter() - start
    cuts = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else latencies * 99
    return {"concurrency": concurrency, "names_per_request": per_request, "requests": len(latencies),
            "p50_ms": 1000 * cuts[49], "p95_ms": 1000 * cuts[94], "p99_ms": 1000 * cuts[98],
            "names_per_s": len(latencies) * per_request / wall}


def hostile_bodies() -> list[tuple[str, bytes, dict]]:
    """(what, body, headers) of requests a server must refuse with a 4xx."""
    json_type = {"Content-Type": "application/json"}
    kinds = [
        ("malformed JSON", b'{"names": ["Nakamura"', json_type),
        ("not JSON", b"names=Nakamura", {"Content-Type": "application/x-www-form-urlencoded"}),
        ("a list, not an object", b'["Nakamura"]', json_type),
        ("names of the wrong type", b'{"names": "Nakamura"}', json_type),
        ("a number among the names", b'{"names": ["Nakamura", 7]}', json_type),
        ("null names", b'{"names": null}', json_type),
        ("top_k as text", b'{"names": ["a"], "top_k": "3"}', json_type),
        ("top_k zero", b'{"names": ["a"], "top_k": 0}', json_type),
        ("a huge top_k", b'{"names": ["a"], "top_k": 1e400}', json_type),
        ("unknown field", b'{"names": ["a"], "language": "en"}', json_type),
        ("empty list", b'{"names": []}', json_type),
        ("no names", b"{}", json_type),
        ("non-UTF-8 body", b'{"names": ["\xff\xfe"]}', json_type),
        ("unstored coverage", b'{"names": ["a"], "coverage": 0.42}', json_type),
        ("prior of other labels", b'{"names": ["a"], "prior": {"Klingon": 1.0}}', json_type),
        ("prior as a path", b'{"names": ["a"], "prior": "/etc/passwd"}', json_type),
        ("estimate from two names", b'{"names": ["a", "b"], "prior": "estimate"}', json_type),
        ("prior with coverage", b'{"names": ["a"], "prior": "uniform", "coverage": 0.9}', json_type),
        ("max_set_size without coverage", b'{"names": ["a"], "max_set_size": 2}', json_type),
        ("deep nesting", b"[" * 50_000 + b"]" * 50_000, json_type),
        ("too many names", json.dumps({"names": ["Nakamura"] * 10_001}).encode(), json_type),
        ("NaN literal", b'{"names": ["a"], "coverage": NaN}', json_type),
    ]
    return kinds


async def hostile(url: str, count: int, concurrency: int = 16) -> dict:
    """`count` hostile requests (the kinds in turn, a body over the size limit every 500th): the status codes
    each kind got."""
    import aiohttp

    kinds = hostile_bodies()
    oversize = ("body over the size limit", b'{"names": ["' + b"a" * (5 * 2**20) + b'"]}',
                {"Content-Type": "application/json"})
    seen: dict[str, set[int]] = {}
    sent = 0

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal sent
        while sent < count:
            what, body, headers = oversize if sent % 500 == 499 else kinds[sent % len(kinds)]
            sent += 1
            try:
                async with session.post(url, data=body, headers=headers) as answer:
                    await answer.read()
                    status = answer.status
            except aiohttp.ClientError:  # the server may close a connection on an oversized body
                status = 413 if what == oversize[0] else 0
            seen.setdefault(what, set()).add(status)

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
        async with session.get(url) as wrong_method:
            seen["GET on /predict"] = {wrong_method.status}
    return {what: sorted(codes) for what, codes in seen.items()}


def probe(base: str) -> tuple[int, list[dict]]:
    import urllib.request

    with urllib.request.urlopen(f"{base}/health", timeout=10) as health:
        ready = health.status
    request = urllib.request.Request(f"{base}/predict", data=json.dumps({"names": PROBE, "top_k": 3}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return ready, json.loads(answer.read())["predictions"]


def largest_gap(before: list[dict], after: list[dict]) -> float:
    pairs = [(a, b) for x, y in zip(before, after, strict=True)
             for a, b in zip(x["predictions"], y["predictions"], strict=True)]
    labels = [({k: v for k, v in a.items() if k != "probability"}, {k: v for k, v in b.items() if k != "probability"})
              for a, b in pairs]
    if any(ours != theirs for ours, theirs in labels):
        return float("inf")  # another label at some rank
    return max(abs(a["probability"] - b["probability"]) for a, b in pairs)


def group_cpu_seconds(group: int) -> float:
    """CPU seconds (user + system) used so far by the live processes of a process group: the server's HTTP
    process and its model workers, which the load generator's own time is not part of."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended while being read
            continue
        if int(fields[2]) == group:  # pgrp; utime and stime follow at 11 and 12 (after the name)
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def in_process_rate(model: str, names: list[str], repeats: int = 3) -> tuple[float, float]:
    """The in-process Predictor's names/s and names per CPU-second (all its threads), medians of `repeats`."""
    from nameorigin.serving.predict import Predictor

    predictor = Predictor.load(model)
    predictor.predict(names[:2000], top_k=3)
    speeds, per_cpu = [], []
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        predictor.predict(names, top_k=3)
        speeds.append(len(names) / (time.perf_counter() - start))
        per_cpu.append(len(names) / (time.process_time() - cpu))
    return statistics.median(speeds), statistics.median(per_cpu)


def measured_level(base: str, server: subprocess.Popen, names: list[str], concurrency: int, per_request: int,
                   args: argparse.Namespace) -> dict:
    """One level, with the server's CPU seconds over it and its names per server CPU-second."""
    cpu = group_cpu_seconds(server.pid)
    result = asyncio.run(level(f"{base}/predict", names, concurrency, per_request, args.requests, args.seconds))
    result["server_cpu_s"] = group_cpu_seconds(server.pid) - cpu
    result["names_per_server_cpu_s"] = result["requests"] * per_request / max(result["server_cpu_s"], 1e-9)
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="the model to serve: a .ckpt, .pt2 or .onnx")
    parser.add_argument("--requests", type=int, default=2000, help="requests per level at most (default 2000)")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per level at most (default 10)")
    parser.add_argument("--hostile", type=int, default=10_000, help="hostile requests sent (default 10,000)")
    parser.add_argument("--serve-args", default="", help="extra flags for nameorigin serve, e.g. "
                        "'--batch-timeout 0.005 --max-batch-size 64'")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    args = parser.parse_args(argv)
    if args.requests < 1 or args.seconds <= 0 or args.hostile < 0:
        parser.error("--requests and --seconds must be positive, --hostile at least 0")
    return args


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    require_extra("aiohttp", "serve", "benchmarks.serve_load")
    if not Path(args.model).is_file():
        raise UserError(f"model {args.model} does not exist: pass a .ckpt, .pt2 or .onnx")
    from nameorigin.data.corpus import read_corpus, shipped_corpus

    names = [name for name, _ in read_corpus(shipped_corpus())[0]]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = start_server(args.model, port, args.serve_args.split())
    try:
        ready, before = probe(base)
        results = [measured_level(base, server, names, concurrency, per_request, args)
                   for concurrency, per_request in LEVELS]
        refused = asyncio.run(hostile(f"{base}/predict", args.hostile)) if args.hostile else {}
        ready_after, after = probe(base)
    finally:
        stop_server(server)
    reference, reference_per_cpu = in_process_rate(args.model, names)
    not_4xx = {what: codes for what, codes in refused.items() if any(not 400 <= code < 500 for code in codes)}
    gap = largest_gap(before, after)
    report = {"levels": results, "in_process_names_per_s": reference,
              "in_process_names_per_cpu_s": reference_per_cpu, "hostile": refused,
              "hostile_not_4xx": not_4xx, "ready_before_after": [ready, ready_after], "probe_gap": gap}
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(f"{'concurrency':>11} {'names/request':>13} {'requests':>8} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} "
              f"{'names/s':>9} {'× in-process':>12} {'names/CPU-s':>11} {'× in-process':>12}")
        for r in results:
            print(f"{r['concurrency']:>11} {r['names_per_request']:>13} {r['requests']:>8} {r['p50_ms']:>7.1f} "
                  f"{r['p95_ms']:>7.1f} {r['p99_ms']:>7.1f} {r['names_per_s']:>9,.0f} "
                  f"{r['names_per_s'] / reference:>11.0%} {r['names_per_server_cpu_s']:>11,.0f} "
                  f"{r['names_per_server_cpu_s'] / reference_per_cpu:>11.0%}")
        print(f"in-process Predictor: {reference:,.0f} names/s, {reference_per_cpu:,.0f} names per CPU-second on "
              "the same names (after the server stopped); the server's CPU-seconds are its HTTP process' and "
              "model workers'")
        if args.hostile:
            print(f"{args.hostile:,} hostile requests of {len(refused)} kinds: "
                  + ("every one answered 4xx" if not not_4xx else f"NOT 4xx: {not_4xx}"))
        print(f"/health {ready} before, {ready_after} after; probe probabilities after vs before: largest gap "
              f"{gap:.1e}")
    return 0 if not not_4xx and ready_after == 200 and gap <= 1e-6 else 1


if __name__ == "__main__":
    sys.exit(main())
