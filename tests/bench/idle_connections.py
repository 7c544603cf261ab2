"""Idle-connection benchmark: what thousands of connections that never send a request cost a BBS.

    python tests/bench/idle_connections.py [--connections N] [--concurrency C] [--requests R]
                                           [--hold S] [-- BBS FLAGS...]

A real `vendue bbs` (HTTPS, tests/support/bbs_process.py) on loopback; BBS FLAGS (after `--`) are passed
to it (`--max-connections 100000 --header-timeout 3600` serves as "no limits"). First R requests
`GET /v1/desired_lrps` on a kept-alive admin connection (the baseline latency). Then N connections
(default 5,000) complete the TLS handshake and send nothing, C at a time, within a time bound; the BBS's
open descriptors (/proc/<pid>/fd) are sampled throughout. While they are held, R more requests on the
connection opened before them. Then: how many of the N the BBS still keeps open (the others it closed),
and how long until its descriptors are back to the baseline (the header timeout reaping them).

Prints ONE JSON object. Loopback only; every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import ssl
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support.bbs_process import BBSProcess  # noqa: E402

FLOOD_BOUND_S = 120.0
REAP_BOUND_S = 60.0


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def latencies(client, requests: int) -> dict[str, float | int]:
    times: list[float] = []
    failed = 0
    for _ in range(requests):
        started = time.perf_counter()
        try:
            response = await client.get("/v1/desired_lrps")
            response.raise_for_status()
        except Exception:  # noqa: BLE001 - counted, reported
            failed += 1
            continue
        times.append(time.perf_counter() - started)
    if not times:
        return {"failed": failed}
    return {"p50_ms": round(percentile(times, 0.5) * 1000, 2),
            "p99_ms": round(percentile(times, 0.99) * 1000, 2), "ok": len(times), "failed": failed}


async def flood(port: int, context: ssl.SSLContext, count: int, concurrency: int, deadline: float):
    """`count` TLS connections that send nothing; returns those opened and how many failed to open."""
    opened: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    failed = 0
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        nonlocal failed
        async with gate:
            if time.monotonic() > deadline:
                failed += 1
                return
            try:
                async with asyncio.timeout(max(0.1, deadline - time.monotonic())):
                    opened.append(await asyncio.open_connection("127.0.0.1", port, ssl=context))
            except (OSError, ssl.SSLError, TimeoutError):
                failed += 1

    await asyncio.gather(*(one() for _ in range(count)))
    return opened, failed


def still_open(connections: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]) -> int:
    return sum(1 for reader, writer in connections
               if not reader.at_eof() and reader.exception() is None and not writer.transport.is_closing())


async def run(args: argparse.Namespace, bbs: BBSProcess) -> dict:
    pid = bbs.proc.pid
    port = int(bbs.url.rsplit(":", 1)[1])
    context = bbs.verify
    assert isinstance(context, ssl.SSLContext)
    result: dict = {"connections": args.connections, "bbs_flags": args.bbs_flags}
    async with bbs.async_client(timeout=10) as client:
        await latencies(client, 10)  # warm-up, on the kept-alive connection the measurements use
        result["fds_before"] = open_fds(pid)
        result["latency_without"] = await latencies(client, args.requests)

        peak = 0
        sampling = True

        async def sample() -> None:
            nonlocal peak
            beat = 0
            while sampling:
                peak = max(peak, open_fds(pid))
                beat += 1
                if beat % 20 == 0:  # the measuring client in use, as a real one is: its connection kept alive
                    with contextlib.suppress(Exception):
                        await client.get("/ping")
                await asyncio.sleep(0.05)  # a sampling period, not a synchronisation

        sampler = asyncio.create_task(sample())
        started = time.monotonic()
        opened, failed = await flood(port, context, args.connections, args.concurrency,
                                     started + FLOOD_BOUND_S)
        result["flood_s"] = round(time.monotonic() - started, 2)
        result["opened_by_client"] = len(opened)
        result["failed_to_open"] = failed
        result["latency_with"] = await latencies(client, args.requests)
        result["kept_open_by_bbs"] = still_open(opened)  # after the flood and the requests
        result["fds_while_held"] = open_fds(pid)
        hold_end = time.monotonic() + args.hold
        while time.monotonic() < hold_end:
            await asyncio.sleep(0.1)  # holding the connections for the stated time, not a synchronisation
        result[f"kept_open_after_{args.hold:g}s"] = still_open(opened)
        sampling = False
        await sampler
        result["fds_peak"] = peak
        reap_deadline = time.monotonic() + REAP_BOUND_S
        while open_fds(pid) > result["fds_before"] + 10 and time.monotonic() < reap_deadline:
            await asyncio.sleep(0.1)
        result["fds_back_to_baseline_s"] = (round(time.monotonic() - started, 1)
                                            if open_fds(pid) <= result["fds_before"] + 10 else None)
        for _, writer in opened:
            writer.transport.abort()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=5_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--hold", type=float, default=15.0)
    parser.add_argument("bbs_flags", nargs="*")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, args.connections + 1024) if hard != resource.RLIM_INFINITY else args.connections + 1024
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    with tempfile.TemporaryDirectory() as tmp:
        bbs = BBSProcess(Path(tmp), "idle", None, *args.bbs_flags)
        try:
            result = asyncio.run(run(args, bbs))
        finally:
            bbs.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
