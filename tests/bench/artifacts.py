"""Artifact benchmark: an app's code shipped through the blob store to the cells' host caches.

    python tests/bench/artifacts.py [--instances N] [--cells C] [--mb M] [--rounds R] [--timeout S]

The cluster of tests/cluster/multihost.py (needs root and `ip`): two BBS replicas and two auctioneers on an
embedded PostgreSQL on the control host, and C reps (default 10) with the process executor, each on a host
of its own (a network namespace on one bridge), TLS on, with the reps' defaults (isolation on, each
instance's directory an ext4 filesystem of its own where the host allows: `--disk-quota auto`). The app is
a small HTTP server health-checked on its port; its artifact is a tar.gz of it and M MB (default 50) of
random bytes, uploaded once to the blob store.

Each round desires N instances (default 100) of, in turn (the order alternating round by round):
- `plain`: the app as a command, no artifact;
- `cold` (the first round only): the app from its artifact, no host holding it yet;
- `warm`: the app from its artifact again, every host holding it;
and measures the seconds from the desire until every instance is RUNNING, then deletes the app and waits
until the BBS lists none of its instances and no rep holds one (stopped, unmounted, removed).
`downloaded_mb`: what the BBS sent (`vendue_blob_download_bytes_total`) during the run; target C x M (one
download per host), never N x M.

Then the BBS's resident memory during 10 concurrent downloads of a blob of 5 MB and of 50 MB (VmRSS
sampled every 10 ms in the BBS process serving them; the growth over its RSS just before): target, no
growth with the blob's size (the store streams, a chunk per download).

Prints ONE JSON object; never asserts on time. Targets: warm within 10 % of plain, 10 x 50 MB downloaded.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import statistics
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from common.procutil import app_python  # noqa: E402
from deploy.cluster import LocalCluster  # noqa: E402
from deploy.demo import APP_SOURCE  # noqa: E402
from tests.cluster.multihost import MultiHostCluster, unavailable_reason  # noqa: E402

MIB = 1024 * 1024
APP_MEMORY_MB = 32
APP_DISK_MB = 64
POLL_S = 0.05  # the poll interval of the measurement, not a synchronisation
CONCURRENT_DOWNLOADS = 10


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def artifact(mb: int) -> bytes:
    """The app as app.py in a tar.gz, with `mb` MB of random bytes (incompressible) beside it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as t:
        for name, data in (("app.py", APP_SOURCE.encode()), ("data.bin", os.urandom(mb * MIB))):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def bbs_metric(cluster: LocalCluster, url: str, name: str) -> float:
    with cluster.http_client(base_url=url, timeout=30.0) as http:
        for line in http.get("/metrics").text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
    return 0.0


def downloaded_bytes(cluster: LocalCluster) -> float:
    """What every BBS replica has sent of blobs."""
    return sum(bbs_metric(cluster, url, "vendue_blob_download_bytes_total") for url in cluster.bbs_urls)


def upload(cluster: LocalCluster, data: bytes) -> str:
    with cluster.http_client(base_url=cluster.bbs_url, timeout=120.0) as http:
        http.put(f"/v1/blobs/{digest(data)}", content=data).raise_for_status()
    return digest(data)


def one_run(cluster: LocalCluster, guid: str, instances: int, blob: str | None,
            timeout: float) -> dict[str, Any]:
    """Desire `instances` of the app (from `blob`, else as a command), time them to all RUNNING, delete."""
    if blob is None:
        command, artifacts = [app_python(), "-c", APP_SOURCE], []
    else:
        command, artifacts = [app_python(), "app/app.py"], [{"digest": blob, "dest": "app"}]
    body = {"process_guid": guid, "instances": instances, "command": command, "artifacts": artifacts,
            "ports": [8080], "health_check": {"type": "port"}, "memory_mb": APP_MEMORY_MB,
            "disk_mb": APP_DISK_MB}
    sent_before = downloaded_bytes(cluster)
    with cluster.http_client(base_url=cluster.bbs_url, timeout=30.0) as bbs:
        started = time.perf_counter()
        bbs.post("/v1/desired_lrps", json=body).raise_for_status()
        running: set[int] = set()
        crashed: dict[int, str] = {}
        while len(running) < instances:
            if time.perf_counter() - started > timeout:
                raise RuntimeError(f"{guid}: expected {instances} RUNNING within {timeout:g}s; saw "
                                   f"{len(running)}, crashed {dict(list(crashed.items())[:3])}")
            for actual in bbs.get("/v1/actual_lrps", params={"process_guid": guid}).json()["items"]:
                if actual["state"] == "RUNNING" and actual["presence"] == "ORDINARY":
                    running.add(actual["index"])
                elif actual["state"] == "CRASHED":
                    crashed[actual["index"]] = actual.get("crash_reason", "")
            time.sleep(POLL_S)
        seconds = time.perf_counter() - started
        listed = bbs.get("/v1/actual_lrps", params={"process_guid": guid}).json()["items"]
        cells = {a["cell_id"] for a in listed if a["state"] == "RUNNING"}
        bbs.delete(f"/v1/desired_lrps/{guid}").raise_for_status()
        deadline = time.monotonic() + timeout
        while bbs.get("/v1/actual_lrps", params={"process_guid": guid}).json()["items"]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{guid}: instances left {timeout:g}s after the delete")
            time.sleep(POLL_S)
    wait_reps_hold_nothing(cluster, timeout)
    return {"seconds_to_all_running": round(seconds, 3), "cells": len(cells), "crashes": len(crashed),
            "downloaded_mb": round((downloaded_bytes(cluster) - sent_before) / MIB, 1)}


def wait_reps_hold_nothing(cluster: LocalCluster, timeout: float) -> None:
    """Until every rep holds no instance (each stopped, its mounts and filesystem gone): the next run starts
    on idle cells, not beside the last one's teardown."""
    deadline = time.monotonic() + timeout
    for cell_id, rep in cluster.reps.items():
        with cluster.http_client(base_url=rep.url, timeout=30.0) as client:
            while client.get("/state", params={"lrps": "full", "cells": cell_id}).json()["cells"][0]["lrps"]:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{cell_id}: instances held {timeout:g}s after the delete")
                time.sleep(POLL_S)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def rss_during_downloads(cluster: LocalCluster, mb: int) -> dict[str, Any]:
    """10 concurrent downloads of an `mb` MB blob from the first BBS replica; its RSS sampled meanwhile."""
    data = os.urandom(mb * MIB)
    blob = upload(cluster, data)
    pid = cluster.pids()["bbs"]
    before = rss_mb(pid)
    peak, done = before, threading.Event()
    received: list[int] = []

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_mb(pid))
            done.wait(0.01)

    def download() -> None:
        got = 0
        with cluster.http_client(base_url=cluster.bbs_url, timeout=120.0) as http, \
                http.stream("GET", f"/v1/blobs/{blob}") as response:
            response.raise_for_status()
            for chunk in response.iter_bytes(1 << 16):
                got += len(chunk)
        received.append(got)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    workers = [threading.Thread(target=download) for _ in range(CONCURRENT_DOWNLOADS)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(300)
    seconds = time.perf_counter() - started
    done.set()
    sampler.join(5)
    with cluster.http_client(base_url=cluster.bbs_url, timeout=30.0) as http:
        http.delete(f"/v1/blobs/{blob}").raise_for_status()
    whole = sum(1 for r in received if r == len(data))
    return {"blob_mb": mb, "downloads_whole": whole, "seconds": round(seconds, 2),
            "rss_before_mb": round(before, 1), "rss_peak_mb": round(peak, 1),
            "rss_growth_mb": round(peak - before, 1)}


def median(runs: list[dict[str, Any]]) -> float | None:
    values = [r["seconds_to_all_running"] for r in runs]
    return round(statistics.median(values), 3) if values else None


def run(args: argparse.Namespace) -> dict[str, Any]:
    cluster = MultiHostCluster(cells=args.cells, zones=1, cell_memory_mb=4096, cell_disk_mb=8192,
                               cell_containers=250)
    try:
        cluster.start(timeout=120.0)
        code = artifact(args.mb)
        blob = upload(cluster, code)
        runs: dict[str, list[dict[str, Any]]] = {"plain": [], "cold": [], "warm": []}
        for i in range(args.rounds):
            order = ["plain", "warm"] if i % 2 else ["warm", "plain"]
            if i == 0:
                order = ["plain", "cold", "warm"]
            for kind in order:
                guid = f"{kind}-{i}"
                runs[kind].append(one_run(cluster, guid, args.instances, None if kind == "plain" else blob,
                                          args.timeout))
                print(f"{guid}: {runs[kind][-1]}", file=sys.stderr)
        rss = [rss_during_downloads(cluster, mb) for mb in (5, 50)]
        plain, warm = median(runs["plain"]), median(runs["warm"])
        return {
            "artifact_mb": round(len(code) / MIB, 1),
            "bytes_downloaded_cold_mb": runs["cold"][0]["downloaded_mb"],
            "target_downloaded_mb": round(args.cells * len(code) / MIB, 1),
            "seconds_to_all_running": {"plain": plain, "cold": median(runs["cold"]), "warm": warm},
            "warm_over_plain": round(warm / plain, 3) if plain and warm else None,
            "runs": runs,
            "bbs_rss_during_10_downloads": rss,
            "rss_growth_50mb_minus_5mb": round(rss[1]["rss_growth_mb"] - rss[0]["rss_growth_mb"], 1),
        }
    finally:
        leftovers = cluster.close()
        if leftovers:
            print(f"warning: killed leftover processes {leftovers}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=100)
    parser.add_argument("--cells", type=int, default=10)
    parser.add_argument("--mb", type=int, default=50, help="random bytes in the artifact, MB")
    parser.add_argument("--rounds", type=int, default=3, help="plain and warm runs each (cold: the first)")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    if args.instances < 1 or args.cells < 1 or args.mb < 1 or args.rounds < 1:
        parser.error("--instances, --cells, --mb and --rounds are at least 1")
    if (reason := unavailable_reason()) is not None:
        print(f"error: {reason}", file=sys.stderr)
        return 2
    report = run(args)
    print(json.dumps({
        "benchmark": "artifacts",
        "instances": args.instances, "cells": args.cells, "rounds": args.rounds,
        "layout": "2 BBS + 2 auctioneers on embedded PostgreSQL, TLS on, one host (netns) per rep, "
                  "process executor, isolation on, --disk-quota auto",
        **report,
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
