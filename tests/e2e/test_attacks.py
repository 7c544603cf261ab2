"""Attacks tried against a real cluster: BBS, auctioneer and two reps as separate
processes with TLS on, real child processes on the reps.

Each attack is made the way a stranger on the network (or a component gone rogue) would make it, with
httpx and certificates of its own: no certificate, one from another CA, or a genuine certificate of the
wrong role or for the wrong cell. Each test checks the answer (handshake refused, 401, 403 or 409) and
that the attack changed nothing: the forged command never ran, the other cell's instances are
untouched, the lease still names its holder, and the real auctioneer keeps placing work.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from common.tls import CA_CERT, TLSFiles, client_context, init_ca, issue

from .conftest import (
    E2ECluster,
    _start_cluster,
    _stop_clusters,
    brief,
    expect,
    wait_all_running,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SECOND = 2**62  # the forged fencing token of the issue: far above any real term


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2ECluster]:
    started: list[E2ECluster] = []
    try:
        yield _start_cluster(started, tmp_path_factory.mktemp("attacks"), "http", cells=2, zones=1)
    finally:
        _stop_clusters(started)


def as_caller(c: E2ECluster, files: TLSFiles | None, *, token: str | None = None,
              base_url: str = "") -> httpx.Client:
    """An HTTPS client trusting the cluster's CA, presenting `files` (None: no certificate) and a token."""
    verify = client_context(files, ca=c.lc.certs_dir / CA_CERT)
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=base_url or c.lc.bbs_url, verify=verify, headers=headers, timeout=10.0)


def certificate(c: E2ECluster, name: str) -> TLSFiles:
    """A certificate the cluster's launcher issued (its components', and `admin`)."""
    return TLSFiles.in_dir(c.lc.certs_dir, name)


def rep_url(c: E2ECluster, cell_id: str) -> str:
    return c.reps[cell_id].url


def forged_work(c: E2ECluster, cell_id: str, marker: Path, fencing_token: int) -> tuple[str, dict[str, Any]]:
    """A HostWork for `cell_id` whose one instance would create `marker` (in a directory its uid may
    write): a real desired LRP (desired with 0 instances, so nobody else places it) with a command of the
    attacker's choosing."""
    assert c.bbs is not None
    guid = c.guid("forged")
    desired = c.bbs.desire(guid, 0)
    desired["command"] = ["/bin/sh", "-c", f"touch {marker}; exec sleep 600"]
    body = {"desired": [desired], "cells": {cell_id: {"lrp_groups": [{"desired": 0, "indices": [0]}],
                                                     "tasks": []}}, "fencing_token": fencing_token}
    return guid, body


def assert_not_run(c: E2ECluster, cell_id: str, guid: str, marker: Path) -> None:
    state = c.rep_state(cell_id)
    held = [lrp for lrp in state.get("lrps", []) if lrp.get("process_guid") == guid]
    assert not held, f"expected the rep of {cell_id} to hold nothing of {guid}, saw {held}"
    assert not marker.exists(), f"the forged command ran: {marker} exists"


def current_lease(c: E2ECluster, timeout: float = 30.0) -> dict[str, Any]:
    """The auctioneer's lease, waiting for it: a cluster just started (or a loaded machine) may not have
    elected its auctioneer yet, and no lease means no leader."""
    def held() -> dict[str, Any]:
        with c.lc.http_client(base_url=c.lc.bbs_url, timeout=10.0) as http:
            response = http.get("/v1/leases/auctioneer")
        return expect(
            response.status_code == 200 and response.json(), f"{response.status_code} {response.text}"
        )

    return wait_for(held, timeout, "the auctioneer to hold its lease")


# --- forged work ------------------------------------------------------------------------------------


def test_forged_work_without_a_certificate_is_refused(cluster: E2ECluster, tmp_path: Path,
                                                    app_writable_dir: Path) -> None:
    marker = app_writable_dir / "pwned"
    guid, body = forged_work(cluster, "cell-0", marker, SECOND)
    with as_caller(cluster, None, base_url=rep_url(cluster, "cell-0")) as stranger:
        answer = stranger.post("/work", json=body)
    assert answer.status_code == 401, (
        f"expected 401 for work without identity, saw {answer.status_code} {answer.text}"
    )

    other_ca = tmp_path / "other-ca"
    init_ca(other_ca)
    issue(other_ca, role="auctioneer", name="auctioneer")  # the right role, from the wrong CA
    context = client_context(TLSFiles.in_dir(other_ca, "auctioneer"), ca=cluster.lc.certs_dir / CA_CERT)
    with httpx.Client(base_url=rep_url(cluster, "cell-0"), verify=context, timeout=10.0) as impostor:
        with pytest.raises(httpx.TransportError):  # the TLS handshake fails: the rep never reads the body
            impostor.post("/work", json=body)
    assert_not_run(cluster, "cell-0", guid, marker)


@pytest.mark.parametrize("who", ["cell-1", "admin", "bbs"])
def test_forged_work_with_a_genuine_certificate_of_another_role_is_forbidden(
    cluster: E2ECluster, app_writable_dir: Path, who: str
) -> None:
    marker = app_writable_dir / "pwned"
    guid, body = forged_work(cluster, "cell-0", marker, current_lease(cluster)["token"])
    with as_caller(cluster, certificate(cluster, who), base_url=rep_url(cluster, "cell-0")) as caller:
        answer = caller.post("/work", json=body)
    assert answer.status_code == 403, (
        f"expected 403 for work from {who}, saw {answer.status_code} {answer.text}"
    )
    assert "auctioneer" in answer.json()["detail"], f"expected the rule named, saw {answer.text}"
    assert_not_run(cluster, "cell-0", guid, marker)


@pytest.mark.parametrize("case", ["not desired", "running elsewhere"])
def test_work_whose_claim_the_bbs_refuses_never_runs(
    cluster: E2ECluster, app_writable_dir: Path, case: str
) -> None:
    """Work sent with the auctioneer's identity and current token is taken by the rep, but the BBS refuses
    its claim: an index not desired (a forged auction's), or one already running on another cell (a
    repeated or late one's). The rep starts an instance only once its claim is accepted, so the command
    never runs: its marker never appears, though the rep held the instance until the refusal came."""
    assert cluster.bbs is not None
    marker = app_writable_dir / f"claim-refused-{case.replace(' ', '-')}"
    token = current_lease(cluster)["token"]
    if case == "not desired":
        target = "cell-0"
        guid, body = forged_work(cluster, target, marker, token)
    else:
        guid = cluster.guid("held")
        desired = cluster.bbs.desire(guid, 1)
        [held] = wait_all_running(cluster.bbs, guid, 1).values()
        target = "cell-1" if held["cell_id"] == "cell-0" else "cell-0"
        desired["command"] = ["/bin/sh", "-c", f"touch {marker}; exec sleep 600"]
        body = {"desired": [desired], "cells": {target: {"lrp_groups": [{"desired": 0, "indices": [0]}],
                                                        "tasks": []}}, "fencing_token": token}
    with as_caller(cluster, certificate(cluster, "auctioneer"), base_url=rep_url(cluster, target)) as caller:
        answer = caller.post("/work", json=body)
    assert answer.status_code == 200, f"expected the work taken, saw {answer.status_code} {answer.text}"
    assert answer.json()["cells"][target]["rejected_lrps"] == [], f"expected nothing rejected: {answer.text}"

    def refusal_applied() -> bool:
        held = [lrp for lrp in cluster.rep_state(target).get("lrps", []) if lrp.get("process_guid") == guid]
        return expect(not held, f"the rep of {target} still holds {held}")

    wait_for(refusal_applied, 30.0, f"the BBS's refusal of the claim for {guid} applied on {target}")
    assert not marker.exists(), f"the command of an instance whose claim the BBS refused ran: {marker} exists"
    if case == "running elsewhere":
        [still] = wait_all_running(cluster.bbs, guid, 1).values()
        assert (still["cell_id"], still["instance_guid"]) == (held["cell_id"], held["instance_guid"]), (
            f"expected the instance on {held['cell_id']} untouched, saw {brief([still])}")


# --- a rep speaking for another cell ----------------------------------------------------------------


def instance_on(c: E2ECluster, guid: str, cell_id: str) -> dict[str, Any]:
    assert c.bbs is not None
    running = wait_all_running(c.bbs, guid, 2)
    on_cell = [a for a in running.values() if a["cell_id"] == cell_id]
    assert on_cell, f"expected an instance of {guid} on {cell_id}, saw {brief(list(running.values()))}"
    return on_cell[0]


def test_a_rep_cannot_heartbeat_or_report_for_another_cell(cluster: E2ECluster) -> None:
    assert cluster.bbs is not None
    guid = cluster.guid("victim")
    cluster.bbs.desire(guid, 2)  # one instance per cell (Diego spreads an app over the cells)
    victim = instance_on(cluster, guid, "cell-1")
    presence = next(p for p in cluster.bbs.cells() if p["cell_id"] == "cell-1")

    with as_caller(cluster, certificate(cluster, "cell-0")) as rogue:
        forged_presence = {**presence, "boot_id": uuid.uuid4().hex, "expires_at": None}
        heartbeat = rogue.put("/v1/cells", json={"cells": [forged_presence]})
        crash = rogue.post("/v1/lifecycle", json={"cells": {"cell-1": {"crashed": [
            {"process_guid": guid, "index": victim["index"], "instance_guid": victim["instance_guid"],
             "reason": "forged"}]}}})
        mixed = rogue.put("/v1/cells", json={"cells": [forged_presence, {**presence, "cell_id": "cell-0"}]})
    for name, answer in (("heartbeat", heartbeat), ("crash report", crash), ("mixed heartbeat", mixed)):
        assert answer.status_code == 403, (
            f"expected 403 for a forged {name}, saw {answer.status_code} {answer.text}"
        )
        assert "cell-1" in answer.json()["detail"], f"expected the foreign cell named, saw {answer.text}"

    after = instance_on(cluster, guid, "cell-1")
    assert (after["instance_guid"], after["state"]) == (victim["instance_guid"], "RUNNING"), (
        f"expected {guid}'s instance on cell-1 untouched ({victim['instance_guid']} RUNNING), saw {after}")
    still = next(p for p in cluster.bbs.cells() if p["cell_id"] == "cell-1")
    assert still.get("boot_id") == presence.get("boot_id"), f"cell-1's boot id changed: {presence} -> {still}"


# --- the auctioneer lease ---------------------------------------------------------------------------


def test_a_lease_hijack_by_admin_reader_or_rep_is_forbidden(cluster: E2ECluster) -> None:
    before = current_lease(cluster)
    reader = cluster.lc.issue_certificate("reader", "attack-reader")
    callers = {
        "admin": certificate(cluster, "admin"),
        "reader": reader,
        "rep": certificate(cluster, "cell-0"),
    }
    for role, files in callers.items():
        with as_caller(cluster, files) as caller:
            release = caller.delete(
                "/v1/leases/auctioneer", params={"owner": before["owner"], "token": before["token"]}
            )
            take = caller.post("/v1/leases/auctioneer", json={"owner": "stranger", "url": "https://127.0.0.1:9",
                                                              "ttl_s": 3600})
        for what, answer in (("release", release), ("take", take)):
            assert answer.status_code == 403, (
                f"expected 403 for a lease {what} by {role}, saw {answer.status_code} {answer.text}")
    after = current_lease(cluster)
    assert (after["owner"], after["token"], after["url"]) == (
        before["owner"],
        before["token"],
        before["url"],
    ), f"expected the lease unchanged, saw {before} -> {after}"


# --- fencing tokens -----------------------------------------------------------------------------------


def test_stale_and_unknown_fencing_tokens_are_refused_and_the_leader_keeps_working(
    cluster: E2ECluster, app_writable_dir: Path
) -> None:
    assert cluster.bbs is not None
    token = current_lease(cluster)["token"]
    auctioneer = certificate(cluster, "auctioneer")  # a genuine auctioneer certificate, misused
    for forged in (SECOND, token - 1):
        marker = app_writable_dir / f"pwned-{forged}"
        guid, body = forged_work(cluster, "cell-0", marker, forged)
        with as_caller(cluster, auctioneer, base_url=rep_url(cluster, "cell-0")) as caller:
            answer = caller.post("/work", json=body)
        assert answer.status_code == 409, (
            f"expected 409 for work under token {forged} (the lease's is {token}), saw {answer.status_code} "
            f"{answer.text}")
        assert_not_run(cluster, "cell-0", guid, marker)

    with as_caller(cluster, auctioneer) as caller:  # a placement-failure report of a past term
        report = caller.post("/v1/placement_failures", json={"fencing_token": token - 1, "lrps": [
            {"process_guid": "nobody", "index": 0, "error": "forged"}]})
    assert report.status_code == 409, (
        f"expected 409 for a stale report, saw {report.status_code} {report.text}"
    )
    with as_caller(cluster, auctioneer) as caller:  # an auction report, explanations and all, of a past term
        report = caller.post("/v1/auctions", json={
            "fencing_token": token - 1, "duration_s": 0.1, "fetch_states_s": 0.1,
            "explanations": [{"process_guid": "nobody", "index": 0, "placed": True, "cell_id": "cell-0"}]})
    assert report.status_code == 409, (
        f"expected 409 for a stale report, saw {report.status_code} {report.text}"
    )
    with cluster.lc.http_client(base_url=cluster.lc.bbs_url, timeout=10.0) as admin:
        kept = admin.get("/v1/actual_lrps/nobody/0/placement")
    assert kept.status_code == 404, f"a stale auction report's explanation was kept: {kept.text}"

    guid = cluster.guid("after-forgery")  # the real leader still places work on that very cell
    cluster.bbs.desire(guid, 2)
    running = wait_all_running(cluster.bbs, guid, 2)
    assert {a["cell_id"] for a in running.values()} == {"cell-0", "cell-1"}, brief(list(running.values()))
    assert cluster.rep_state("cell-0")["fencing_token"] == token, (
        "the rep's token moved off the real leader's"
    )


# --- tokens -------------------------------------------------------------------------------------------


def test_a_revoked_token_is_refused_at_once(cluster: E2ECluster) -> None:
    with cluster.lc.http_client(base_url=cluster.lc.bbs_url, timeout=10.0) as admin:
        created = admin.post("/v1/tokens", json={"role": "reader", "name": "attack-test"})
        assert created.status_code == 201, f"expected a token, saw {created.status_code} {created.text}"
        secret, token_id = created.json()["token"], created.json()["id"]

        with as_caller(cluster, None, token=secret) as reader:
            assert reader.get("/v1/desired_lrps").status_code == 200
            write = reader.post("/v1/desired_lrps", json={"process_guid": "nope", "instances": 1,
                                                          "command": ["true"]})
            assert write.status_code == 403, (
                f"expected a reader token refused a write, saw {write.status_code}"
            )
            with as_caller(cluster, None, token=secret, base_url=rep_url(cluster, "cell-0")) as at_rep:
                assert at_rep.get("/state").status_code == 200

            assert admin.delete(f"/v1/tokens/{token_id}").status_code == 204
            refused = reader.get("/v1/desired_lrps")
            assert refused.status_code == 401, (
                f"expected 401 at once after revoking, saw {refused.status_code}"
            )
            with as_caller(cluster, None, token=secret, base_url=rep_url(cluster, "cell-0")) as at_rep:
                # The rep asks the BBS and keeps an answer for a second.
                wait_for(lambda: expect(at_rep.get("/state").status_code == 401, "the rep still accepts it"),
                         5.0, "the rep to refuse the revoked token")
