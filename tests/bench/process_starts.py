"""Process-executor start benchmark: what isolation, and disk_mb as a filesystem, cost per instance start.

    python tests/bench/process_starts.py [--instances N] [--rounds R] [--isolation cgroups|none|both]
                                         [--disk-quota poll|ext4|both] [--timeout S]

A real cluster (BBS, auctioneer, ONE rep with the process executor, TLS on, as `vendue up` runs it) per
mode. Each round desires one app of N instances (default 100) of a small HTTP server (the demo's app,
health-checked on its port) and measures, for every instance, the seconds from the desire to RUNNING (the
BBS's `since` of the RUNNING record minus the wall clock just before the desire; one machine, one clock),
and the seconds until all N are RUNNING. Then it deletes the app and waits until the rep holds nothing, so
the next round starts on an empty cell (`seconds_to_empty`: from the delete until the rep holds no instance,
each stopped and its directory removed, its filesystem unmounted). The modes: `none`
(`--isolation none`), `cgroups-poll` (isolated, disk_mb measured every 2 s: `--disk-quota poll`) and
`cgroups-ext4` (isolated, each instance's directory a loop-mounted ext4 filesystem of disk_mb:
rep/disk_quota.py). They alternate round by round in the same run, so drift of the machine hits all alike.

Prints ONE JSON object: per mode the starts per second (N / seconds to all RUNNING, median over rounds) and
the desire-to-RUNNING latency (p50, p99, max over every instance of every round); `extra_ms_per_start`:
how much more an isolated start costs than an unisolated one (cgroups-poll against none: the difference
of the median seconds to all RUNNING, divided by N: the instances start concurrently, so a per-instance
latency holds the queue before it too); and `p50_latency_difference_s`, the difference of the median
latencies; `disk_quota_extra_ms_per_start` and `disk_quota_extra_ms_per_stop` the same for cgroups-ext4
against cgroups-poll (stop: from seconds_to_empty).
Target (reported, never asserted): isolation costs at most 20 ms more per instance start.

`filesystem_ms`: the filesystem's own cost, without a cluster: the median milliseconds of making one
(sparse image, mkfs.ext4, mount, margin) and of removing it (unmount, delete), over 20 in a row, of
APP_DISK_MB (64 MB) and of 1024 MB (the default disk_mb).

Then, per isolated mode, the overshoot: one instance of disk_mb 64 writes 1 GiB as fast as it can, noting
how far it got in a file outside its directory; `overshoot_mb` is what it wrote past its 64 MB before the
filesystem refused (ENOSPC) or the poll stopped it; refused, `running_on_s` says how long it was then seen
RUNNING without a crash (the poll's interval and a half).

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
from rep.disk_quota import probe  # noqa: E402

TARGET_EXTRA_MS = 20.0
APP_MEMORY_MB = 32
APP_DISK_MB = 64
POLL_S = 0.05


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def since_epoch(actual: dict[str, Any]) -> float:
    return datetime.fromisoformat(actual["since"].replace("Z", "+00:00")).timestamp()


OVERSHOOT_DISK_MB = 64
OVERSHOOT_WRITE_MB = 1024
HOLD_S = 3.0  # the poll's interval (2 s) and a half
# Writes $WRITE_MB MiB into its directory, noting after each MiB how far it got in $PROGRESS (outside its
# directory: it survives the instance), then "done <errno>" (0: none); then sleeps.
WRITER = """
import os, time
progress, written, errno = os.environ["PROGRESS"], 0, 0
def note(text):  # whole or not at all: the poll may kill it at any point
    with open(progress + ".new", "w") as p:
        p.write(text)
    os.replace(progress + ".new", progress)
try:
    with open("fill", "wb", buffering=0) as f:
        for _ in range(int(os.environ["WRITE_MB"])):
            written += f.write(b"x" * (1 << 20))
            note(str(written))
except OSError as exc:
    errno = exc.errno
note(f"{written} done {errno}")
time.sleep(600)
"""
MODES = {  # the rep's flags
    "none": ["--isolation", "none"],
    "cgroups-poll": ["--isolation", "cgroups", "--disk-quota", "poll"],
    "cgroups-ext4": ["--isolation", "cgroups", "--disk-quota", "auto"],
}


def start_cluster(data_dir: Path, mode: str, instances: int) -> LocalCluster:
    cluster = LocalCluster(
        data_dir, cells=1, zones=1, executor="process",
        cell_memory_mb=APP_MEMORY_MB * instances + 1024,
        cell_disk_mb=APP_DISK_MB * instances + OVERSHOOT_DISK_MB + 1024,
        cell_containers=instances + 10, rep_args=MODES[mode],
    )
    cluster.start(timeout=60.0)
    return cluster


def cell_isolation(cluster: LocalCluster) -> str:
    """What the cell advertises (`vendue cells`' ISOLATION): cgroup-v1 disk:ext4, none, ..."""
    with cluster.http_client(base_url=cluster.bbs_url, timeout=30.0) as bbs:
        cells = bbs.get("/v1/cells").json()
    items = cells["items"] if isinstance(cells, dict) else cells
    return str(items[0].get("isolation", "?"))


def overshoot(cluster: LocalCluster, guid: str, timeout: float) -> dict[str, Any]:
    """One instance of disk_mb 64 writing 1 GiB: how far it got, and how it ended."""
    with tempfile.TemporaryDirectory(prefix="vendue-bench-overshoot-") as tmp:
        Path(tmp).chmod(0o777)  # the app's own uid writes its progress here
        progress = Path(tmp) / "progress"
        body = {"process_guid": guid, "instances": 1, "command": [app_python(), "-c", WRITER],
                "env": {"PROGRESS": str(progress), "WRITE_MB": str(OVERSHOOT_WRITE_MB)},
                "ports": [], "health_check": {"type": "process"}, "memory_mb": APP_MEMORY_MB,
                "disk_mb": OVERSHOOT_DISK_MB}
        with cluster.http_client(base_url=cluster.bbs_url, timeout=30.0) as bbs:
            bbs.post("/v1/desired_lrps", json=body).raise_for_status()
            deadline = time.monotonic() + timeout
            crash_reason = ""
            while True:
                said = progress.read_text() if progress.exists() else ""
                items = bbs.get("/v1/actual_lrps", params={"process_guid": guid}).json()["items"]
                crashed = [a for a in items if a.get("crash_count", 0) >= 1 or a["state"] == "CRASHED"]
                if crashed:
                    crash_reason = crashed[0].get("crash_reason", "")
                    break
                if " done 28" in said:  # ENOSPC: the filesystem refused; the instance runs on
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{guid}: expected ENOSPC or a crash within {timeout:g}s; saw "
                                       f"progress {said!r}, actuals {items}")
                time.sleep(POLL_S)  # the poll interval of the measurement, not a synchronisation
            running_on_s = 0.0
            if not crash_reason:  # refused: it must run on, past a round of the poll, were there one
                refused = time.monotonic()
                while time.monotonic() - refused < HOLD_S:
                    items = bbs.get("/v1/actual_lrps", params={"process_guid": guid}).json()["items"]
                    if any(a.get("crash_count", 0) or a["state"] == "CRASHED" for a in items):
                        break
                    if all(a["state"] == "RUNNING" for a in items):
                        running_on_s = round(time.monotonic() - refused, 1)
                    time.sleep(POLL_S)  # the poll interval of the measurement, not a synchronisation
            running = [a["state"] for a in items]
            bbs.delete(f"/v1/desired_lrps/{guid}").raise_for_status()
            wait_cell_empty(cluster, guid, timeout)
        said = progress.read_text()
    written_mb = int(said.split()[0]) / (1 << 20)
    return {"disk_mb": OVERSHOOT_DISK_MB, "asked_to_write_mb": OVERSHOOT_WRITE_MB,
            "written_mb": round(written_mb, 1),
            "overshoot_mb": round(max(0.0, written_mb - OVERSHOOT_DISK_MB), 1),
            "ended": said.split(" ", 1)[1] if " " in said else "stopped while writing",
            "crash_reason": crash_reason, "states_at_the_end": running, "running_on_s": running_on_s}


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
        deleted = time.perf_counter()
        bbs.delete(f"/v1/desired_lrps/{guid}").raise_for_status()
        wait_cell_empty(cluster, guid, timeout)
        wait_rep_holds_nothing(cluster, timeout)
        empty_s = time.perf_counter() - deleted
    return {"all_running_s": all_running_s, "empty_s": empty_s, "latencies_s": latencies,
            "crashes": len(crashed)}


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


def wait_rep_holds_nothing(cluster: LocalCluster, timeout: float) -> None:
    """Until the rep's cell holds no instance: a stopping one is held until the executor has stopped it
    and removed its directory (and unmounted its filesystem)."""
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
            time.sleep(POLL_S / 5)  # the poll interval of the measurement, not a synchronisation


def filesystem_ms(times: int = 20) -> dict[str, Any]:
    """Making and removing an instance's filesystem, timed alone (rep/disk_quota.py)."""
    with tempfile.TemporaryDirectory(prefix="vendue-bench-fs-") as tmp:
        disks, why = probe(Path(tmp) / "data")
        if disks is None:
            return {"skipped": why}
        point = Path(tmp) / "mnt"
        point.mkdir()
        report: dict[str, Any] = {}
        for disk_mb in (APP_DISK_MB, 1024):
            attach, detach = [], []
            for i in range(times):
                image = disks.image_of("bench", f"i{i}")
                began = time.perf_counter()
                disks.attach(image, point, disk_mb, 100000, 100000)
                mounted = time.perf_counter()
                disks.detach(image, point)
                attach.append((mounted - began) * 1000)
                detach.append((time.perf_counter() - mounted) * 1000)
            report[f"{disk_mb}_mb"] = {"make_ms": round(statistics.median(attach), 1),
                                       "remove_ms": round(statistics.median(detach), 1)}
        return report


def summarize(rounds: list[dict[str, Any]], instances: int) -> dict[str, Any]:
    latencies = [x for r in rounds for x in r["latencies_s"]]
    seconds = [r["all_running_s"] for r in rounds]
    median_all = statistics.median(seconds)
    return {
        "rounds": len(rounds),
        "seconds_to_all_running": [round(s, 3) for s in seconds],
        "seconds_to_empty": [round(r["empty_s"], 3) for r in rounds],
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
    parser.add_argument("--disk-quota", choices=("poll", "ext4", "both"), default="both",
                        help="isolated: disk_mb measured (poll), a filesystem each (ext4), or both")
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args(argv)

    modes = ["none"] if args.isolation in ("none", "both") else []
    if args.isolation in ("cgroups", "both"):
        quotas = ("poll", "ext4") if args.disk_quota == "both" else (args.disk_quota,)
        modes += [f"cgroups-{quota}" for quota in quotas]
    report: dict[str, Any] = {"benchmark": "process_starts", "instances": args.instances,
                              "app": "the demo's HTTP server, health check: port",
                              "target_extra_ms_per_start": TARGET_EXTRA_MS, "modes": {}, "overshoot": {}}
    if os.geteuid() != 0:
        report["skipped"] = {mode: f"isolation needs root; this is uid {os.geteuid()}"
                             for mode in modes if mode != "none"}
        modes = [m for m in modes if m == "none"]
    with tempfile.TemporaryDirectory(prefix="vendue-bench-starts-") as tmp:
        Path(tmp).chmod(0o755)  # the apps' users reach their progress files' directory through it
        clusters: dict[str, LocalCluster] = {}
        try:
            for mode in modes:
                clusters[mode] = start_cluster(Path(tmp) / mode, mode, args.instances)
            advertised = {mode: cell_isolation(cluster) for mode, cluster in clusters.items()}
            if "cgroups-ext4" in clusters and not advertised["cgroups-ext4"].endswith("disk:ext4"):
                report["skipped"] = {"cgroups-ext4": f"the host offers no filesystem per instance: the cell "
                                     f"advertises {advertised['cgroups-ext4']!r} (the rep's log says why)"}
                clusters.pop("cgroups-ext4").stop()
                modes.remove("cgroups-ext4")
            rounds: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
            for r in range(args.rounds):
                for mode in modes:
                    rounds[mode].append(
                        one_round(clusters[mode], f"starts-{mode}-{r}", args.instances, args.timeout)
                    )
            for mode in modes:
                if mode != "none":
                    report["overshoot"][mode] = overshoot(clusters[mode], f"overshoot-{mode}", args.timeout)
        finally:
            for cluster in clusters.values():
                cluster.stop()
    for mode in modes:
        report["modes"][mode] = summarize(rounds[mode], args.instances) | {"advertised": advertised[mode]}

    def per_instance_ms(key: str, mode: str, base: str) -> float:
        return round((statistics.median(r[key] for r in rounds[mode])
                      - statistics.median(r[key] for r in rounds[base])) * 1000 / args.instances, 1)

    if {"none", "cgroups-poll"} <= set(modes):
        iso, plain = report["modes"]["cgroups-poll"], report["modes"]["none"]
        extra = per_instance_ms("all_running_s", "cgroups-poll", "none")
        report["extra_ms_per_start"] = extra
        report["p50_latency_difference_s"] = round(
            iso["desire_to_running_s"]["p50"] - plain["desire_to_running_s"]["p50"], 3)
        report["within_target"] = extra <= TARGET_EXTRA_MS
    if {"cgroups-poll", "cgroups-ext4"} <= set(modes):
        fs, poll = report["modes"]["cgroups-ext4"], report["modes"]["cgroups-poll"]
        report["disk_quota_extra_ms_per_start"] = per_instance_ms("all_running_s", "cgroups-ext4",
                                                                  "cgroups-poll")
        report["disk_quota_extra_ms_per_stop"] = per_instance_ms("empty_s", "cgroups-ext4", "cgroups-poll")
        report["disk_quota_p50_latency_difference_s"] = round(
            fs["desire_to_running_s"]["p50"] - poll["desire_to_running_s"]["p50"], 3)
    if "cgroups-ext4" in modes:
        report["filesystem_ms"] = filesystem_ms()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
