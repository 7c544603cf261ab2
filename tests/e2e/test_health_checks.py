"""End to end: continuous health checks (rep/health_monitor.py, docs/health-checks.md) with real processes and
TLS on.

An app that stops answering after it started is stopped and reported CRASHED with `health check failed:
<what failed>` within interval + timeout × threshold (and what reporting takes), shown by the event stream,
`vendue instances` and `vendue why`, then restarted with its crash counted. A healthy app is never
restarted by its checks: 50 instances checked every second for 110 s, not one crash.
"""

from __future__ import annotations

import time

import httpx
import pytest

from common.procutil import app_python
from tests.support.health_apps import STOPS_ANSWERING
from tests.support.metrics import scrape, value

from .conftest import (
    E2ECluster,
    Unmet,
    actual_lrps_in,
    app_processes,
    brief,
    expect,
    hold_for,
    running_ordinary,
    wait_all_running,
    wait_for,
)

pytestmark = [pytest.mark.e2e]

INTERVAL_S, TIMEOUT_S, THRESHOLD = 1.0, 1.0, 3
CHECK = {"interval_s": INTERVAL_S, "invocation_timeout_s": TIMEOUT_S, "failure_threshold": THRESHOLD,
         "timeout_s": 60}
# What the crash may take beyond the checks: the stop (SIGTERM ends the app at once), the rep's lifecycle
# report, the BBS's commit and its event, on a busy 2-core machine.
REPORTING_S = 6.0
HOLD_S = 110.0


def checks_run(c: E2ECluster) -> float:
    """Continuous health checks run by every rep process of the cluster."""
    urls = {rep.url for rep in c.reps.values()}
    return sum(value(scrape(url, c.lc.verify), "vendue_rep_health_checks_total") or 0.0 for url in urls)


@pytest.mark.timeout(240)
def test_an_app_that_stops_answering_is_crashed_with_the_reason_restarted_and_counted(make_cluster) -> None:
    c = make_cluster(cells=2, zones=1)
    events = c.follow_events()
    guid = c.guid("hangs")
    c.bbs.desire(guid, 1, command=[app_python(), "-c", STOPS_ANSWERING], env={"ANSWER_FOR_S": "6"},
                 memory_mb=64, disk_mb=64, health_check={"type": "http", "path": "/ready", **CHECK})
    first = wait_for(lambda: expect(running_ordinary(c.bbs.actuals(guid)).get(0), brief(c.bbs.actuals(guid))),
                     60.0, f"{guid}/0 RUNNING")
    [pid] = wait_for(lambda: app_processes(guid).get(0), 10.0, "the instance's process")

    def refused() -> float:
        try:
            httpx.get(f"http://{first['address']}/ready", timeout=1.0)
        except httpx.ConnectError:
            return time.monotonic()
        raise Unmet(f"{first['address']} still answers")

    stopped_answering = wait_for(refused, 30.0, "the app to stop answering")
    reason = "health check failed: http GET /ready on port 8080: connection refused"

    def crash_event() -> float:
        for ev in events.snapshot():
            for a in actual_lrps_in(ev.data):
                if a["process_guid"] == guid and a.get("crash_reason") == reason and a["crash_count"] >= 1:
                    return ev.at
        seen = [(e.type, actual_lrps_in(e.data)[:1]) for e in events.snapshot()]
        raise Unmet(f"events so far: {seen[-4:]}")

    crashed_at = wait_for(crash_event, 60.0, f"an event with the crash and {reason!r}")
    print(f"crash reported {crashed_at - stopped_answering:.2f}s after the app's last answer")
    bound = INTERVAL_S + TIMEOUT_S * THRESHOLD + REPORTING_S
    assert crashed_at - stopped_answering <= bound, (
        f"expected the crash reported within {bound:g}s of the app's last answer, saw "
        f"{crashed_at - stopped_answering:.1f}s")
    wait_for(lambda: expect(0 not in app_processes(guid) or pid not in app_processes(guid)[0],
                            app_processes(guid)), 10.0, f"the unhealthy process {pid} stopped")

    def restarted() -> dict:
        actuals = c.bbs.actuals(guid)
        again = running_ordinary(actuals).get(0)
        new = again is not None and again["instance_guid"] != first["instance_guid"]
        return expect(new and again is not None and again["crash_count"] >= 1 and again, brief(actuals))

    again = wait_for(restarted, 60.0, f"{guid}/0 RUNNING again, a new instance, its crash counted")
    assert again["crash_reason"] == reason

    listed = c.cli("instances", guid)
    assert listed.code == 0, listed.output
    assert "health check failed: http GET /ready on port 8080" in listed.stdout, listed.stdout
    why = c.cli("why", guid)
    assert why.code == 0 and "last crash: health check failed: http GET /ready" in why.stdout, why.output


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("transport", ["http"])  # the checks are the rep's own: no transport in them
def test_healthy_instances_are_never_restarted_by_their_checks(make_cluster) -> None:
    c = make_cluster(cells=2, zones=1)
    events = c.follow_events()
    apps = {c.guid("portchecked"): {"type": "port", **CHECK},
            c.guid("httpchecked"): {"type": "http", **CHECK}}
    for guid, check in apps.items():
        c.bbs.desire(guid, 25, disk_mb=32, health_check=check)
    running = {guid: wait_all_running(c.bbs, guid, 25, timeout=180.0) for guid in apps}
    # What each index runs, and its crashes so far (a start can fail on a busy machine: not the checks').
    instances = {guid: {i: (a["instance_guid"], a["crash_count"]) for i, a in r.items()}
                 for guid, r in running.items()}
    processes = {guid: app_processes(guid) for guid in apps}
    checks_before = checks_run(c)

    def untouched() -> bool:
        for guid in apps:
            actuals = c.bbs.actuals(guid)
            now = {i: (a["instance_guid"], a["crash_count"]) for i, a in running_ordinary(actuals).items()}
            if now != instances[guid] or len(actuals) != 25:
                raise Unmet(f"{guid}: {brief(actuals)}")
        return True

    hold_for(untouched, HOLD_S, "every instance RUNNING as started, not one crash", interval=2.0)
    assert {guid: app_processes(guid) for guid in apps} == processes, "the same processes throughout"
    checked = checks_run(c) - checks_before
    # Every instance checked about once a second (a tenth early at most): most of the checks ran.
    assert checked >= 50 * HOLD_S * 0.8, f"expected about {50 * HOLD_S:g} checks, saw {checked:g}"
    unhealthy = [a for ev in events.snapshot() for a in actual_lrps_in(ev.data) if a["process_guid"] in apps
                 and a.get("crash_reason", "").startswith("health check")]
    assert unhealthy == [], f"expected no health check crash on the event stream, saw {unhealthy[:3]}"
