"""Partitions on real network hosts (tests/cluster/multihost.py; transport http, TLS on, three cells).

- A cell's host cut off from everything: Diego's semantics. Its presence expires, its instances become
  SUSPECT and replacements start on the other cells; meanwhile each index counts as running once (the
  suspect until its replacement runs). Once the link is back the rep learns its instances were replaced
  and stops them; from then on the BBS never shows two RUNNING instances for one index, and what really
  runs (each rep's /state, each host's processes) is one process per index, the one the BBS names.
- The leader auctioneer cut off from the BBS and its database (the auctioneers on hosts of their own, so
  the leader still reaches every cell): it stops auctioning as soon as it cannot renew (its next renewal
  unanswered for the request timeout, long before its lease runs out), which its /v1/stats and log say;
  the standby takes over once it has stopped, never while it still leads; and work under the old leader's
  fencing token is refused by every cell that has taken the new leader's.

Needs root and `ip` (skipped otherwise, saying why).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from common.tls import TLSFiles, client_context
from tests.e2e.conftest import (
    BBS,
    PRESENCE_TTL_S,
    brief,
    expect,
    hold_for,
    rep_state,
    wait_for,
)
from tests.e2e.conftest import BBS_ARGS as E2E_BBS_ARGS
from tests.e2e.conftest import REP_ARGS as E2E_REP_ARGS
from tests.support.partition_checks import (
    CUT_OFF_S,
    INSTANCES,
    SETTLE_S,
    auctioneer_stats,
    counted,
    no_index_running_twice,
    one_process_per_index,
    running_by_index,
)

from .multihost import MultiHostCluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

CELLS = 3
LEASE_TTL_S = 3.0
RENEWAL_S = LEASE_TTL_S / 3  # how often the leader renews


def test_a_cell_cut_off_from_everything_is_replaced_and_stops_its_instances_once_back(
    multihost: Callable[..., MultiHostCluster],
) -> None:
    cluster = multihost(cells=CELLS, bbs_args=E2E_BBS_ARGS, rep_args=E2E_REP_ARGS)
    bbs = BBS(cluster.bbs_url, cluster.verify)
    bbs.desire("web", INSTANCES)
    wait_for(lambda: one_process_per_index(cluster, bbs, "web"), 30.0, f"{INSTANCES} instances, one each")
    placed = Counter(a["cell_id"] for a in bbs.actuals("web"))
    cut, on_cut = max(placed.items(), key=lambda item: item[1])
    lost = {a["index"]: a["instance_guid"] for a in bbs.actuals("web") if a["cell_id"] == cut}
    assert on_cut >= 1

    cluster.partition(cut)
    seen_suspects: set[int] = set()
    suspects_counted = 0

    def replaced() -> bool:
        """While cut off: every index counts as running once (the suspect until its replacement runs), at
        most one ORDINARY RUNNING each; done when the lost indices run elsewhere and no suspect is left."""
        nonlocal suspects_counted
        actuals = bbs.actuals("web")
        by_index = running_by_index(actuals)
        if sorted(by_index) != list(range(INSTANCES)):
            raise AssertionError(f"an index stopped counting as running, {cut} cut off: {brief(actuals)}")
        for index, rows in by_index.items():
            ordinary = [a for a in rows if a["presence"] == "ORDINARY"]
            suspects = [a for a in rows if a["presence"] == "SUSPECT"]
            if len(ordinary) > 1 or len(suspects) > 1 or any(a["cell_id"] != cut for a in suspects):
                raise AssertionError(f"index {index}: {brief(rows)}")
            seen_suspects.update(a["index"] for a in suspects)
        running, summary = counted(bbs, "web", actuals)
        if running != INSTANCES or summary["by_state"].get("RUNNING", 0) > INSTANCES:
            raise AssertionError(f"counted {running} running, summary {summary}, while {cut} was cut off")
        suspects_counted = max(suspects_counted, summary["by_presence"].get("SUSPECT", 0))
        moved = {a["index"] for a in actuals if a["index"] in lost and a["state"] == "RUNNING"
                 and a["presence"] == "ORDINARY" and a["cell_id"] != cut}
        return expect(moved == set(lost) and not any(a["presence"] == "SUSPECT" for a in actuals),
                      f"lost {sorted(lost)} on {cut}: {brief(actuals)}")

    wait_for(replaced, 4 * PRESENCE_TTL_S + 15.0, f"the instances of {cut} replaced on the other cells")
    assert seen_suspects == set(lost), f"expected {cut}'s instances SUSPECT first, saw {seen_suspects}"
    assert 1 <= suspects_counted <= len(lost), f"expected the BBS to count suspects, saw {suspects_counted}"
    still_there = cluster.instance_processes("web").get(cut, {})
    assert sorted(still_there) == sorted(lost), f"expected {cut}, unreachable, to run its old instances still"
    # Longer than any call the BBS made to the cut-off rep can wait (its stops of the replaced instances):
    # the rep must learn of them once back, not from a stop that happened to outlive the partition.
    hold_for(replaced, CUT_OFF_S, f"the replacements running while {cut} stays cut off")

    cluster.heal(cut)
    hold_for(lambda: no_index_running_twice(bbs, "web"), SETTLE_S, "at most one RUNNING instance per index")

    def stopped_and_single() -> dict[int, dict]:
        no_index_running_twice(bbs, "web")
        return one_process_per_index(cluster, bbs, "web")

    wait_for(stopped_and_single, 20.0, f"{cut}'s replaced instances stopped once it is back")
    hold_for(lambda: stopped_and_single() is not None, SETTLE_S, "one instance and one process per index")
    bbs.close()


def log_messages(path: Path, after: int) -> list[str]:
    """The `msg` of every JSON log line written past byte `after`."""
    with path.open("rb") as log:
        log.seek(after)
        lines = log.read().decode(errors="replace").splitlines()
    return [json.loads(line)["msg"] for line in lines if line.startswith("{")]


def work_under(token: int, cell_id: str, desired: dict[str, Any]) -> dict[str, Any]:
    """A HostWork placing index 0 of `desired` on `cell_id` under fencing token `token`."""
    placed = {"lrp_groups": [{"desired": 0, "indices": [0]}], "tasks": []}
    return {"desired": [desired], "cells": {cell_id: placed}, "fencing_token": token}


def test_the_leader_auctioneer_cut_off_from_the_database_gives_way_and_no_cell_takes_its_work(
    multihost: Callable[..., MultiHostCluster],
) -> None:
    cluster = multihost(cells=CELLS, separate_auctioneers=True, bbs_args=E2E_BBS_ARGS, rep_args=E2E_REP_ARGS,
                        auctioneer_args=["--lease-ttl", str(LEASE_TTL_S)])
    bbs = BBS(cluster.bbs_url, cluster.verify)
    names = ("auctioneer", "auctioneer-2")
    leader = wait_for(lambda: next((n for n in names if auctioneer_stats(cluster, n)["leader"]), None), 20.0,
                      "an auctioneer to lead")
    standby = next(n for n in names if n != leader)
    old_token = auctioneer_stats(cluster, leader)["fencing_token"]
    bbs.desire("before", CELLS)  # one instance per cell: every cell takes the leader's token
    wait_for(lambda: one_process_per_index(cluster, bbs, "before", CELLS), 30.0, "before: one per cell")
    assert {a["cell_id"] for a in bbs.actuals("before")} == set(cluster.reps)
    log = cluster.log_path(leader)
    log_size = log.stat().st_size
    auctions_before = auctioneer_stats(cluster, leader)["auctions"]

    # Right after a renewal (the worst moment: the longest until the next), the leader's host loses the
    # control host (both BBS replicas, PostgreSQL); it still reaches every cell.
    attempts = auctioneer_stats(cluster, leader)["lease_attempts"]
    wait_for(lambda: auctioneer_stats(cluster, leader)["lease_attempts"] > attempts, 2 * RENEWAL_S,
             "a renewal of the leader's lease", interval=0.02)
    cluster.cut(cluster.host_of(leader), "control")
    # The order of the two, as the test saw them (the first look at which each was so).
    seen: list[str] = []

    def handed_over() -> bool:
        if "stepped down" not in seen and not auctioneer_stats(cluster, leader)["leader"]:
            seen.append("stepped down")
        new = auctioneer_stats(cluster, standby)
        if "took over" not in seen and new["leader"] and new["fencing_token"] > old_token:
            seen.append("took over")
        return expect(len(seen) == 2, f"seen so far: {seen}")

    wait_for(handed_over, LEASE_TTL_S + 5.0, "the leader to step down and the standby to take over")
    assert seen[0] == "stepped down", "the standby led while the old leader still did"
    # It stops as soon as it cannot renew: at its next renewal, once that has gone unanswered for the
    # request timeout (what it logs), not when its last renewal's TTL runs out.
    said = log_messages(log, log_size)
    assert "standby" in said and "stepping down: the lease renewal is overdue" in said, (
        f"the old leader logged {said}")
    assert any(m.startswith("no lease:") for m in said), f"the old leader logged {said}"
    old = auctioneer_stats(cluster, leader)
    assert not old["leader"] and old["lease_problem"] == "no BBS reachable for the lease", old

    # The new leader places work on every cell: each takes its token, and from then on refuses the old one.
    new_token = auctioneer_stats(cluster, standby)["fencing_token"]
    bbs.desire("after", CELLS)
    wait_for(lambda: one_process_per_index(cluster, bbs, "after", CELLS), 30.0, "after: one per cell")
    assert auctioneer_stats(cluster, leader)["auctions"] == auctions_before, "the cut-off leader auctioned"
    replay = bbs.desire("replayed", 0)  # desired, no instance: only a replayed work could start one
    with httpx.Client(verify=client_context(TLSFiles.in_dir(cluster.certs_dir, leader)),
                      timeout=5.0) as old_leader:  # the old leader's own certificate
        for cell_id, rep in cluster.reps.items():
            state = rep_state(rep.url, cell_id, cluster.verify)
            # Work from the old leader, then the new one's, never the other way round nor the old one again.
            assert state["fencing_token"] == new_token, (cell_id, state["fencing_token"])
            assert state["accepted_fencing_tokens"] == [old_token, new_token], (cell_id, state)
            answer = old_leader.post(f"{rep.url}/work", json=work_under(old_token, cell_id, replay))
            assert answer.status_code == 409 and "stale fencing token" in answer.text, (
                f"expected {cell_id} to refuse work under the old token {old_token} (new: {new_token}), "
                f"saw {answer.status_code} {answer.text}")
    assert not cluster.instance_processes("replayed"), "a replayed work of the old leader started an instance"

    # Healed: the old leader stays a standby (the lease is the new leader's), and nothing runs twice.
    cluster.mend(cluster.host_of(leader), "control")

    def settled() -> bool:
        one_process_per_index(cluster, bbs, "before", CELLS)
        one_process_per_index(cluster, bbs, "after", CELLS)
        old, new = auctioneer_stats(cluster, leader), auctioneer_stats(cluster, standby)
        return expect(not old["leader"] and new["leader"] and old["lease_problem"] is None,
                      f"old leader {old['leader']} ({old['lease_problem']}), new leader {new['leader']}")
    wait_for(settled, 10.0, "the old leader back as a standby, one instance per index")
    hold_for(settled, SETTLE_S, "one leader, one instance per index")
    bbs.close()
