import httpx
import pytest

from auctioneer.metrics import Metrics
from auctioneer.reporter import FailureReporter
from common.models import AuctionReport, LRPPlacementFailure, TaskPlacementFailure
from tests.fake_bbs import fake_bbs

pytestmark = pytest.mark.timeout(60)

REPORT = AuctionReport(
    lrps=[
        LRPPlacementFailure(process_guid="web", index=0, error="insufficient resources: memory", detail="0/1")
    ],
    tasks=[TaskPlacementFailure(task_guid="t1", error="unable to communicate to compatible cells")],
    duration_s=0.5,
    fetch_states_s=0.1,
    lrps_placed=2,
    lrps_failed=1,
    tasks_failed=1,
)
EXPLAINED = [{"process_guid": "web", "index": 1, "placed": True, "cell_id": "cell-1", "decided_by": "score"}]
BODY = {**REPORT.model_dump(mode="json"), "explanations": [], "fencing_token": 0}


async def test_an_auction_goes_to_the_bbs_in_one_post_with_its_explanations():
    async with fake_bbs() as bbs, httpx.AsyncClient(base_url=bbs.url) as client:
        metrics = Metrics()
        reporter = FailureReporter(client, metrics)
        assert await reporter.report_auction(REPORT, EXPLAINED) is True
        [sent] = bbs.failure_reports
        assert sent.model_dump(exclude={"explanations"}) == REPORT.model_dump(exclude={"explanations"})
        assert [(e.process_guid, e.index, e.cell_id) for e in sent.explanations] == [("web", 1, "cell-1")]
        assert metrics.requests_made["bbs"] == 1


async def test_a_busy_bbs_is_retried_with_backoff():
    async with fake_bbs() as bbs, httpx.AsyncClient(base_url=bbs.url) as client:
        bbs.fail_reports_times = 2
        assert await FailureReporter(client, Metrics(), backoff=0.01).send(BODY) is True
        assert bbs.failure_posts == 3 and [r.lrps for r in bbs.failure_reports] == [REPORT.lrps]


async def test_a_down_bbs_drops_the_report_after_bounded_tries(caplog):
    async with httpx.AsyncClient(base_url="http://127.0.0.1:1") as client:
        metrics = Metrics()
        reporter = FailureReporter(client, metrics, attempts=3, backoff=0.01)
        assert await reporter.send(BODY) is False
        assert metrics.requests_made["bbs"] == 3
        assert "auction report dropped" in caplog.text


async def test_a_report_carries_the_fencing_token_of_its_auction():
    async with fake_bbs() as bbs, httpx.AsyncClient(base_url=bbs.url) as client:
        term = {"token": 7}
        reporter = FailureReporter(client, Metrics(), fencing_token=lambda: term["token"])
        task = reporter.report_auction(REPORT)
        term["token"] = 8  # read when the auction reports, not when the report is sent
        assert await task is True
        assert [r.fencing_token for r in bbs.failure_reports] == [7]


async def test_a_stale_term_409_is_logged_once_and_dropped_without_a_retry(caplog):
    async with fake_bbs() as bbs, httpx.AsyncClient(base_url=bbs.url) as client:
        bbs.lease = bbs.lease.model_copy(update={"token": 5})  # a newer auctioneer holds the lease
        metrics = Metrics()
        reporter = FailureReporter(client, metrics, attempts=4, backoff=0.01, fencing_token=lambda: 4)
        assert await reporter.report_auction(REPORT) is False
        assert (bbs.failure_posts, bbs.failure_reports, metrics.stale_reports) == (1, [], 1)
        refusals = [r for r in caplog.records if r.name == "auctioneer.reporter"]
        assert [r.getMessage() for r in refusals] == [
            "auction report refused: a newer auctioneer holds the lease"
        ]
