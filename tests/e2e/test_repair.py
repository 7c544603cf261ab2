"""End to end: repair after a kill -9 of the BBS does not wait for --stale-unclaimed.

The BBS is killed just after it acknowledged a desire, before the auctioneer had the start request, and
started again as `vendue up`'s supervisor would: it takes the convergence lease back at once (same URL)
and, knowing of nothing in flight, auctions the UNCLAIMED instances in its first pass
(bbs/operations/convergence.py, "In flight").

The test sets --stale-unclaimed far beyond its wait, so only that first pass can run the instances: the
bound of the wait is no figure (a loaded machine stretches it). How long the repair takes is what
tests/bench/kill_repair.py measures (target: the presence TTL + 5 s; docs/benchmarks.md).
"""

from __future__ import annotations

import signal

import pytest

from .conftest import wait_all_running

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

INSTANCES = 6
TTL_S = 10.0  # the BBS's default; the e2e clusters' 2 s would expire every cell while the BBS restarts
STALE_UNCLAIMED_S = 600.0  # the fallback that repaired it before, out of reach
WAIT_S = 90.0


@pytest.mark.timeout(240)
def test_a_bbs_killed_just_after_a_desire_runs_it_at_its_restart_not_when_it_goes_stale(make_cluster):
    ttl = ["--presence-ttl", str(TTL_S)]
    c = make_cluster(cells=2, zones=1, bbs_args=[*ttl, "--stale-unclaimed", str(STALE_UNCLAIMED_S)],
                     rep_args=ttl)
    web = c.guid("web")
    c.bbs.desire(web, INSTANCES)
    c.lc.kill("bbs", signal.SIGKILL)
    c.lc.restart("bbs", timeout=60.0)
    wait_all_running(c.bbs, web, INSTANCES, timeout=WAIT_S, answer=False)
