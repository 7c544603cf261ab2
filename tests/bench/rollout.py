"""Rolling update benchmark: a local cluster (a BBS, an auctioneer, one rep process hosting --cells simulated
cells in 2 zones, TLS on), an app of --instances instances, then a new version of it rolled out with
max_in_flight --max-in-flight (default 10 %).

    python tests/bench/rollout.py [--instances 1000] [--cells 100] [--max-in-flight 10%] [--timeout 600]

Measures the time from the PUT to the rollout `completed` (`seconds_to_complete`) and, sampling the
app's actual LRPs every --sample-s, the lowest count of indices with a RUNNING instance at any sample
(`lowest_healthy`; target: >= 90 % of the instances, i.e. 900 of 1,000: make-before-break keeps it at
1,000). Prints ONE JSON object; never asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deploy.cluster import LocalCluster  # noqa: E402

GUID = "bench-rollout"


def actuals(client: httpx.Client, cluster: LocalCluster) -> list[dict[str, Any]] | None:
    try:
        response = client.get(f"{cluster.bbs_url}/v1/actual_lrps", params={"process_guid": GUID},
                              timeout=10.0)
    except httpx.HTTPError:
        return None
    return list(response.json()["items"]) if response.status_code == 200 else None


def healthy(rows: list[dict[str, Any]]) -> int:
    return len({a["index"] for a in rows if a["state"] == "RUNNING"})


def wait_healthy(client: httpx.Client, cluster: LocalCluster, instances: int, timeout: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        rows = actuals(client, cluster)
        if rows is not None and healthy(rows) == instances:
            return time.monotonic() - started
        time.sleep(0.5)
    raise TimeoutError(f"{instances} instances not RUNNING within {timeout}s")


def roll(client: httpx.Client, cluster: LocalCluster, args: argparse.Namespace) -> dict[str, Any]:
    body = {"command": ["sleep", "infinity"], "memory_mb": 16, "disk_mb": 16, "env": {"RELEASE": "2"},
            "rollout": {"max_in_flight": args.max_in_flight}}
    started = time.monotonic()
    response = client.put(f"{cluster.bbs_url}/v1/desired_lrps/{GUID}", json=body, timeout=60.0)
    response.raise_for_status()
    lowest, samples, state = args.instances, 0, response.json()["rollout"]
    while time.monotonic() - started < args.timeout:
        rows = actuals(client, cluster)
        if rows is not None:
            samples += 1
            lowest = min(lowest, healthy(rows))
        got = client.get(f"{cluster.bbs_url}/v1/desired_lrps/{GUID}/rollout", timeout=10.0)
        if got.status_code == 200:
            state = got.json()
            if state["state"] not in ("running", "rolling_back"):
                break
        time.sleep(args.sample_s)
    elapsed = time.monotonic() - started
    final = actuals(client, cluster) or []
    on_new = sum(1 for a in final if a["state"] == "RUNNING" and a.get("version") == 2)
    return {"seconds_to_complete": round(elapsed, 2), "state": state["state"], "reason": state.get("reason"),
            "done": state["done"], "max_in_flight_resolved": state["max_in_flight"], "samples": samples,
            "lowest_healthy": lowest, "running_on_new_version": on_new}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--cells", type=int, default=100, help="simulated cells (one rep process)")
    parser.add_argument("--max-in-flight", default="10%")
    parser.add_argument("--sample-s", type=float, default=0.2)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    out: dict[str, Any] = {"benchmark": "rollout", "instances": args.instances, "cells": args.cells,
                           "max_in_flight": args.max_in_flight,
                           "target_lowest_healthy": args.instances * 9 // 10,
                           "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()}
    tmp = Path(tempfile.mkdtemp(prefix="vendue-bench-rollout-"))
    cluster = LocalCluster(tmp / "cluster", cells=args.cells, zones=2, executor="sim",
                           sim_cells_per_process=args.cells, cell_memory_mb=64 * 1024,
                           cell_disk_mb=256 * 1024, cell_containers=250)
    try:
        cluster.start(timeout=120.0)
        with cluster.http_client() as client:
            body = {"process_guid": GUID, "instances": args.instances, "memory_mb": 16, "disk_mb": 16,
                    "command": ["sleep", "infinity"]}
            client.post(f"{cluster.bbs_url}/v1/desired_lrps", json=body, timeout=60.0).raise_for_status()
            first = wait_healthy(client, cluster, args.instances, 300.0)
            out["seconds_to_first_all_running"] = round(first, 2)
            out.update(roll(client, cluster, args))
    except Exception as exc:  # noqa: BLE001 - reported in the JSON, not raised
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    out["target_met"] = out.get("state") == "completed" and out.get("lowest_healthy", 0) >= out[
        "target_lowest_healthy"]
    out["load_average_at_end"] = os.getloadavg()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
