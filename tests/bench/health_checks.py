"""Health-check benchmark: what continuous health checks of a full cell cost its rep's CPU.

    python tests/bench/health_checks.py [--instances N] [--interval S] [--seconds S] [--rounds R]

The rep's health monitor (rep/health_monitor.py) as the rep runs it: one scheduler in an event loop of
`common.runtime.run` (uvloop, as every Vendue service), watching N instances (default 250, a cell's
default container limit) every S seconds (default 1, the fastest an operator would set; Diego's default is
30). The instances are N listening ports served by a separate process (its CPU is not the rep's): each
answers `HTTP/1.0 200` to a GET. Three modes, alternated round by round so that drift of the machine hits
all alike: `off` (the same loop with nothing watched: the baseline), `port` (TCP connects) and `http`
(GET /health). Each round watches for a warm-up of two intervals, then measures a window of --seconds:
the process's CPU time (getrusage: user + system) and the checks run.

Prints ONE JSON object: per mode the CPU as a percentage of one core (median over rounds), the checks per
second, and the microseconds of CPU per check above the baseline (`us_per_check`: (cpu - off's cpu) /
checks), with failures and inconclusive checks (both should be 0). No timed assertion.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from common import runtime  # noqa: E402
from common.models import HealthCheck  # noqa: E402
from rep.health_monitor import HealthMonitor, Target  # noqa: E402

MODES = ("off", "port", "http")

# The instances: N listeners answering every request with 200, in a process of their own; prints their
# ports as one JSON line, then serves until stdin closes.
SERVER = r"""
import asyncio, json, sys
RESPONSE = b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"
async def handle(reader, writer):
    try:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(RESPONSE)
        await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass
    finally:
        writer.close()
async def main(n):
    servers = [await asyncio.start_server(handle, "127.0.0.1", 0, backlog=64) for _ in range(n)]
    print(json.dumps([s.sockets[0].getsockname()[1] for s in servers]), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
asyncio.run(main(int(sys.argv[1])))
"""


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measure(mode: str, ports: list[int], interval: float, seconds: float) -> dict[str, Any]:
    monitor = HealthMonitor()
    failures: list[str] = []
    if mode != "off":
        check = HealthCheck(type=mode, path="/health", interval_s=interval,  # type: ignore[arg-type]
                            invocation_timeout_s=1.0, failure_threshold=1)
        for i, port in enumerate(ports):
            monitor.watch(f"i{i}", check, Target.of(check, [(8080, port)], lambda: True), failures.append)
    await asyncio.sleep(2 * interval)  # every instance checked once or twice: the phases settled
    checks0, cpu0, wall0 = monitor.checks, cpu_seconds(), time.monotonic()
    await asyncio.sleep(seconds)
    checks, cpu, wall = monitor.checks - checks0, cpu_seconds() - cpu0, time.monotonic() - wall0
    inconclusive = monitor.inconclusive
    await monitor.close()
    return {"cpu_s": cpu, "wall_s": wall, "checks": checks, "failures": len(failures),
            "inconclusive": inconclusive, "first_failure": failures[0] if failures else None}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(args.instances)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert server.stdout is not None
        ports = json.loads(server.stdout.readline())
        rounds: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
        for _ in range(args.rounds):
            for mode in MODES:
                rounds[mode].append(await measure(mode, ports, args.interval, args.seconds))
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    baseline = statistics.median(r["cpu_s"] / r["wall_s"] for r in rounds["off"])
    result: dict[str, Any] = {}
    for mode, runs in rounds.items():
        share = statistics.median(r["cpu_s"] / r["wall_s"] for r in runs)
        rate = statistics.median(r["checks"] / r["wall_s"] for r in runs)
        result[mode] = {
            "cpu_percent_of_core": round(100 * share, 2),
            "checks_per_s": round(rate, 1),
            "us_per_check": round(1e6 * (share - baseline) / rate, 1) if rate else None,
            "failures": sum(r["failures"] for r in runs),
            "inconclusive": sum(r["inconclusive"] for r in runs),
            "first_failure": next((r["first_failure"] for r in runs if r["first_failure"]), None),
            "rounds": [{k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()} for r in runs],
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=250)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    modes = runtime.run(run(args))
    print(json.dumps({
        "benchmark": "health_checks",
        "instances": args.instances,
        "interval_s": args.interval,
        "window_s": args.seconds,
        "rounds": args.rounds,
        "loop": "uvloop" if "uvloop" in sys.modules else "asyncio",
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "modes": modes,
    }, indent=2))


if __name__ == "__main__":
    main()
