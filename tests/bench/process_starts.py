"""Process-executor start benchmark: what isolation costs per instance start.

    python tests/bench/process_starts.py [--instances N] [--rounds R] [--isolation cgroups|none|both]
                                         [--timeout S]

A real cluster (BBS, auctioneer, ONE rep with the process executor, TLS on, as `vendue up` runs it) per
mode. Each round desires one app of N instances (default 100) of a small HTTP server (the demo's app,
health-checked on its port) and measures, for every instance, the seconds from the desire to RUNNING (the
BBS's `since` of the RUNNING record minus the wall clock just before the desire; one machine, one clock),
and the seconds until all N are RUNNING. Then it deletes the app and waits until the rep holds nothing, so
the next round starts on an empty cell. With `--isolation both` (the default) the modes alternate round by
round in the same run (none, cgroups, none, cgroups, ...), so drift of the machine hits both alike.

Prints ONE JSON object: per mode the starts per second (N / seconds to all RUNNING, median over rounds) and
the desire-to-RUNNING latency (p50, p99, max over every instance of every round); `extra_ms_per_start`:
how much more an isolated start costs than an unisolated one (the difference of the median seconds to all
RUNNING, divided by N: the instances start concurrently, so a per-instance latency holds the queue before
it too); and `p50_latency_difference_s`, the difference of the median latencies.
Target (reported, never asserted): isolation costs at most 20 ms more per instance start.

Isolation needs root (each instance under its own uid in its own cgroups); as another user only `none` runs
and the JSON says why `cgroups` did not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from common.procutil import app_python  # noqa: E402
from deploy.cluster import LocalCluster  # noqa: E402
from deploy.demo import APP_SOURCE  # noqa: E402

TARGET_EXTRA_MS = 20.0
APP_MEMORY_MB = 32
APP_DISK_MB = 64
POLL_S = 0.05


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def since_epoch(actual: dict[str, Any]) -> float:
    return datetime.fromisoformat(actual["since"].replace("Z", "+00:00")).timestamp()


def start_cluster(data_dir: Path, isolation: str, instances: int) -> LocalCluster:
    cluster = LocalCluster(
        data_dir, cells=1, zones=1, executor="process",
        cell_memory_mb=APP_MEMORY_MB * instances + 1024, cell_disk_mb=APP_DISK_MB * instances + 1024,
        cell_containers=instances + 10, rep_args=["--isolation", isolation],
    )
    cluster.start(timeout=60.0)
    return cluster


def one_round(cluster: LocalCluster, guid: str, instances: int, timeout: float) -> dict[str, Any]:
    body = {"process_guid": guid, "instances": instances, "command": [app_python(), "-c", APP_SOURCE],
            "ports": [8080], "health_check": {"type": "port"}, "memory_mb": APP_MEMORY_MB,
            "disk_mb": APP_DISK_MB}
    with cluster.http_client(base_url=cluster.bbs_url, timeout=30.0) as bbs:
        desired_at = time.time()
        started = time.perf_counter()
        answer = bbs.post("/v1/desired_lrps", json=body)
        answer.raise_for_status()
        deadline = started + timeout
        running: dict[int, dict[str, Any]] = {}
        crashed: dict[int, str] = {}
        while len(running) < instances:
            if time.perf_counter() > deadline:
                raise RuntimeError(
                    f"{guid}: expected {instances} RUNNING within {timeout:g}s; saw {len(running)} "
                    f"RUNNING, crashed {dict(list(crashed.items())[:3])}"
                )
            items = bbs.get("/v1/actual_lrps", params={"process_guid": guid}).json()["items"]
            for actual in items:
                if actual["state"] == "RUNNING" and actual["presence"] == "ORDINARY":
                    running.setdefault(actual["index"], actual)
                elif actual["state"] == "CRASHED":
                    crashed[actual["index"]] = actual.get("crash_reason", "")
            time.sleep(POLL_S)  # the poll interval of the measurement, not a synchronisation
        all_running_s = time.perf_counter() - started
        latencies = [since_epoch(a) - desired_at for a in running.values()]
        bbs.delete(f"/v1/desired_lrps/{guid}").raise_for_status()
        wait_cell_empty(cluster, guid, timeout)
    return {"all_running_s": all_running_s, "latencies_s": latencies, "crashes": len(crashed)}


def wait_cell_empty(cluster: LocalCluster, guid: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with cluster.http_client(base_url=cluster.bbs_url, timeout=30.0) as bbs:
        while True:
            left = bbs.get("/v1/actual_lrps", params={"process_guid": guid}).json()["items"]
            if not left:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{guid}: expected no instance left {timeout:g}s after the delete; saw {len(left)}"
                )
            time.sleep(POLL_S)


def summarize(rounds: list[dict[str, Any]], instances: int) -> dict[str, Any]:
    latencies = [x for r in rounds for x in r["latencies_s"]]
    seconds = [r["all_running_s"] for r in rounds]
    median_all = statistics.median(seconds)
    return {
        "rounds": len(rounds),
        "seconds_to_all_running": [round(s, 3) for s in seconds],
        "starts_per_s": round(instances / median_all, 1),
        "desire_to_running_s": {"p50": round(statistics.median(latencies), 3),
                                "p99": round(percentile(latencies, 0.99), 3),
                                "max": round(max(latencies), 3)},
        "crashes": sum(r["crashes"] for r in rounds),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--isolation", choices=("cgroups", "none", "both"), default="both")
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args(argv)

    modes = ["none", "cgroups"] if args.isolation == "both" else [args.isolation]
    report: dict[str, Any] = {"benchmark": "process_starts", "instances": args.instances,
                              "app": "the demo's HTTP server, health check: port",
                              "target_extra_ms_per_start": TARGET_EXTRA_MS, "modes": {}}
    if "cgroups" in modes and os.geteuid() != 0:
        report["skipped"] = {"cgroups": f"isolation needs root; this is uid {os.geteuid()}"}
        modes.remove("cgroups")
    with tempfile.TemporaryDirectory(prefix="vendue-bench-starts-") as tmp:
        clusters = {mode: start_cluster(Path(tmp) / mode, mode, args.instances) for mode in modes}
        try:
            rounds: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
            for r in range(args.rounds):
                for mode in modes:
                    rounds[mode].append(
                        one_round(clusters[mode], f"starts-{mode}-{r}", args.instances, args.timeout)
                    )
        finally:
            for cluster in clusters.values():
                cluster.stop()
    for mode in modes:
        report["modes"][mode] = summarize(rounds[mode], args.instances)
    if set(modes) == {"none", "cgroups"}:
        iso, plain = report["modes"]["cgroups"], report["modes"]["none"]
        extra = (statistics.median(r["all_running_s"] for r in rounds["cgroups"])
                 - statistics.median(r["all_running_s"] for r in rounds["none"])) * 1000 / args.instances
        report["extra_ms_per_start"] = round(extra, 1)
        report["p50_latency_difference_s"] = round(
            iso["desire_to_running_s"]["p50"] - plain["desire_to_running_s"]["p50"], 3)
        report["within_target"] = extra <= TARGET_EXTRA_MS
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
