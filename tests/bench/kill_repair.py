"""Repair after a kill -9: a local cluster (a BBS, an auctioneer, --reps rep processes of one simulated cell
each, TLS on), HTTP transport or with --nats NATS.

    python tests/bench/kill_repair.py [--nats] [--instances 200] [--reps 4] [--timeout 90]

For each component in turn it desires a fresh app of --instances instances, kills the component with
SIGKILL at the moment that loses the most (the BBS just after it acknowledged the desire; a rep once it has
claimed some of the app's instances, i.e. while it takes its work: instances reserved on it, their claims
on their way, or CLAIMED in the BBS; the auctioneer just after the desire,
with the batch in hand), starts it again at once with the same arguments, port and data (what `vendue up`'s
supervisor does), and measures from the kill until every instance of the app is RUNNING
(`seconds_to_all_running`). The target, reported and never asserted: presence TTL + 5 s for every kill
(bbs/converger.py and docs/chaos.md say why). Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
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
from tests.support.polling import wait_for  # noqa: E402

POLL_S = 0.02


def states(client: httpx.Client, cluster: LocalCluster, process_guid: str) -> list[dict[str, Any]]:
    """The app's actual LRPs ([] while the BBS does not answer)."""
    try:
        response = client.get(f"{cluster.bbs_url}/v1/actual_lrps", params={"process_guid": process_guid},
                              timeout=5.0)
    except httpx.HTTPError:
        return []
    return list(response.json()["items"]) if response.status_code == 200 else []


def running(client: httpx.Client, cluster: LocalCluster, process_guid: str) -> int:
    return sum(1 for a in states(client, cluster, process_guid)
               if a["state"] == "RUNNING" and a.get("presence", "ORDINARY") == "ORDINARY")


def desire(client: httpx.Client, cluster: LocalCluster, process_guid: str, instances: int) -> None:
    body = {"process_guid": process_guid, "instances": instances, "memory_mb": 16, "disk_mb": 16,
            "command": ["sleep", "infinity"]}
    response = client.post(f"{cluster.bbs_url}/v1/desired_lrps", json=body, timeout=30.0)
    if response.status_code != 201:
        raise RuntimeError(f"desiring {process_guid}: HTTP {response.status_code} {response.text[:200]}")


def delete(client: httpx.Client, cluster: LocalCluster, process_guid: str, timeout: float) -> None:
    client.delete(f"{cluster.bbs_url}/v1/desired_lrps/{process_guid}", timeout=30.0)
    wait_for(lambda: not states(client, cluster, process_guid), timeout, f"{process_guid}'s instances gone",
             interval=POLL_S)


def claimed_on(client: httpx.Client, cluster: LocalCluster, process_guid: str) -> str:
    """A cell that has claimed some of the app's instances and not yet run them all ("" if none): CLAIMED
    in the BBS, or reserved on its rep (the claim on its way: a simulated instance's claim carries its
    running report, so the BBS takes it from UNCLAIMED to RUNNING and never shows it CLAIMED)."""
    for a in states(client, cluster, process_guid):
        if a["state"] == "CLAIMED" and a.get("cell_id"):
            return str(a["cell_id"])
    for cell_id, rep in list(cluster.reps.items()):
        try:
            response = client.get(f"{rep.url}/state", params={"lrps": "full", "cells": cell_id}, timeout=5.0)
        except httpx.HTTPError:
            continue
        if response.status_code == 200 and any(
            lrp["process_guid"] == process_guid and lrp["state"] == "reserved"
            for cell in response.json()["cells"] for lrp in cell["lrps"]
        ):
            return cell_id
    return ""


def one_kill(client: httpx.Client, cluster: LocalCluster, component: str, process_guid: str,
             instances: int, timeout: float) -> dict[str, Any]:
    """Desire the app, kill `component` at its moment, restart it; seconds from the kill to all RUNNING."""
    victim = component
    desire(client, cluster, process_guid, instances)
    if component == "rep":
        victim = wait_for(lambda: claimed_on(client, cluster, process_guid), timeout,
                          "a cell claiming the app's instances", interval=POLL_S)
    killed_at = time.monotonic()
    cluster.kill(victim, signal.SIGKILL)
    before = running(client, cluster, process_guid) if component != "bbs" else None
    cluster.restart(victim, timeout=60.0)
    serving = time.monotonic() - killed_at
    wait_for(lambda: running(client, cluster, process_guid) >= instances, timeout,
             f"{instances} instances RUNNING after killing {victim}", interval=POLL_S)
    done = time.monotonic()
    return {"killed": victim, "seconds_to_serving_again": round(serving, 3),
            "running_just_after_kill": before, "seconds_to_all_running": round(done - killed_at, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nats", action="store_true", help="auctions, work and stops over NATS")
    parser.add_argument("--instances", type=int, default=200)
    parser.add_argument("--reps", type=int, default=4, help="rep processes, one simulated cell each")
    parser.add_argument("--presence-ttl", type=float, default=10.0, help="the BBS's and the reps', s")
    parser.add_argument("--components", default="bbs,rep,auctioneer", help="which to kill, in this order")
    parser.add_argument("--timeout", type=float, default=90.0, help="per kill, s")
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="vendue-bench-kill-repair-"))
    transport = "nats" if args.nats else "http"
    ttl = ["--presence-ttl", str(args.presence_ttl)]
    out: dict[str, Any] = {"benchmark": "kill_repair", "transport": transport, "instances": args.instances,
                           "reps": args.reps, "presence_ttl_s": args.presence_ttl,
                           "target_seconds": args.presence_ttl + 5.0, "cpus": os.cpu_count(),
                           "load_average_at_start": os.getloadavg()}
    cluster = LocalCluster(tmp / "cluster", cells=args.reps, zones=2, executor="sim", sim_cells_per_process=1,
                           cell_memory_mb=64 * 1024, cell_disk_mb=256 * 1024, transport=transport,
                           bbs_args=ttl, rep_args=ttl)
    kills: dict[str, Any] = {}
    try:
        cluster.start(timeout=120.0)
        with cluster.http_client() as client:
            for n, component in enumerate(c.strip() for c in args.components.split(",") if c.strip()):
                guid = f"kill-{component}-{n}"
                try:
                    kills[component] = one_kill(client, cluster, component, guid, args.instances,
                                                args.timeout)
                except Exception as exc:  # noqa: BLE001 - reported in the JSON, not raised
                    kills[component] = {"error": f"{type(exc).__name__}: {exc}"}
                delete(client, cluster, guid, args.timeout)
    except Exception as exc:  # noqa: BLE001 - reported in the JSON, not raised
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    out["kills"] = kills
    times = [k.get("seconds_to_all_running") for k in kills.values()]
    worst = None if not times or None in times else max(t for t in times if t is not None)
    out["worst_seconds"] = worst
    out["target_met"] = worst is not None and worst <= args.presence_ttl + 5.0
    out["load_average_at_end"] = os.getloadavg()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
