"""Fencing on the rep: in-process (rep/fencing.py against a scripted lease), then a real
`vendue rep --sim` process against the fake BBS (tests/fake_bbs.py), restarted on the same data dir."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx
import pytest

from tests.fake_bbs import FakeBBS
from tests.rep import fakes
from tests.rep.fakes import DEADLINE_S, cell_details, desired, post_work, work_body

from .fencing import FENCING_FILE, Fencing, Refused, read_token

pytestmark = pytest.mark.timeout(180)
start_rep, fake_bbs = fakes.start_rep, fakes.fake_bbs  # fixtures: rep processes (always stopped), the BBS


class Lease:
    """The BBS's answer, scripted: the lease's token (None: nobody holds it), or an error."""

    def __init__(self, token: int | None) -> None:
        self.token = token
        self.down = False
        self.asked = 0

    async def current(self) -> int | None:
        self.asked += 1
        await asyncio.sleep(0)  # the question takes a while (a request to the BBS): others arrive meanwhile
        if self.down:
            raise httpx.ConnectError("BBS down")
        return self.token


async def refusal(fencing: Fencing, token: int) -> Refused:
    with pytest.raises(Refused) as caught:
        await fencing.admit(token)
    return caught.value


async def test_the_leases_token_is_taken_once_checked_and_an_older_one_never(tmp_path: Path) -> None:
    lease = Lease(3)
    fencing = Fencing(tmp_path / FENCING_FILE, lease.current)
    await fencing.admit(3)
    for _ in range(100):  # the hot path: the token it holds costs no question
        await fencing.admit(3)
    assert lease.asked == 1 and read_token(tmp_path / FENCING_FILE) == 3

    lease.token = 4  # a new leader
    await asyncio.gather(*(fencing.admit(4) for _ in range(10)))  # a burst under a new token asks once
    assert lease.asked == 2 and fencing.highest == 4
    stale = await refusal(fencing, 3)
    assert (stale.status, stale.reason) == (409, "stale fencing token 3 < 4") and lease.asked == 2

    unknown = await refusal(fencing, 9)
    assert (unknown.status, unknown.reason) == (409, "unknown fencing token 9 (the lease's is 4)")
    again = await refusal(fencing, 9)
    assert again.reason == unknown.reason and lease.asked == 3, "a refusal is remembered"
    assert again is not unknown, "a fresh exception each time: one raised again keeps every raiser's frames"
    await fencing.admit(4)  # the real leader is still served
    assert fencing.highest == 4

    lease.token = None
    assert (await refusal(fencing, 5)).reason == "unknown fencing token 5 (nobody holds the lease)"
    assert (await refusal(fencing, 0)).reason == "stale fencing token 0 < 4"
    lease.down = True
    down = await refusal(fencing, 6)
    assert down.status == 503 and "could not be checked" in down.reason


async def test_no_token_is_taken_on_trust_by_a_fresh_rep(tmp_path: Path) -> None:
    lease = Lease(None)
    fencing = Fencing(tmp_path / FENCING_FILE, lease.current)
    assert (await refusal(fencing, 0)).reason == "unknown fencing token 0 (nobody holds the lease)"
    assert lease.asked == 1, "0 (no lease's token) is checked like any other token"


async def test_stale_and_unknown_tokens_are_409_and_the_highest_survives_a_restart(
    fake_bbs: FakeBBS, start_rep, tmp_path: Path
) -> None:
    args = ("--sim", "--cells", "2", "--cell-id", "f", "--bbs-url", fake_bbs.url, "--memory-mb", "1024")
    app = desired("app", memory_mb=64)
    fake_bbs.hold_lease(3)
    rep = await start_rep(*args)
    async with httpx.AsyncClient(timeout=DEADLINE_S) as client:
        taken = await post_work(client, rep.url, work_body("f-0", (app, 0), fencing_token=3))
        assert taken.status_code == 200 and taken.json()["cells"]["f-0"]["rejected_lrps"] == [], taken.text
        again = await client.post(f"{rep.url}/work", json=work_body("f-0", (app, 1), fencing_token=3))
        assert again.status_code == 200, again.text
        assert fake_bbs.lease_lookups == 1, "a token already accepted is not asked about again"

        fake_bbs.hold_lease(4)  # a new leader; the old one keeps sending
        newer = await client.post(f"{rep.url}/work", json=work_body("f-1", (app, 2), fencing_token=4))
        assert newer.status_code == 200, newer.text
        stale = await client.post(f"{rep.url}/work", json=work_body("f-1", (app, 3), fencing_token=3))
        assert stale.status_code == 409 and stale.json() == {"detail": "stale fencing token 3 < 4"}, (
            stale.text
        )

        unknown = await client.post(f"{rep.url}/work", json=work_body("f-1", (app, 4), fencing_token=7))
        assert unknown.status_code == 409, unknown.text
        assert unknown.json()["detail"] == "unknown fencing token 7 (the lease's is 4)"
        still = await client.post(f"{rep.url}/work", json=work_body("f-1", (app, 5), fencing_token=4))
        assert still.status_code == 200 and still.json()["cells"]["f-1"]["rejected_lrps"] == [], still.text
        details = await cell_details(client, rep.url)
        assert {d.bid.cell_id: d.bid.lrp_counts for d in details} == {"f-0": {"app": 2}, "f-1": {"app": 2}}, (
            "none refused"
        )
        assert details[1].accepted_fencing_tokens == [4]

    rep.proc.send_signal(signal.SIGINT)
    assert await asyncio.to_thread(rep.proc.wait, DEADLINE_S) == 0
    assert read_token(tmp_path / "data" / FENCING_FILE) == 4
    lookups = fake_bbs.lease_lookups

    rep = await start_rep(*args)  # the same data dir
    async with httpx.AsyncClient(timeout=DEADLINE_S) as client:
        stale = await client.post(f"{rep.url}/work", json=work_body("f-0", (app, 6), fencing_token=3))
        assert stale.status_code == 409 and stale.json() == {"detail": "stale fencing token 3 < 4"}, (
            stale.text
        )
        taken = await post_work(client, rep.url, work_body("f-0", (app, 6), fencing_token=4))
        assert taken.status_code == 200 and taken.json()["cells"]["f-0"]["rejected_lrps"] == [], taken.text
        assert {d.fencing_token for d in await cell_details(client, rep.url)} == {4}
    assert fake_bbs.lease_lookups == lookups, "the token it served before the restart needs no question"
