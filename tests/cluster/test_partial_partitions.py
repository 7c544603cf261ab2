"""Partitions that cut some links and leave others (tests/cluster/multihost.py; transport http, TLS on).

- A cell cut off from the BBS (and its database) but not from the auctioneers, which run on hosts of
  their own: it is lost to the BBS like a dead cell (its instances SUSPECT, then replaced elsewhere), the
  auctioneers, which still reach it, place nothing more on it (it is no longer among the BBS's cells), and
  what is desired meanwhile runs on the others. Once mended, it stops what was replaced.
- The converse, a cell cut off from both auctioneers but not from the BBS: it stays present and keeps
  its instances (nothing is SUSPECT, nothing replaced), the BBS still stops what is scaled away on it,
  and the auctions, which cannot get its state, place what is desired meanwhile on the others.
- A BBS replica (on a host of its own) cut off from PostgreSQL: the other replica serves, every client
  (the test's, the reps', the auctioneers') fails over to it, nothing acknowledged is lost, nothing runs
  twice and nothing is replaced (no presence expires); once mended, the first replica serves the same
  data, and what it had still to write from before the cut (a late heartbeat) changes nothing.

After each, every desired index is RUNNING exactly once, and exactly one process runs for it on the host
the BBS names, none elsewhere (read from the hosts' namespaces, not from the BBS). Needs root and `ip`
(skipped otherwise, saying why).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import httpx
import pytest

from common.failover import FailoverTransport
from tests.e2e.conftest import BBS, PRESENCE_TTL_S, brief, expect, hold_for, wait_for
from tests.e2e.conftest import BBS_ARGS as E2E_BBS_ARGS
from tests.e2e.conftest import REP_ARGS as E2E_REP_ARGS
from tests.support.partition_checks import (
    CUT_OFF_S,
    SETTLE_S,
    no_index_running_twice,
    one_process_per_index,
    running_by_index,
)

from .multihost import CONTROL, MultiHostCluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

CELLS = 3
INSTANCES = 6
MORE = 8  # scaled up to while the cut lasts: new indices that must run elsewhere
FEWER = 3  # or down to
AUCTIONEER_HOSTS = ("auctioneer-1", "auctioneer-2")
PLACED_S = 30.0


def guids_on(bbs: BBS, process_guid: str, cell_id: str) -> dict[int, str]:
    return {a["index"]: a["instance_guid"] for a in bbs.actuals(process_guid) if a["cell_id"] == cell_id}


def busiest_cell(bbs: BBS, process_guid: str) -> str:
    return Counter(a["cell_id"] for a in bbs.actuals(process_guid)).most_common(1)[0][0]


def settled(cluster: MultiHostCluster, bbs: BBS, apps: dict[str, int]) -> bool:
    for process_guid, instances in apps.items():
        no_index_running_twice(bbs, process_guid)
        one_process_per_index(cluster, bbs, process_guid, instances)
    return True


def test_a_cell_cut_off_from_the_bbs_but_not_from_the_auctioneers_is_replaced_and_gets_no_new_work(
    multihost: Callable[..., MultiHostCluster],
) -> None:
    cluster = multihost(cells=CELLS, separate_auctioneers=True, bbs_args=E2E_BBS_ARGS, rep_args=E2E_REP_ARGS)
    bbs = BBS(cluster.bbs_url, cluster.verify)
    bbs.desire("web", INSTANCES)
    wait_for(lambda: settled(cluster, bbs, {"web": INSTANCES}), PLACED_S, f"{INSTANCES} instances, one each")
    cut = busiest_cell(bbs, "web")
    lost = guids_on(bbs, "web", cut)

    cluster.cut(cut, CONTROL)  # the BBS replicas and PostgreSQL; both auctioneers still reach it

    def replaced() -> bool:
        """Never two ORDINARY RUNNING instances for an index; done when the lost indices run elsewhere."""
        actuals = bbs.actuals("web")
        for index, rows in running_by_index(actuals).items():
            if sum(a["presence"] == "ORDINARY" for a in rows) > 1:
                raise AssertionError(f"index {index} ran twice while {cut} was cut off: {brief(rows)}")
        moved = {a["index"] for a in actuals if a["index"] in lost and a["state"] == "RUNNING"
                 and a["presence"] == "ORDINARY" and a["cell_id"] != cut}
        present = {c["cell_id"] for c in bbs.cells()}
        return expect(moved == set(lost) and cut not in present, f"{cut} present: {cut in present}, "
                      f"lost {sorted(lost)}: {brief(actuals)}")

    wait_for(replaced, 4 * PRESENCE_TTL_S + 15.0, f"the instances of {cut} replaced on the other cells")
    # New work while it is still cut off: only on the cells the BBS lists, though the auctioneers reach it.
    bbs.scale("web", MORE)
    bbs.desire("api", CELLS)
    new = {index for index in range(INSTANCES, MORE)}

    def new_work_elsewhere() -> bool:
        replaced()
        placed = [a for a in bbs.actuals("web") if a["index"] in new] + bbs.actuals("api")
        if any(a["cell_id"] == cut for a in placed):
            raise AssertionError(f"new work placed on {cut}, cut off from the BBS: {brief(placed)}")
        running = [a for a in placed if a["state"] == "RUNNING"]
        return expect(len(running) == len(new) + CELLS, brief(placed))

    wait_for(new_work_elsewhere, PLACED_S, "the new work running on the other cells")
    assert cluster.instance_processes("api").get(cut) is None, f"an api process on {cut}"
    hold_for(new_work_elsewhere, CUT_OFF_S, f"nothing on {cut} while it stays cut off")

    cluster.mend(cut, CONTROL)
    wait_for(lambda: settled(cluster, bbs, {"web": MORE, "api": CELLS}), 20.0,
             f"{cut}'s replaced instances stopped once it is back")
    hold_for(lambda: settled(cluster, bbs, {"web": MORE, "api": CELLS}), SETTLE_S, "one process per index")
    bbs.close()


def test_a_cell_cut_off_from_the_auctioneers_but_not_from_the_bbs_keeps_its_instances(
    multihost: Callable[..., MultiHostCluster],
) -> None:
    cluster = multihost(cells=CELLS, separate_auctioneers=True, bbs_args=E2E_BBS_ARGS, rep_args=E2E_REP_ARGS)
    bbs = BBS(cluster.bbs_url, cluster.verify)
    bbs.desire("web", INSTANCES)
    wait_for(lambda: settled(cluster, bbs, {"web": INSTANCES}), PLACED_S, f"{INSTANCES} instances, one each")
    cut = busiest_cell(bbs, "web")
    kept = guids_on(bbs, "web", cut)

    for auctioneer in AUCTIONEER_HOSTS:
        cluster.cut(cut, auctioneer)

    def untouched() -> bool:
        """The cut cell stays present and keeps the same instances, none SUSPECT; no index runs twice."""
        no_index_running_twice(bbs, "web")
        actuals = bbs.actuals("web")
        if any(a["presence"] != "ORDINARY" for a in actuals):
            raise AssertionError(f"an instance changed presence, {cut} reaching the BBS: {brief(actuals)}")
        if cut not in {c["cell_id"] for c in bbs.cells()}:
            raise AssertionError(f"{cut} lost its presence, its BBS link intact")
        return True

    hold_for(lambda: untouched() and guids_on(bbs, "web", cut) == kept, 2 * PRESENCE_TTL_S,
             f"{cut} keeping {sorted(kept)}")
    # New work: the auctions get no state from the cut cell and place it on the others.
    bbs.desire("api", CELLS)
    wait_for(lambda: untouched() and one_process_per_index(cluster, bbs, "api", CELLS), PLACED_S,
             "api running on the cells the auctioneers reach")
    assert all(a["cell_id"] != cut for a in bbs.actuals("api")), brief(bbs.actuals("api"))
    # Scaled down: the BBS stops the instances it no longer wants, on the cut cell too.
    bbs.scale("web", FEWER)
    wait_for(lambda: untouched() and settled(cluster, bbs, {"web": FEWER}), PLACED_S,
             f"web scaled down to {FEWER}, on {cut} too")
    assert guids_on(bbs, "web", cut) == {i: g for i, g in kept.items() if i < FEWER}

    for auctioneer in AUCTIONEER_HOSTS:
        cluster.mend(cut, auctioneer)
    bbs.scale("web", INSTANCES)
    wait_for(lambda: settled(cluster, bbs, {"web": INSTANCES, "api": CELLS}), PLACED_S, "web back to six")
    hold_for(
        lambda: settled(cluster, bbs, {"web": INSTANCES, "api": CELLS}), SETTLE_S, "one process per index"
    )
    bbs.close()


def failover_bbs(cluster: MultiHostCluster) -> BBS:
    """The test's BBS client over both replicas, as the CLI and every component has it."""
    bbs = BBS(cluster.bbs_url, cluster.verify)
    bbs.http.close()
    bbs.http = httpx.Client(base_url=cluster.bbs_urls[0], timeout=10.0,
                            transport=FailoverTransport(cluster.bbs_urls, verify=cluster.verify))
    return bbs


def test_a_bbs_replica_cut_off_from_the_database_gives_way_to_the_other(
    multihost: Callable[..., MultiHostCluster],
) -> None:
    # The presence TTL as deployed (10 s), not the other tests' 2 s: the replica may be cut off while it
    # holds the write lock, and the database needs seconds to give its session up (bbs/store/database.py),
    # which the other replica's writes, heartbeats among them, wait out.
    cluster = multihost(cells=CELLS, separate_bbs=True, bbs_args=["--convergence-interval", "0.5"])
    bbs = failover_bbs(cluster)
    bbs.desire("before", CELLS)
    wait_for(lambda: settled(cluster, bbs, {"before": CELLS}), PLACED_S, "before running")
    before = {a["index"]: a["instance_guid"] for a in bbs.actuals("before")}

    cluster.cut(cluster.host_of("bbs"), CONTROL)  # the first replica, which every client tries first
    bbs.desire("during", CELLS)  # acknowledged by the other replica
    bbs.scale("before", CELLS + 1)
    acknowledged = {"before": CELLS + 1, "during": CELLS}
    wait_for(lambda: settled(cluster, bbs, acknowledged), PLACED_S, "the writes made through bbs-2 running")
    same = {a["index"]: a["instance_guid"] for a in bbs.actuals("before") if a["index"] < CELLS}
    assert same == before, f"instances replaced while a BBS replica lost its database: {before} -> {same}"
    hold_for(lambda: settled(cluster, bbs, acknowledged), SETTLE_S, "one process per index")

    cluster.mend(cluster.host_of("bbs"), CONTROL)
    with httpx.Client(base_url=cluster.bbs_url, verify=cluster.verify, timeout=10.0) as first:
        def first_serves() -> bool:
            items = first.get("/v1/desired_lrps").json()["items"]
            return expect({d["process_guid"]: d["instances"] for d in items} == acknowledged, items)

        wait_for(first_serves, 20.0, "the first replica serving every acknowledged write")
    hold_for(lambda: settled(cluster, bbs, acknowledged), SETTLE_S, "one process per index")
    bbs.close()
