import httpx
import pytest

from auctioneer.cells import CellFetcher, FetchedCells
from auctioneer.clients import RepClients
from auctioneer.metrics import Metrics
from common.models import CellPresence, ResourcesModel
from tests.auctioneer.fakes import FakeReps, fake_reps
from tests.fake_bbs import fake_bbs
from tests.support.polling import finishes

pytestmark = pytest.mark.timeout(60)
# A rep that hangs answers only when the test releases it, and the rep clients' own timeout is an hour in
# the tests with one: only the fetch's deadline (0.5 s there) can end the fetch. FETCH_BOUND_S bounds the
# wait for a fetch that would wait for the rep.
CLIENT_TIMEOUT_S = 3600.0
FETCH_BOUND_S = 30.0


def fetcher(bbs_url: str, client_bbs, client_reps, timeout: float = 5.0) -> tuple[CellFetcher, Metrics]:
    metrics = Metrics()
    return CellFetcher(client_bbs, client_reps, metrics, timeout=timeout), metrics


async def fetched_past_a_hanging_rep(f: CellFetcher, reps: FakeReps) -> FetchedCells:
    """The fetch, which must end while a rep still holds its state request: that rep answers only when the
    test releases it, so the fetch's deadline, not the rep, ended it."""
    fetched = await finishes(f.fetch(), FETCH_BOUND_S, "the fetch to end by its deadline, the rep hanging")
    assert reps.held == 1, f"expected the hanging rep still holding its request, {reps.held} held"
    return fetched


async def test_every_present_cell_is_fetched_once_and_failing_cells_drop_out():
    async with fake_reps() as reps, fake_bbs(reps) as bbs, \
            httpx.AsyncClient(base_url=bbs.url) as to_bbs, RepClients(timeout=CLIENT_TIMEOUT_S) as to_reps:
        for i in range(5):
            reps.add(f"good-{i}", zone=f"z{i % 2}")
        reps.add("evacuating-presence")
        reps.add("cordoned")
        reps.add("draining")
        reps.add("evacuating-state", evacuating=True)
        reps.add("error", state_mode="error")
        reps.add("invalid", state_mode="invalid")
        reps.add("slow", state_mode="hang")
        bbs.extra_cells.append(CellPresence(
            cell_id="gone", zone="z1", rep_url="http://127.0.0.1:1/nowhere",
            total=ResourcesModel(memory_mb=1, disk_mb=1, containers=1),
        ))
        presences = reps.presences()
        for p in presences:  # the BBS knows one cell evacuates; the other says so only in its state
            p.evacuating = p.cell_id == "evacuating-presence"
            p.cordoned = p.cell_id == "cordoned"  # the operator's (vendue cells cordon|drain)
            p.draining = p.cell_id == "draining"
        bbs.reps = None
        bbs.extra_cells.extend(presences)

        f, metrics = fetcher(bbs.url, to_bbs, to_reps, timeout=0.5)
        fetched = await fetched_past_a_hanging_rep(f, reps)

        assert sorted(s.cell_id for s in fetched.states) == [f"good-{i}" for i in range(5)]
        assert fetched.reps["good-3"] == (reps.rep_url("good-3"), "good-3")
        assert set(fetched.dropped) == {
            "gone",
            "evacuating-presence",
            "cordoned",
            "draining",
            "evacuating-state",
            "error",
            "invalid",
            "slow",
        }, fetched.dropped
        assert fetched.dropped["cordoned"] == fetched.dropped["draining"] == "cordoned"
        assert not {"cordoned", "draining"} & set(reps.state_calls), (
            "cordoned cells are skipped without asking"
        )
        assert fetched.dropped["slow"].startswith("no state within")
        assert fetched.dropped["evacuating-presence"] == "evacuating"
        assert "evacuating-presence" not in reps.state_calls  # skipped without asking it
        assert bbs.cells_calls == 1
        assert metrics.requests_made == {"bbs": 1, "rep_state": 10, "rep_work": 0}, (
            reps.state_calls,
            fetched.dropped,
        )
        assert fetched.dropped["invalid"].startswith("invalid state body"), fetched.dropped
        assert metrics.cells_dropped == 8
        assert fetched.seconds == metrics.last_state_fetch_seconds > 0


async def test_a_state_naming_another_cell_is_not_taken_for_its_cell():
    async with fake_reps() as reps, fake_bbs(reps) as bbs, \
            httpx.AsyncClient(base_url=bbs.url) as to_bbs, RepClients() as to_reps:
        reps.add("c1")
        bbs.reps = None
        bbs.extra_cells = reps.presences()
        reps.cells["c1"].state.cell_id = "c2"  # the rep at c1's URL answers for another cell
        fetched = await fetcher(bbs.url, to_bbs, to_reps)[0].fetch()
        assert fetched.states == [] and fetched.dropped == {
            "c1": f"not in the state answer of its rep {reps.rep_url('c1')}"
        }


async def test_no_bbs_means_no_cells_and_says_why():
    async with httpx.AsyncClient(base_url="http://127.0.0.1:1") as to_bbs, RepClients() as to_reps:
        fetched = await fetcher("", to_bbs, to_reps)[0].fetch()
        assert fetched.states == [] and fetched.error.startswith("cell list unavailable: ConnectError")


async def test_one_request_per_rep_process_and_a_failing_one_drops_exactly_its_cells():
    async with fake_reps() as reps, fake_bbs() as bbs, \
            httpx.AsyncClient(base_url=bbs.url) as to_bbs, RepClients(timeout=CLIENT_TIMEOUT_S) as to_reps:
        reps.add("alone")
        for i in range(3):
            reps.add(f"good-{i}", rep="good")
            reps.add(f"broken-{i}", rep="broken", state_mode="error")
            reps.add(f"slow-{i}", rep="slow", state_mode="hang")
        reps.add("leaving", rep="good", evacuating=True)
        reps.add("unlisted", rep="good")  # hosted there, but the BBS does not list it: not in this auction
        reps.reps["good"].left_out.add("good-2")  # listed by the BBS, missing from its process's answer
        bbs.extra_cells = [p for p in reps.presences() if p.cell_id != "unlisted"]

        f, metrics = fetcher(bbs.url, to_bbs, to_reps, timeout=0.5)
        fetched = await fetched_past_a_hanging_rep(f, reps)  # one deadline for the whole fetch

        assert [s.cell_id for s in fetched.states] == ["alone", "good-0", "good-1"]
        assert fetched.reps["good-1"] == (reps.rep_url("good"), "good"), "work goes to the cell's process"
        assert fetched.dropped == {
            "good-2": f"not in the state answer of its rep {reps.rep_url('good')}",
            "leaving": "evacuating",
            **{f"broken-{i}": "state answered 500" for i in range(3)},
            **{f"slow-{i}": "no state within 0.5 s" for i in range(3)},
        }
        assert reps.state_calls == {"alone": 1, "good": 1, "broken": 1, "slow": 1}, "one request per process"
        assert metrics.requests_made["rep_state"] == 4
        assert metrics.cells_dropped == 8


async def test_a_rep_answering_an_invalid_body_drops_its_cells():
    async with fake_reps() as reps, fake_bbs(reps) as bbs, \
            httpx.AsyncClient(base_url=bbs.url) as to_bbs, RepClients() as to_reps:
        reps.add("c0", rep="r")
        reps.add("c1", rep="r", state_mode="invalid")
        fetched = await fetcher(bbs.url, to_bbs, to_reps)[0].fetch()
        assert fetched.states == []
        assert set(fetched.dropped) == {"c0", "c1"}
        assert all(why.startswith("invalid state body") for why in fetched.dropped.values()), fetched.dropped
