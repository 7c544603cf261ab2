"""What the multi-host partition tests check, shared by them (tests/cluster): the timings, RUNNING instances
by index, none running twice, one process per index, an auctioneer's stats."""

from __future__ import annotations

from typing import Any

import httpx

from bbs.settings import BBSSettings
from common.models import ActualLRP, DesiredLRP
from deploy.client_cmd import app_summaries
from tests.cluster.multihost import MultiHostCluster
from tests.e2e.conftest import (
    BBS,
    Unmet,
    all_running,
    brief,
    rep_state,
)

INSTANCES = 6


# Long enough to see a wrong state come back: the rep's next heartbeats and reports, and several
# convergence passes (every 0.5 s).
SETTLE_S = 3.0


# How long a stop the BBS sends an unreachable rep may hang (its --http-timeout, left at the default).
HTTP_TIMEOUT_S = BBSSettings.model_fields["http_timeout"].default


CUT_OFF_S = HTTP_TIMEOUT_S + 2.0


def running_by_index(actuals: list[dict]) -> dict[int, list[dict]]:
    found: dict[int, list[dict]] = {}
    for actual in actuals:
        if actual["state"] == "RUNNING":
            found.setdefault(actual["index"], []).append(actual)
    return found


def counted(bbs: BBS, process_guid: str, actuals: list[dict]) -> tuple[int, dict[str, Any]]:
    """How the app's instances are counted, as Diego counts them: `vendue apps`'s running instances
    (an index runs once any of its instances runs: a suspect until its replacement runs), and the BBS's
    summary (by state: ORDINARY instances only, as Diego's LRPsRunning; suspects by presence, as its
    SuspectRunningActualLRPs)."""
    desired = [DesiredLRP.model_validate(d) for d in bbs.desired() if d["process_guid"] == process_guid]
    [app] = app_summaries(desired, [ActualLRP.model_validate(a) for a in actuals])
    summary = bbs.http.get("/v1/actual_lrps/summary", params={"process_guid": process_guid}).json()
    return app["running"], summary


def one_process_per_index(cluster: MultiHostCluster, bbs: BBS, process_guid: str,
                          instances: int = INSTANCES) -> dict[int, dict]:
    """The BBS shows one RUNNING ORDINARY instance per index and nothing else; each cell's rep holds
    exactly the instances the BBS places on it; and each host runs exactly one process per index it holds,
    the instance the BBS names (its INSTANCE_GUID), none elsewhere. Raises Unmet with what it saw."""
    running = all_running(bbs, process_guid, instances, answer=False)
    expected = {(a["cell_id"], a["index"], a["instance_guid"]) for a in running.values()}
    held = set()
    for cell_id, rep in cluster.reps.items():
        state = rep_state(rep.url, cell_id, cluster.verify)
        held |= {(cell_id, lrp["index"], lrp["instance_guid"]) for lrp in state["lrps"]
                 if lrp["process_guid"] == process_guid}
    if held != expected:
        raise Unmet(f"the reps hold {sorted(held)}, the BBS says {sorted(expected)}")
    processes = cluster.instance_processes(process_guid)
    on_hosts = {(host, index): pids for host, by_index in processes.items()
                for index, pids in by_index.items()}
    wanted = {(cell_id, index) for cell_id, index, _ in expected}
    if set(on_hosts) != wanted or any(len(pids) != 1 for pids in on_hosts.values()):
        raise Unmet(f"processes by (host, index) {on_hosts}, expected one for each of {sorted(wanted)}")
    return running


def no_index_running_twice(bbs: BBS, process_guid: str) -> bool:
    actuals = bbs.actuals(process_guid)
    twice = {index: len(rows) for index, rows in running_by_index(actuals).items() if len(rows) > 1}
    if twice:
        # Not Unmet: wrong the moment it is seen, whatever comes later.
        raise AssertionError(f"two RUNNING instances for indices {sorted(twice)}: {brief(actuals)}")
    return True


def auctioneer_stats(cluster: MultiHostCluster, name: str) -> dict[str, Any]:
    response = httpx.get(f"{cluster.control_plane()[name]}/v1/stats", verify=cluster.verify, timeout=2.0)
    response.raise_for_status()
    return response.json()
