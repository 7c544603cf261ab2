"""Logs benchmark: `logs -f` of many instances printing steadily, through the BBS.

    python tests/bench/logs.py [--instances 100] [--rate 100] [--duration 60] [--cells 2] [--timeout S]

A real cluster (BBS, auctioneer, --cells reps with the process executor, TLS on, as `vendue up` runs it).
One app of --instances instances; each waits for a start signal (a file), then prints --rate lines a second
for --duration seconds, each line `<n> <time.time_ns() at the print>`, paced to the clock (a late line is
not made up for by a burst), then sleeps. A follower (GET /v1/logs/{app}?follow=1, as `vendue logs APP -f
--json` asks, in a thread of this process) is connected before the signal; every line it reads is stamped
on arrival ("display").

Prints ONE JSON object: lines expected (instances x rate x duration) and delivered, lost (expected less
the distinct (instance, n) delivered), duplicates, the print-to-display latency (p50, p99, max: the app,
the rep, the BBS and the follower share one clock), lines a second the app actually printed (the machine
may not keep the pace), whether the follower was dropped, and CPU seconds over the printing of every rep
process and of the BBS (utime + stime from /proc), beside what each costs a second while followed but
silent (`idle_cpu_s_per_s`, over 10 s before the start: heartbeats, convergence, the relay's polls). The
follower reads as fast as it can: it measures the
relay, not a slow terminal.

The machine is shared (other work runs on its cores): latencies and CPU vary run to run by more than small
changes make; compare runs alternated on the same day. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from common.procutil import app_python  # noqa: E402
from deploy.cluster import LocalCluster  # noqa: E402

PRINTER = r"""
import os, time
start = os.environ["START_FILE"]
rate, duration = float(os.environ["RATE"]), float(os.environ["DURATION"])
while not os.path.exists(start):
    time.sleep(0.05)
began = time.monotonic()
total = int(rate * duration)
for n in range(total):
    due = began + n / rate
    wait = due - time.monotonic()
    if wait > 0:
        time.sleep(wait)
    print(n, time.time_ns(), flush=True)
while True:
    time.sleep(3600)
"""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
BASELINE_S = 10.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))] if ordered else 0.0


class Reader:
    """The follower: reads the BBS's JSON lines as fast as they come, stamping each on arrival."""

    def __init__(self, cluster: LocalCluster, app: str) -> None:
        self.cluster, self.app = cluster, app
        self.seen: dict[tuple[str, int], int] = {}  # (instance guid, n) -> times seen
        self.latencies_ms: list[float] = []
        self.ended = ""
        self.connected = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        timeout = httpx.Timeout(30.0, read=None)
        with self.cluster.http_client(base_url=self.cluster.bbs_url, timeout=timeout) as bbs, \
                bbs.stream("GET", f"/v1/logs/{self.app}", params={"follow": "1", "recent": "0"}) as response:
            response.raise_for_status()
            self.connected.set()
            for line in response.iter_lines():
                if self.stop.is_set():
                    return
                if not line.strip():
                    continue
                arrived = time.time_ns()
                row = json.loads(line)
                if "end" in row:
                    self.ended = row["end"]
                    return
                n, printed = row["text"].split()
                key = (row["instance_guid"], int(n))
                self.seen[key] = self.seen.get(key, 0) + 1
                self.latencies_ms.append((arrived - int(printed)) / 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=100)
    parser.add_argument("--rate", type=float, default=100.0, help="lines a second per instance")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of printing")
    parser.add_argument("--cells", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()

    expected = int(args.rate * args.duration) * args.instances
    with tempfile.TemporaryDirectory(prefix="vendue-bench-logs-") as tmp:
        # Outside tmp (0700): an isolated app's own uid looks for the start file here.
        signal_dir = Path(tempfile.mkdtemp(prefix="vendue-bench-logs-signal-"))
        signal_dir.chmod(0o777)
        start_file = signal_dir / "start"
        per_cell = args.instances // args.cells + 1
        cluster = LocalCluster(Path(tmp) / "cluster", cells=args.cells, zones=1, executor="process",
                               cell_memory_mb=64 * per_cell + 1024, cell_disk_mb=64 * per_cell + 1024,
                               cell_containers=per_cell + 10)
        cluster.start(timeout=120.0)
        try:
            app = "logbench"
            body = {"process_guid": app, "instances": args.instances,
                    "command": [app_python(), "-c", PRINTER],
                    "env": {"START_FILE": str(start_file), "RATE": str(args.rate),
                            "DURATION": str(args.duration)},
                    "ports": [], "health_check": {"type": "process"}, "memory_mb": 64, "disk_mb": 64}
            with cluster.http_client(base_url=cluster.bbs_url, timeout=30.0) as bbs:
                bbs.post("/v1/desired_lrps", json=body).raise_for_status()
                deadline = time.monotonic() + args.timeout
                while True:
                    items = bbs.get("/v1/actual_lrps", params={"process_guid": app}).json()["items"]
                    if sum(a["state"] == "RUNNING" for a in items) == args.instances:
                        break
                    if time.monotonic() > deadline:
                        raise SystemExit(f"not all RUNNING within {args.timeout}s")
                    time.sleep(0.2)
            reader = Reader(cluster, app)
            reader.thread.start()
            if not reader.connected.wait(30.0):
                raise SystemExit("the follower did not connect")
            time.sleep(2.0)  # the BBS has found every cell's rep and followed it
            pids = cluster.pids()
            reps = {rep.component: pids[rep.component] for rep in cluster.reps.values()}
            bbs_pid = next(pid for name, pid in pids.items() if name == "bbs" or name.startswith("bbs-"))
            watched = {**reps, "bbs": bbs_pid}
            # What they cost idle (heartbeats, convergence, the relay's polls), followed but silent.
            idle_from = {name: cpu_s(pid) for name, pid in watched.items()}
            time.sleep(BASELINE_S)
            idle = {name: (cpu_s(pid) - idle_from[name]) / BASELINE_S for name, pid in watched.items()}
            cpu_before = {name: cpu_s(pid) for name, pid in watched.items()}
            start_file.touch()
            began = time.monotonic()
            # Printing, then until the follower has all (or nothing more comes for 10 s).
            last_count, quiet_since = -1, time.monotonic()
            while time.monotonic() - began < args.duration + args.timeout:
                count = len(reader.seen)
                if count >= expected or reader.ended or not reader.thread.is_alive():
                    break
                if count != last_count:
                    last_count, quiet_since = count, time.monotonic()
                elif time.monotonic() - quiet_since > 10.0 and time.monotonic() - began > args.duration:
                    break
                time.sleep(0.2)
            elapsed = time.monotonic() - began
            cpu_after = {name: cpu_s(pid) for name, pid in watched.items()}
            reader.stop.set()
        finally:
            cluster.stop()
            shutil.rmtree(signal_dir, ignore_errors=True)

    delivered = sum(reader.seen.values())
    distinct = len(reader.seen)
    print(json.dumps({
        "instances": args.instances, "rate_per_instance": args.rate, "duration_s": args.duration,
        "cells": args.cells,
        "lines_expected": expected, "lines_delivered": delivered, "lines_lost": expected - distinct,
        "duplicates": delivered - distinct,
        "latency_ms": {"p50": round(percentile(reader.latencies_ms, 0.5), 1),
                       "p99": round(percentile(reader.latencies_ms, 0.99), 1),
                       "max": round(max(reader.latencies_ms, default=0.0), 1)},
        "delivered_per_s": round(distinct / elapsed, 1) if elapsed else 0.0,
        "follower_dropped": reader.ended,
        "cpu_s": {name: round(cpu_after[name] - cpu_before[name], 2) for name in cpu_before},
        "idle_cpu_s_per_s": {name: round(value, 3) for name, value in idle.items()},
        "seconds_measured": round(elapsed, 1),
        "note": "a shared machine: latencies and CPU vary run to run; compare alternated runs",
    }, indent=2))


if __name__ == "__main__":
    main()
