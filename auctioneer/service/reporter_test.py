import httpx
import pytest

from auctioneer.service.metrics import Metrics
from auctioneer.service.reporter import FailureReporter
from common.models import LRPPlacementFailure, PlacementFailures, TaskPlacementFailure
from tests.fake_bbs import fake_bbs

pytestmark = pytest.mark.timeout(60)

FAILURES = PlacementFailures(
    lrps=[
        LRPPlacementFailure(process_guid="web", index=0, error="insufficient resources: memory", detail="0/1")
    ],
    tasks=[TaskPlacementFailure(task_guid="t1", error="unable to communicate to compatible cells")],
)


async def test_failures_go_to_the_bbs_in_one_post():
    async with fake_bbs() as bbs, httpx.AsyncClient(base_url=bbs.url) as client:
        metrics = Metrics()
        reporter = FailureReporter(client, metrics)
        task = reporter.report(FAILURES)
        assert task is not None and await task is True
        assert bbs.failure_reports == [FAILURES] and metrics.requests_made["bbs"] == 1


async def test_nothing_to_report_sends_nothing():
    async with fake_bbs() as bbs, httpx.AsyncClient(base_url=bbs.url) as client:
        assert FailureReporter(client, Metrics()).report(PlacementFailures()) is None
        assert bbs.failure_posts == 0


async def test_a_busy_bbs_is_retried_with_backoff():
    async with fake_bbs() as bbs, httpx.AsyncClient(base_url=bbs.url) as client:
        bbs.fail_reports_times = 2
        assert await FailureReporter(client, Metrics(), backoff=0.01).send(FAILURES) is True
        assert bbs.failure_posts == 3 and bbs.failure_reports == [FAILURES]


async def test_a_down_bbs_drops_the_report_after_bounded_tries(caplog):
    async with httpx.AsyncClient(base_url="http://127.0.0.1:1") as client:
        metrics = Metrics()
        reporter = FailureReporter(client, metrics, attempts=3, backoff=0.01)
        assert await reporter.send(FAILURES) is False
        assert metrics.requests_made["bbs"] == 3
        assert "placement failures dropped" in caplog.text


async def test_a_report_carries_the_fencing_token_of_its_auction():
    async with fake_bbs() as bbs, httpx.AsyncClient(base_url=bbs.url) as client:
        term = {"token": 7}
        reporter = FailureReporter(client, Metrics(), fencing_token=lambda: term["token"])
        task = reporter.report(FAILURES)
        term["token"] = 8  # read when the auction reports, not when the report is sent
        assert task is not None and await task is True
        assert [r.fencing_token for r in bbs.failure_reports] == [7]


async def test_a_stale_term_409_is_logged_once_and_dropped_without_a_retry(caplog):
    async with fake_bbs() as bbs, httpx.AsyncClient(base_url=bbs.url) as client:
        bbs.lease = bbs.lease.model_copy(update={"token": 5})  # a newer auctioneer holds the lease
        metrics = Metrics()
        reporter = FailureReporter(client, metrics, attempts=4, backoff=0.01, fencing_token=lambda: 4)
        task = reporter.report(FAILURES)
        assert task is not None and await task is False
        assert (bbs.failure_posts, bbs.failure_reports, metrics.stale_reports) == (1, [], 1)
        refusals = [r for r in caplog.records if r.name == "auctioneer.reporter"]
        assert [r.getMessage() for r in refusals] == [
            "placement failures refused: a newer auctioneer holds the lease"
        ]
