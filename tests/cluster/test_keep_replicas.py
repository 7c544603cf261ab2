"""The seeds' policy for host failures (`on_cell_loss: keep-replicas`, bbs/cell_loss.py) on real network hosts
(tests/cluster/multihost.py; transport http, TLS on, three cells).

A cell's host cut off from everything (its link down): its instances become SUSPECT and nothing is
auctioned during the grace. Then the BBS checks the cell (asks its rep, which it cannot reach): the app with
a single instance moves; the app with three keeps its instance there, SUSPECT and unreplaced, counted as
running. Once the link is back, the kept instance is ORDINARY again — the same instance, the same process,
never restarted — and the single app's old instance on that host is stopped (its rep learns it was
replaced). Nothing runs twice.

Needs root and `ip` (skipped otherwise, saying why).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.e2e.conftest import (
    BBS,
    PRESENCE_TTL_S,
    Unmet,
    all_running,
    brief,
    hold_for,
    running_ordinary,
    wait_for,
)
from tests.e2e.conftest import BBS_ARGS as E2E_BBS_ARGS
from tests.e2e.conftest import REP_ARGS as E2E_REP_ARGS
from tests.support.partition_checks import SETTLE_S, counted, no_index_running_twice, one_process_per_index

from .multihost import MultiHostCluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

GRACE_S = 4.0
CHECK_S = 1.0


def kept_on(bbs: BBS, process_guid: str, index: int, cell_id: str) -> dict:
    """The index's only actual: SUSPECT, still RUNNING, on `cell_id`; else Unmet."""
    actuals = [a for a in bbs.actuals(process_guid) if a["index"] == index]
    if [(a["presence"], a["state"], a["cell_id"]) for a in actuals] != [("SUSPECT", "RUNNING", cell_id)]:
        raise Unmet(f"{process_guid}/{index}: {brief(actuals)}")
    return actuals[0]


def test_a_cut_off_host_keeps_its_several_replica_instances_and_moves_the_single_ones(
    multihost: Callable[..., MultiHostCluster],
) -> None:
    keep_args = ("--cell-loss-grace", str(GRACE_S), "--cell-loss-check", str(CHECK_S))
    cluster = multihost(cells=3, rep_args=E2E_REP_ARGS, bbs_args=(*E2E_BBS_ARGS, *keep_args))
    bbs = BBS(cluster.bbs_url, cluster.verify)
    bbs.desire("trio", 3, on_cell_loss="keep-replicas")
    bbs.desire("solo", 1, on_cell_loss="keep-replicas")

    def both_once() -> bool:
        trio = one_process_per_index(cluster, bbs, "trio", 3)
        return bool(trio and one_process_per_index(cluster, bbs, "solo", 1))

    wait_for(both_once, 40.0, "trio's 3 instances and solo's 1 running, one process each")
    [solo] = running_ordinary(bbs.actuals("solo")).values()
    cut = solo["cell_id"]
    trio = running_ordinary(bbs.actuals("trio"))
    [(index, kept)] = [(i, a) for i, a in trio.items() if a["cell_id"] == cut]
    kept_pids = cluster.instance_processes("trio")[cut][index]

    cluster.partition(cut)
    def both_kept() -> bool:
        return bool(kept_on(bbs, "solo", 0, cut) and kept_on(bbs, "trio", index, cut))

    wait_for(both_kept, 4 * PRESENCE_TTL_S + 10.0, f"the instances on the cut-off {cut} SUSPECT")
    hold_for(both_kept, GRACE_S / 2, "no replacement during the grace")

    def solo_moved() -> dict:
        now = running_ordinary(bbs.actuals("solo"))
        if 0 not in now or now[0]["cell_id"] == cut:
            raise Unmet(brief(bbs.actuals("solo")))
        return now[0]

    wait_for(solo_moved, GRACE_S + CHECK_S + 20.0, "solo, a single instance, RUNNING on another cell")
    def trio_kept() -> bool:
        actuals = bbs.actuals("trio")
        running, summary = counted(bbs, "trio", actuals)  # as Diego counts: the suspect runs, as a suspect
        if running != 3 or summary["by_presence"].get("SUSPECT") != 1:
            raise AssertionError(f"trio counted {running} running, summary {summary}: {brief(actuals)}")
        return bool(kept_on(bbs, "trio", index, cut) and len(running_ordinary(actuals)) == 2)

    hold_for(trio_kept, GRACE_S + CHECK_S, f"trio's instance on {cut} kept, SUSPECT, unreplaced, counted")

    cluster.heal(cut)

    def back() -> bool:
        no_index_running_twice(bbs, "trio")
        no_index_running_twice(bbs, "solo")
        running = all_running(bbs, "trio", 3, answer=False)
        if running[index]["instance_guid"] != kept["instance_guid"]:
            raise Unmet(f"expected trio/{index} {kept['instance_guid']} again: {brief(bbs.actuals('trio'))}")
        return both_once() and cluster.instance_processes("trio")[cut][index] == kept_pids

    wait_for(back, 30.0, f"trio's kept instance ORDINARY again on {cut}, solo's old instance there stopped")
    hold_for(back, SETTLE_S, "one instance and one process per index, the kept one never restarted")
    bbs.close()
