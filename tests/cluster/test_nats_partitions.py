"""Transport nats on real network hosts: NATS is a cluster of three servers, each on a host of its own,
routed to one another over mutual TLS, and every component is given all three URLs (multihost.py).

- One server killed, or cut off from everything: its clients (found from the kernel's socket tables, not
  from what they say) move to the other servers within a few pings, the others keep their connection,
  and nothing else happens: the running instances stay as they are (same instance guids, one process
  per index), and new work is placed at once.
- All three cut off from everyone for NATS_CUT_S: the auctioneers notice and give their server up, the
  instances keep running meanwhile (presence is HTTP) and nothing is replaced; once healed, every
  component reconnects, what was desired during the cut is placed once, and work flows again.

Needs root and `ip` (skipped otherwise, saying why).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import pytest

from common.transport.nats_connection import MAX_OUTSTANDING_PINGS, PING_INTERVAL_S
from tests.e2e.conftest import BBS, expect, hold_for, wait_for
from tests.e2e.conftest import BBS_ARGS as E2E_BBS_ARGS
from tests.e2e.conftest import REP_ARGS as E2E_REP_ARGS
from tests.support.partition_checks import auctioneer_stats, no_index_running_twice, one_process_per_index

from .multihost import NATS_HOSTS, MultiHostCluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

CELLS = 3
INSTANCES = 3
# How long a client may take to give up a server that went silent (the pings it sends unanswered, and
# the tick it notices on), and then to connect to another (its connect timeout, should it try the lost
# server first).
SILENT_SERVER_S = (MAX_OUTSTANDING_PINGS + 2) * PING_INTERVAL_S
RECONNECT_S = SILENT_SERVER_S + 2 * 2.0 + 2.0
# What a machine loaded by other tests adds to RECONNECT_S: the pings and the new TLS handshake wait for a
# core (14 s was overrun by a second on CI's two cores with four test workers).
LOADED_RECONNECT_S = RECONNECT_S + 10.0
# The whole NATS cluster cut off this long: twice what every client takes to give its server up, and
# longer than the BBS's and the auctioneer's request timeouts (5 s), so that each of them sees NATS gone.
NATS_CUT_S = 2 * SILENT_SERVER_S
PLACED_S = 30.0  # for new work to run: an auction, a start, a claim


def one_server_each(cluster: MultiHostCluster) -> dict[str, str]:
    """Component -> its NATS server, for those connected to exactly one."""
    return {c: next(iter(servers)) for c, servers in cluster.nats_clients().items() if len(servers) == 1}


def placed_guids(bbs: BBS, process_guid: str) -> dict[int, str]:
    return {a["index"]: a["instance_guid"] for a in bbs.actuals(process_guid)}


def unchanged(cluster: MultiHostCluster, bbs: BBS, process_guid: str, before: dict[int, str]) -> bool:
    """The app's instances are the same ones (nothing replaced or restarted), one process each."""
    no_index_running_twice(bbs, process_guid)
    running = one_process_per_index(cluster, bbs, process_guid, len(before))
    now = {index: actual["instance_guid"] for index, actual in running.items()}
    if now != before:
        raise AssertionError(f"{process_guid}'s instances changed: {before} -> {now}")
    return True


@pytest.mark.parametrize("fault", ["kill", "partition"])
def test_one_nats_server_lost_costs_its_clients_a_reconnect_and_nothing_else(
    multihost: Callable[..., MultiHostCluster], fault: str,
) -> None:
    cluster = multihost(cells=CELLS, transport="nats", bbs_args=E2E_BBS_ARGS, rep_args=E2E_REP_ARGS)
    bbs = BBS(cluster.bbs_url, cluster.verify)
    bbs.desire("before", INSTANCES)
    wait_for(lambda: one_process_per_index(cluster, bbs, "before", INSTANCES), PLACED_S, "before running")
    before = placed_guids(bbs, "before")
    components = set(cluster.pids())
    clients = wait_for(lambda: expect(set(found := one_server_each(cluster)) == components and found, found),
                       10.0, f"each of {sorted(components)} connected to one NATS server")
    lost = Counter(clients.values()).most_common(1)[0][0]  # the server with the most clients
    moving = sorted(c for c, server in clients.items() if server == lost)
    staying = {c: server for c, server in clients.items() if server != lost}

    if fault == "kill":
        cluster.kill(lost)
    else:
        cluster.partition(NATS_HOSTS[lost])

    def reconnected() -> dict[str, set[str]]:
        now = cluster.nats_clients()
        # Moved: connected to another server. Behind a partition, the old socket may linger beside the new
        # one (its close waits to flush what was queued to a peer that no longer answers, until TCP gives
        # up); once killed, the server's end closes it at once.
        ok = (all(now.get(c, set()) - {lost} and (fault == "partition" or lost not in now[c]) for c in moving)
              and all(now.get(c) == {server} for c, server in staying.items()))
        return expect(ok and now, f"{moving} leaving {lost}, {sorted(staying)} staying: {now}")

    wait_for(reconnected, LOADED_RECONNECT_S, f"the clients of {lost} ({fault}) on the other servers")
    for name in ("auctioneer", "auctioneer-2"):  # the auctioneers also count their reconnects
        nats = auctioneer_stats(cluster, name)["nats"]
        assert nats["connected"] and nats["reconnects"] == (1 if name in moving else 0), (name, lost, nats)

    # Nothing else: the instances stay as they were, and new work is placed at once.
    bbs.desire("after", INSTANCES)
    wait_for(lambda: unchanged(cluster, bbs, "before", before)
             and one_process_per_index(cluster, bbs, "after", INSTANCES), PLACED_S, "after placed")
    hold_for(lambda: unchanged(cluster, bbs, "before", before), 1.0, "before unchanged")
    bbs.close()


def test_nats_cut_off_from_everyone_and_everything_recovers_once_healed(
    multihost: Callable[..., MultiHostCluster],
) -> None:
    cluster = multihost(cells=CELLS, transport="nats", bbs_args=E2E_BBS_ARGS, rep_args=E2E_REP_ARGS)
    bbs = BBS(cluster.bbs_url, cluster.verify)
    bbs.desire("before", INSTANCES)
    wait_for(lambda: one_process_per_index(cluster, bbs, "before", INSTANCES), PLACED_S, "before running")
    before = placed_guids(bbs, "before")
    components = set(cluster.pids())
    wait_for(lambda: expect(set(found := cluster.nats_clients()) == components, found), 10.0,
             "every component connected to NATS")

    for host in NATS_HOSTS.values():
        cluster.partition(host)
    cut_at = time.monotonic()
    bbs.desire("during", INSTANCES)  # the BBS takes it (HTTP); its start requests wait for NATS
    # Meanwhile the instances keep running, the same ones (presence is HTTP: no cell is lost).
    hold_for(lambda: unchanged(cluster, bbs, "before", before), SILENT_SERVER_S, "before unchanged")
    # The auctioneers say they gave their server up (the kernel's socket table cannot: a client's close
    # may wait to flush to a server that no longer answers, as in the test above).
    auctioneers = ("auctioneer", "auctioneer-2")
    wait_for(lambda: expect(not any(auctioneer_stats(cluster, a)["nats"]["connected"] for a in auctioneers),
                            {a: auctioneer_stats(cluster, a)["nats"] for a in auctioneers}),
             max(0.1, NATS_CUT_S - (time.monotonic() - cut_at)) + LOADED_RECONNECT_S - RECONNECT_S,
             "the auctioneers giving their NATS server up")
    hold_for(lambda: unchanged(cluster, bbs, "before", before),
             max(0.1, NATS_CUT_S - (time.monotonic() - cut_at)), "before unchanged")

    for host in NATS_HOSTS.values():
        cluster.heal(host)
    wait_for(lambda: expect(set(found := cluster.nats_clients()) == components, found), LOADED_RECONNECT_S,
             "every component reconnected to NATS")
    bbs.desire("after", INSTANCES)
    wait_for(lambda: unchanged(cluster, bbs, "before", before)
             and one_process_per_index(cluster, bbs, "during", INSTANCES)
             and one_process_per_index(cluster, bbs, "after", INSTANCES), PLACED_S,
             "during and after placed once NATS is back")
    hold_for(lambda: all(no_index_running_twice(bbs, app) for app in ("before", "during", "after")), 1.0,
             "one instance per index")
    bbs.close()
