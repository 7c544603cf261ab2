"""Container executor start benchmark: the process executor against the container executor, on one cell.

    python tests/bench/containers.py [--instances N] [--rounds R] [--timeout S]

A real registry (tests/support/oci_registry.py, on loopback) and a real cluster (BBS, auctioneer, ONE rep
with `--executor container`, TLS on). The same program runs in every mode, busybox's httpd serving on
$PORT, health-checked on its port, memory_mb 32, disk_mb 64:
- `process`: an LRP without an image (a container cell runs it as a process: its uid, cgroup, ext4 disk);
- `container-cold`: an LRP of an image the host has never pulled (a new digest each round: the same image
  with another index.html), so the pull and unpack are in the measurement, shared by the N instances;
- `container-warm`: the same image again, now in the host's cache.
Each round runs the three in that order, on an empty cell each time; per instance the seconds from the
desire to RUNNING (the BBS's `since` minus the wall clock just before the desire: one machine, one
clock), and the seconds until all N are RUNNING (the latest of them).

Prints ONE JSON object: per mode the desire-to-RUNNING latency p50/p99/max over every instance of every
round, starts per second (N / seconds to all RUNNING, median over rounds), crashes, the CPU seconds the
machine, each component and a rep's children spent until all were RUNNING (`cpu_s`: where the time goes
when the cell's cores are the limit); `pulls_per_cold_round`
(the rep's "image pulled" log lines for that digest: 1 means one pull per host however many instances);
`warm_over_process` (the ratios of the p50 latencies and of the seconds to all RUNNING; target, reported
and never asserted: at most 2).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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

from deploy.cluster import LocalCluster  # noqa: E402
from tests.support.containers import containers_problem, free_subnets  # noqa: E402
from tests.support.oci_registry import HTTPD_IMAGE, Registry, build_image, oci_registry  # noqa: E402

TARGET_WARM_OVER_PROCESS = 2.0
APP_MEMORY_MB = 32
APP_DISK_MB = 64
# The figures come from the BBS's `since` of each RUNNING instance, so the look's interval only bounds how
# soon the round ends; a look at a hundred instances costs the BBS and this process some CPU, which a
# CPU-bound round would otherwise lose to the measurement.
POLL_S = 0.25
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SERVE = "exec httpd -f -p $PORT -h /tmp"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def since_epoch(actual: dict[str, Any]) -> float:
    return datetime.fromisoformat(actual["since"].replace("Z", "+00:00")).timestamp()


def body(mode: str, guid: str, instances: int, image_ref: str) -> dict[str, Any]:
    common = {"process_guid": guid, "instances": instances, "ports": [8080], "health_check": {"type": "port"},
              "memory_mb": APP_MEMORY_MB, "disk_mb": APP_DISK_MB}
    if mode == "process":
        return {**common, "command": ["/usr/bin/busybox", "sh", "-c", SERVE.replace("/tmp", ".")]}
    return {**common, "image": {"ref": image_ref}, "command": ["/bin/sh", "-c", SERVE]}


def host_busy_s() -> float:
    """CPU seconds the whole machine spent busy (every core, since boot): /proc/stat's first line."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / CLOCK_TICKS


def process_cpu_s(pid: int) -> tuple[float, float]:
    """A process's CPU seconds: its own, and its waited-for children's (the rep's plugins, runc, holders)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0, 0.0
    fields = [int(x) for x in stat.rsplit(")", 1)[1].split()[11:15]]  # utime stime cutime cstime
    return (fields[0] + fields[1]) / CLOCK_TICKS, (fields[2] + fields[3]) / CLOCK_TICKS


def cpu_snapshot(cluster: LocalCluster) -> dict[str, float]:
    snapshot = {"host": host_busy_s()}
    for name, pid in cluster.pids().items():
        own, children = process_cpu_s(pid)
        snapshot[name] = own
        if children or name in cluster.reps:
            snapshot[f"{name} children"] = children
    return snapshot


def one_round(cluster: LocalCluster, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
    guid, instances = payload["process_guid"], payload["instances"]
    with cluster.http_client(base_url=cluster.bbs_url, timeout=60.0) as bbs:
        cpu_before = cpu_snapshot(cluster)
        desired_at = time.time()
        started = time.perf_counter()
        bbs.post("/v1/desired_lrps", json=payload).raise_for_status()
        deadline = started + timeout
        running: dict[int, dict[str, Any]] = {}
        crashed: dict[int, str] = {}
        while len(running) < instances:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{guid}: expected {instances} RUNNING within {timeout:g}s; saw "
                                   f"{len(running)} RUNNING, crashed {dict(list(crashed.items())[:3])}")
            for actual in bbs.get("/v1/actual_lrps", params={"process_guid": guid}).json()["items"]:
                if actual["state"] == "RUNNING" and actual["presence"] == "ORDINARY":
                    running.setdefault(actual["index"], actual)
                elif actual["state"] == "CRASHED" or actual.get("crash_count"):
                    crashed[actual["index"]] = actual.get("crash_reason", "")
            time.sleep(POLL_S)  # how often it looks; the figures come from the BBS's own times
        cpu_after = cpu_snapshot(cluster)
        latencies = [since_epoch(a) - desired_at for a in running.values()]
        all_running_s = max(latencies)
        bbs.delete(f"/v1/desired_lrps/{guid}").raise_for_status()
        wait_rep_holds_nothing(cluster, timeout)
    cpu = {name: round(cpu_after[name] - cpu_before.get(name, 0.0), 2) for name in cpu_after}
    return {"all_running_s": all_running_s, "latencies_s": latencies, "crashes": len(crashed), "cpu_s": cpu}


def wait_rep_holds_nothing(cluster: LocalCluster, timeout: float) -> None:
    [(cell_id, rep)] = cluster.reps.items()
    deadline = time.monotonic() + timeout
    with cluster.http_client(base_url=rep.url, timeout=30.0) as client:
        while True:
            [cell] = client.get("/state", params={"lrps": "full", "cells": cell_id}).json()["cells"]
            if not cell["lrps"]:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"expected the rep to hold nothing {timeout:g}s after the delete; it "
                                   f"holds {len(cell['lrps'])}")
            time.sleep(POLL_S)  # the poll interval of the measurement, not a synchronisation


def pulls_of(cluster: LocalCluster, digest: str) -> int:
    [(cell_id, _)] = cluster.reps.items()
    text = cluster.log_path(cell_id).read_text(errors="replace")
    return sum(1 for line in text.splitlines() if '"image pulled"' in line and digest in line)


def summary(rounds: list[dict[str, Any]], instances: int) -> dict[str, Any]:
    latencies = [x for r in rounds for x in r["latencies_s"]]
    all_running = statistics.median(r["all_running_s"] for r in rounds)
    return {"latency_p50_s": round(percentile(latencies, 0.5), 3),
            "latency_p99_s": round(percentile(latencies, 0.99), 3),
            "latency_max_s": round(max(latencies), 3),
            "all_running_s": round(all_running, 3),
            "starts_per_s": round(instances / all_running, 1),
            "crashes": sum(r["crashes"] for r in rounds),
            # CPU seconds from the desire to all RUNNING (medians over rounds): the whole machine's, each
            # component's, and the children a rep waited for (plugins, runc, namespace holders)
            "cpu_s": {name: round(statistics.median(r["cpu_s"].get(name, 0.0) for r in rounds), 2)
                      for name in rounds[0]["cpu_s"]}}


def run(instances: int, rounds: int, timeout: float, logs: Path | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="vendue-bench-containers-") as tmp:
        work = Path(tmp)
        with oci_registry(work / "registry") as reg:
            cluster = LocalCluster(
                work / "cluster", cells=1, zones=1, executor="container", container_subnets=free_subnets(1),
                cell_memory_mb=APP_MEMORY_MB * instances + 1024,
                cell_disk_mb=APP_DISK_MB * instances + 1024, cell_containers=instances + 10,
                bbs_args=["--insecure-registry", reg.host],
                rep_args=["--insecure-registry", reg.host, "--stop-grace", "1", "--log-level", "debug"])
            cluster.start(timeout=60.0)
            try:
                return measure(cluster, reg, work, instances, rounds, timeout)
            finally:
                cluster.stop()
                if logs is not None:  # the rep's debug lines say what each container's start cost
                    shutil.copytree(cluster.logs_dir, logs, dirs_exist_ok=True)


def measure(cluster: LocalCluster, reg: Registry, work: Path, instances: int, rounds: int,
            timeout: float) -> dict[str, Any]:
    results: dict[str, list[dict[str, Any]]] = {"process": [], "container-cold": [], "container-warm": []}
    pulls: list[int] = []
    isolation = ""
    for r in range(rounds):
        layout = build_image(work / "layout", f"r{r}", **{**HTTPD_IMAGE, "index": f"round {r}\n"})
        digest = reg.push(layout, f"r{r}", "bench/web", f"r{r}")
        ref = f"{reg.host}/bench/web:r{r}"
        for mode in ("container-cold", "container-warm", "process"):
            payload = body(mode, f"{mode}-{r}", instances, ref)
            results[mode].append(one_round(cluster, payload, timeout))
        pulls.append(pulls_of(cluster, digest))
    with cluster.http_client(base_url=cluster.bbs_url, timeout=30.0) as bbs:
        isolation = str(bbs.get("/v1/cells").json()["items"][0].get("isolation", "?"))
    report: dict[str, Any] = {"instances": instances, "rounds": rounds, "isolation": isolation,
                              "modes": {mode: summary(rs, instances) for mode, rs in results.items()},
                              "pulls_per_cold_round": pulls}
    warm, process = report["modes"]["container-warm"], report["modes"]["process"]
    report["warm_over_process"] = {
        "latency_p50": round(warm["latency_p50_s"] / process["latency_p50_s"], 2),
        "all_running": round(warm["all_running_s"] / process["all_running_s"], 2),
        "target": TARGET_WARM_OVER_PROCESS,
    }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--logs", type=Path, default=None, help="copy the cluster's logs here")
    args = parser.parse_args()
    problem = containers_problem()
    if problem is not None:
        print(json.dumps({"skipped": problem}))
        return
    print(json.dumps(run(args.instances, args.rounds, args.timeout, args.logs), indent=2))


if __name__ == "__main__":
    main()
