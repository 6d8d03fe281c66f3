"""A long run of `nameorigin serve` on 127.0.0.1: for --minutes, 16 clients send mixed requests (1 to 512 names,
random options: top_k, a coverage level the model stores, explanations, the uniform prior) with one request in
twenty hostile (serve_load's kinds). Every window of --window seconds it samples the resident memory of the
server's whole process tree (the HTTP process and its workers) and the window's latencies. It then checks: the
memory after warm-up grows at most 5 %, the p99 of the last tenth of the run stays within 1.5x of the first tenth's,
every hostile request got a 4xx, and the same probe names get the same answers at the end as at the start.

  python -m benchmarks.serve_soak outputs/<run>/checkpoints/refit.ckpt            # 20 minutes
  python -m benchmarks.serve_soak refit.ckpt --minutes 2 --window 10 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path

from benchmarks.serve_load import free_port, hostile_bodies, largest_gap, probe, start_server, stop_server, timed_post
from nameorigin.base.errors import UserError, exits_2_on_user_error
from nameorigin.data.corpus import read_corpus, shipped_corpus

CLIENTS, HOSTILE_EVERY, SIZES = 16, 20, (1, 1, 8, 64, 512)


def group_rss_mb(group: int) -> float:
    """Resident memory of the live processes of a process group, in MB (VmRSS summed)."""
    total = 0
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(status.read_text().rsplit(")", 1)[1].split()[2]) != group:
                continue
            for line in (status.parent / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (OSError, IndexError):  # the process ended while being read
            continue
    return total / 1024


def request_body(rng: random.Random, names: list[str], levels: list[float]) -> dict:
    body: dict = {"names": rng.sample(names, rng.choice(SIZES)), "top_k": rng.randint(1, 5)}
    roll = rng.random()
    if roll < 0.2 and levels:
        body["coverage"] = rng.choice(levels)
    elif roll < 0.3:
        body["explain"] = True
        body["names"] = body["names"][:8]
    elif roll < 0.4:
        body["prior"] = "uniform"
    return body


async def soak(url: str, names: list[str], levels: list[float], seconds: float, window: float,
               group: int) -> dict:
    import aiohttp

    rng, kinds = random.Random(0), hostile_bodies()
    windows: list[dict] = []
    current: list[float] = []
    hostile_codes: dict[str, set[int]] = {}
    sent, end = 0, time.perf_counter() + seconds

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal sent
        while time.perf_counter() < end:
            sent += 1
            if sent % HOSTILE_EVERY == 0:
                what, data, headers = kinds[(sent // HOSTILE_EVERY) % len(kinds)]
                async with session.post(url, data=data, headers=headers) as answer:
                    await answer.read()
                    hostile_codes.setdefault(what, set()).add(answer.status)
                continue
            current.append(await timed_post(session, url, json.dumps(request_body(rng, names, levels)).encode()))

    async def sampler() -> None:
        started = time.perf_counter()
        while time.perf_counter() < end:
            await asyncio.sleep(window)
            latencies = current[:]
            current.clear()
            cuts = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [float("nan")] * 99
            windows.append({"minute": (time.perf_counter() - started) / 60, "requests": len(latencies),
                            "p50_ms": 1000 * cuts[49], "p99_ms": 1000 * cuts[98], "rss_mb": group_rss_mb(group)})

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CLIENTS)) as session:
        await asyncio.gather(sampler(), *(client(session) for _ in range(CLIENTS)))
    return {"windows": windows, "hostile": {what: sorted(codes) for what, codes in hostile_codes.items()}}


def verdicts(found: dict, warmup: int) -> dict:
    windows = found["windows"]
    tenth = max(1, len(windows) // 10)
    after = windows[warmup:] or windows
    first_p99 = statistics.median(w["p99_ms"] for w in windows[:tenth])
    last_p99 = statistics.median(w["p99_ms"] for w in windows[-tenth:])
    return {"rss_growth": after[-1]["rss_mb"] / after[0]["rss_mb"] - 1,
            "rss_peak_growth": max(w["rss_mb"] for w in after) / after[0]["rss_mb"] - 1,
            "p99_ratio": last_p99 / first_p99, "first_p99_ms": first_p99, "last_p99_ms": last_p99,
            "hostile_not_4xx": sorted(w for w, codes in found["hostile"].items()
                                      if any(not 400 <= c < 500 for c in codes))}


@exits_2_on_user_error
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="the model to serve: a .ckpt, .pt2 or .onnx")
    parser.add_argument("--minutes", type=float, default=20.0, help="how long to run (default 20)")
    parser.add_argument("--window", type=float, default=30.0, help="seconds per sample (default 30)")
    parser.add_argument("--warmup", type=int, default=2, help="windows left out of the memory check (default 2)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if args.minutes * 60 < 4 * args.window:
        parser.error("--minutes must hold at least four windows")
    if not Path(args.model).is_file():
        raise UserError(f"model {args.model} does not exist: pass a .ckpt, .pt2 or .onnx")
    from nameorigin.serving.predict import Predictor

    levels = [float(level) for level in Predictor.load(args.model).calibration.conformal]
    names = sorted({name for name, _ in read_corpus(shipped_corpus())[0]})
    port = free_port()
    server = start_server(args.model, port, [])
    base = f"http://127.0.0.1:{port}"
    try:
        _, before = probe(base)
        found = asyncio.run(soak(f"{base}/predict", names, levels, args.minutes * 60, args.window, server.pid))
        _, after = probe(base)
    finally:
        stop_server(server)
    found.update(verdicts(found, args.warmup), probe_gap=largest_gap(before, after))
    if args.json:
        print(json.dumps(found, indent=1))
    else:
        print(f"{'minute':>7} {'requests':>9} {'p50 ms':>8} {'p99 ms':>8} {'RSS MB':>8}")
        for w in found["windows"]:
            print(f"{w['minute']:>7.1f} {w['requests']:>9,} {w['p50_ms']:>8.1f} {w['p99_ms']:>8.1f} "
                  f"{w['rss_mb']:>8.1f}")
        print(f"memory after warm-up: {found['rss_growth']:+.1%} at the end, {found['rss_peak_growth']:+.1%} at its "
              f"peak; p99 last tenth / first tenth: {found['p99_ratio']:.2f} ({found['first_p99_ms']:.1f} -> "
              f"{found['last_p99_ms']:.1f} ms); hostile kinds not answered 4xx: "
              f"{', '.join(found['hostile_not_4xx']) or 'none'}; probe answers' largest gap {found['probe_gap']:.1e}")
    ok = (found["rss_growth"] <= 0.05 and found["p99_ratio"] <= 1.5 and not found["hostile_not_4xx"]
          and found["probe_gap"] <= 1e-6)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
