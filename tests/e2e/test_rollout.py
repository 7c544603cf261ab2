"""End to end: versions and rollouts on real clusters (TLS, 2 zones, process executor): a rolling update of 6
instances never below 6 RUNNING and every index ends on the new version; restarts; a new version that exits
at once, or never passes its start health check, rolls back while the old keeps serving; the BBS killed (-9)
mid-rollout, restarted, finishes it; an update no cell can hold pauses with the placement error; under --ha,
the convergence leader killed mid-rollout, the other replica finishes it."""

from __future__ import annotations

import signal
from typing import Any

import httpx
import pytest

from common.procutil import app_python
from tests.support.running_poller import RunningPoller

from .conftest import APP_SOURCE, E2ECluster, ask_instance, brief, expect, wait_all_running, wait_for

pytestmark = [pytest.mark.e2e]

FIRST_PLACEMENT_S = 60.0  # as test_cells.py: the first start may precede the auctioneer's lease
ROLLOUT_S = 150.0


def admin(c: E2ECluster) -> httpx.Client:
    client: httpx.Client = c.lc.http_client(base_url=c.lc.bbs_url, timeout=10.0)
    return client


def change(c: E2ECluster, guid: str, body: dict[str, Any], method: str = "PUT") -> dict[str, Any]:
    with admin(c) as http:
        response = http.request(method, f"/v1/desired_lrps/{guid}", json=body)
    assert response.status_code == 200, (
        f"expected 200 changing {guid}, saw {response.status_code}: {response.text}")
    return dict(response.json())


def rollout_of(c: E2ECluster, guid: str) -> dict[str, Any]:
    with admin(c) as http:
        response = http.get(f"/v1/desired_lrps/{guid}/rollout")
    response.raise_for_status()
    return dict(response.json())


def wait_rollout(c: E2ECluster, guid: str, states: set[str], timeout: float = ROLLOUT_S) -> dict[str, Any]:
    def ended() -> dict[str, Any]:
        r = rollout_of(c, guid)
        return expect(r if r["state"] in states else None, {**r, "actuals": brief(c.bbs.actuals(guid))})

    return wait_for(ended, timeout, f"the rollout of {guid} {' or '.join(sorted(states))}")


def definition(**fields: Any) -> dict[str, Any]:
    """A whole definition (PUT) of the test app, as conftest's BBS.desire makes it."""
    return {"command": [app_python(), "-c", APP_SOURCE], "memory_mb": 128, "disk_mb": 128, "ports": [8080],
            **fields}


def versions_by_index(c: E2ECluster, guid: str, instances: int) -> dict[int, int]:
    return {i: a["version"] for i, a in wait_all_running(c.bbs, guid, instances).items()}


@pytest.mark.timeout(420)
def test_a_rolling_update_never_drops_below_the_desired_count_and_every_index_ends_on_it(
    make_cluster: Any,
) -> None:
    c = make_cluster(cells=4, zones=2)
    guid = c.guid("rolling")
    c.bbs.desire(guid, 6, command=definition()["command"])
    before = wait_all_running(c.bbs, guid, 6, timeout=FIRST_PLACEMENT_S)
    assert {a["version"] for a in before.values()} == {1}
    with RunningPoller(lambda: admin(c), guid, 6) as poller:
        answer = change(c, guid, {**definition(env={"RELEASE": "2"}), "rollout": {"max_in_flight": 2}})
        assert answer["new_version"] is True and answer["rollout"]["to_version"] == 2, answer
        done = wait_rollout(c, guid, {"completed", "failed", "paused", "rolled_back"})
        assert done["state"] == "completed" and (done["done"], done["total"]) == (6, 6), done
    poller.never_below(6)
    after = wait_all_running(c.bbs, guid, 6)
    assert {i: a["version"] for i, a in after.items()} == dict.fromkeys(range(6), 2), (
        brief(c.bbs.actuals(guid)))
    assert not {a["instance_guid"] for a in after.values()} & {a["instance_guid"] for a in before.values()}

    # A rolling restart (same version, new instances), then one instance alone.
    with RunningPoller(lambda: admin(c), guid, 6) as poller:
        with admin(c) as http:
            restart = http.post(f"/v1/desired_lrps/{guid}/restart", json={"max_in_flight": "50%"})
        assert restart.status_code == 200 and restart.json()["kind"] == "restart", restart.text
        assert restart.json()["max_in_flight"] == 3
        done = wait_rollout(c, guid, {"completed", "failed", "paused"})
        assert done["state"] == "completed", done
    poller.never_below(6)
    restarted = wait_all_running(c.bbs, guid, 6)
    assert not {a["instance_guid"] for a in restarted.values()} & {a["instance_guid"] for a in after.values()}
    assert {a["version"] for a in restarted.values()} == {2}
    with admin(c) as http:
        assert http.post(f"/v1/desired_lrps/{guid}/instances/4/restart", json={}).status_code == 202
    wait_for(lambda: expect(wait_all_running(c.bbs, guid, 6, timeout=1.0)[4]["instance_guid"]
                            != restarted[4]["instance_guid"], brief(c.bbs.actuals(guid))),
             60.0, "index 4 restarted as a new instance")


# A new version that exits at once, and one that never passes its start health check (it listens on no
# port; the rep gives up after the check's 2 s start timeout and reports it crashed).
BAD_VERSIONS = {
    "exits": {"command": ["python3", "-c", "import sys; sys.exit(3)"]},
    "unhealthy": {"command": ["python3", "-c", "import time; time.sleep(600)"],
                  "health_check": {"type": "port", "timeout_s": 2}},
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("bad", sorted(BAD_VERSIONS))
def test_a_bad_new_version_rolls_back_and_the_old_keeps_serving(make_cluster: Any, bad: str) -> None:
    c = make_cluster(cells=4, zones=2)
    guid = c.guid("badver")
    c.bbs.desire(guid, 6, command=definition()["command"])
    before = wait_all_running(c.bbs, guid, 6, timeout=FIRST_PLACEMENT_S)
    fields = {**BAD_VERSIONS[bad], "command": [app_python(), *BAD_VERSIONS[bad]["command"][1:]]}
    with RunningPoller(lambda: admin(c), guid, 6) as poller:
        change(c, guid, definition(**fields))
        done = wait_rollout(c, guid, {"rolled_back", "failed", "completed", "paused"})
    assert done["state"] == "rolled_back" and "version 2" in (done["reason"] or ""), done
    poller.never_below(6, min_polls=2)  # a crash at once is rolled back within a second or so
    with admin(c) as http:
        desired = http.get(f"/v1/desired_lrps/{guid}").json()
    assert desired["version"] == 1 and desired["command"] == definition()["command"], desired
    after = wait_all_running(c.bbs, guid, 6, timeout=60.0)
    assert {i: a["instance_guid"] for i, a in after.items()} == {
        i: a["instance_guid"] for i, a in before.items()}, "the same old instances, never replaced"
    for a in after.values():
        assert ask_instance(a["address"]).instance_guid == a["instance_guid"]


@pytest.mark.timeout(420)
def test_the_bbs_killed_mid_rollout_and_restarted_finishes_it(make_cluster) -> None:
    c = make_cluster(cells=4, zones=2)
    guid = c.guid("survivor")
    c.bbs.desire(guid, 6, command=definition()["command"])
    wait_all_running(c.bbs, guid, 6, timeout=FIRST_PLACEMENT_S)
    change(c, guid, {**definition(env={"RELEASE": "2"}), "rollout": {"max_in_flight": 1}})
    wait_for(lambda: expect(rollout_of(c, guid)["done"] >= 1, rollout_of(c, guid)), 90.0,
             "the rollout under way")
    c.lc.kill("bbs", signal.SIGKILL)
    c.lc.restart("bbs")
    done = wait_rollout(c, guid, {"completed", "failed", "paused", "rolled_back"})
    assert done["state"] == "completed" and done["done"] == 6, done
    assert versions_by_index(c, guid, 6) == dict.fromkeys(range(6), 2), brief(c.bbs.actuals(guid))


@pytest.mark.timeout(300)
def test_an_update_no_cell_can_hold_pauses_with_the_placement_error(make_cluster) -> None:
    c = make_cluster(cells=2, zones=2)
    guid = c.guid("toobig")
    c.bbs.desire(guid, 2, command=definition()["command"])
    before = wait_all_running(c.bbs, guid, 2, timeout=FIRST_PLACEMENT_S)
    change(c, guid, {**definition(memory_mb=1_000_000), "rollout": {"auto_revert": False}})
    done = wait_rollout(c, guid, {"paused", "failed", "completed", "rolled_back"}, timeout=90.0)
    assert done["state"] == "paused" and "cannot be placed" in (done["reason"] or ""), done
    assert "memory" in done["reason"], done
    after = wait_all_running(c.bbs, guid, 2, timeout=30.0)
    assert {i: a["instance_guid"] for i, a in after.items()} == {
        i: a["instance_guid"] for i, a in before.items()}


def convergence_leader(lc: Any) -> str:
    """The BBS replica holding the convergence lease ("" while none answers or holds it)."""
    for url in lc.bbs_urls:
        try:
            response = httpx.get(f"{url}/v1/leases/convergence", timeout=2.0, verify=lc.verify)
        except httpx.HTTPError:
            continue
        if response.status_code == 200:
            pid = int(response.json()["owner"].split(":")[1])
            return next((name for name, p in lc.pids().items() if p == pid), "")
    return ""


@pytest.mark.timeout(300)
def test_the_convergence_leader_killed_mid_rollout_the_other_replica_finishes_it(
    tmp_path: Any, fresh_postgres_database: str
) -> None:
    from deploy.cluster import LocalCluster

    from .conftest import BBS_ARGS, REP_ARGS

    lc = LocalCluster(
        tmp_path / "cluster", cells=4, zones=2, executor="sim", sim_cells_per_process=4, ha=True,
        database_url=fresh_postgres_database, bbs_args=[*BBS_ARGS, "--lease-ttl", "3"],
        auctioneer_args=["--lease-ttl", "3"], rep_args=list(REP_ARGS),
    )
    try:
        lc.start(timeout=90.0)
        guid, n = "ha-rollout", 20
        body = {"process_guid": guid, "instances": n, "memory_mb": 16, "disk_mb": 16,
                "command": ["sleep", "infinity"]}
        with lc.http_client(base_url=lc.bbs_urls[0], timeout=30.0) as http:
            assert http.post("/v1/desired_lrps", json=body).status_code == 201

        def running_on(version: int) -> int:
            for url in lc.bbs_urls:
                try:
                    with lc.http_client(base_url=url, timeout=5.0) as http:
                        rows = http.get("/v1/actual_lrps", params={"process_guid": guid}).json()["items"]
                except httpx.HTTPError:
                    continue
                return len({a["index"] for a in rows if a["state"] == "RUNNING" and a["version"] == version
                            and a["presence"] == "ORDINARY"})
            return 0

        wait_for(lambda: expect(running_on(1) == n, running_on(1)), 60.0, f"{n} instances RUNNING")
        leader = wait_for(lambda: expect(convergence_leader(lc), "no leader"), 30.0, "a convergence leader")
        update = {**{k: v for k, v in body.items() if k != "instances"}, "env": {"RELEASE": "2"},
                  "rollout": {"max_in_flight": 1}}
        with lc.http_client(base_url=lc.bbs_urls[0], timeout=30.0) as http:
            assert http.put(f"/v1/desired_lrps/{guid}", json=update).status_code == 200
        wait_for(lambda: expect(running_on(2) >= 3, running_on(2)), 60.0, "the rollout under way")
        lc.kill(leader, signal.SIGKILL)
        other = wait_for(lambda: expect(convergence_leader(lc) not in ("", leader) and convergence_leader(lc),
                                        convergence_leader(lc)), 30.0, "the other replica leading")
        assert other != leader
        wait_for(lambda: expect(running_on(2) == n, running_on(2)), 120.0, f"all {n} indices on version 2")

        def completed() -> dict[str, Any]:
            seen: Any = "no BBS answered"
            for url in lc.bbs_urls:
                try:
                    with lc.http_client(base_url=url, timeout=5.0) as http:
                        seen = http.get(f"/v1/desired_lrps/{guid}/rollout").json()
                except httpx.HTTPError:
                    continue
                return expect(seen if seen["state"] == "completed" else None, seen)
            return expect(None, seen)

        rollout = wait_for(completed, 30.0, "the rollout completed")
        assert rollout["done"] == n, rollout
    finally:
        lc.stop()
