"""The limits a real `vendue bbs` process enforces over HTTPS (called as its admin): the body cap and the
bound on event stream subscribers; and that every server's app has the limits outermost."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from common.http_metrics import HTTPMetricsMiddleware
from common.limits import LimitsMiddleware
from common.request_id import RequestIdMiddleware
from tests.security.apps import auctioneer_app, bbs_app, rep_app
from tests.support.bbs_process import BBSProcess
from tests.support.polling import Unmet, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

MAX_SUBSCRIBERS = 2


@pytest.fixture
def bbs(tmp_path: Path) -> Iterator[BBSProcess]:
    process = BBSProcess(tmp_path, "limits", None, "--max-event-subscribers", str(MAX_SUBSCRIBERS))
    try:
        yield process
    finally:
        process.stop()


def written(admin: httpx.Client) -> dict[str, list]:
    return {
        path: admin.get(path).json()["items"] for path in ("/v1/desired_lrps", "/v1/actual_lrps", "/v1/tasks")
    }


def test_a_10_mb_body_is_413_naming_the_cap_and_writes_nothing(bbs: BBSProcess) -> None:
    with bbs.client(timeout=30) as admin:
        before = written(admin)
        huge = {
            "process_guid": "huge",
            "instances": 1,
            "command": ["sleep", "infinity"],
            "env": {"PAD": "x" * 10**7},
        }
        response = admin.post("/v1/desired_lrps", json=huge)
        assert response.status_code == 413, f"expected 413 for a 10 MB body, saw {response.status_code}: " \
                                            f"{response.text[:200]}"
        assert "larger than 1048576 bytes (--max-body-bytes)" in response.json()["detail"]
        task = admin.post(
            "/v1/tasks", json={"task_guid": "t", "command": ["true"], "env": {"PAD": "x" * 10**7}}
        )
        assert task.status_code == 413, task.text[:200]
        assert written(admin) == before
        # The connection was kept: the next request on it is served.
        assert admin.post("/v1/desired_lrps", json={**huge, "env": {}}).status_code == 201


def open_stream(stack: ExitStack, client: httpx.Client) -> tuple[httpx.Response, Iterator[str]]:
    """A subscription, its first line read; the line iterator is kept (dropping it closes the stream)."""
    response = stack.enter_context(client.stream("GET", "/v1/events"))
    lines = response.iter_lines()
    if response.status_code == 200:
        assert next(lines) == ": connected"
    else:
        response.read()
    return response, lines


def test_event_subscribers_past_the_bound_are_429_naming_it(bbs: BBSProcess) -> None:
    with ExitStack() as stack:
        clients = [stack.enter_context(bbs.client(timeout=10)) for _ in range(MAX_SUBSCRIBERS + 1)]
        streams = [open_stream(stack, c) for c in clients[:MAX_SUBSCRIBERS]]
        assert [response.status_code for response, _ in streams] == [200] * MAX_SUBSCRIBERS
        refused, _ = open_stream(stack, clients[-1])
        assert refused.status_code == 429, (
            f"expected 429 past {MAX_SUBSCRIBERS} subscribers, saw {refused.status_code}"
        )
        detail = refused.json()["detail"]
        assert "max_event_subscribers" in detail and f"at most {MAX_SUBSCRIBERS}" in detail, detail
        streams[0][0].close()  # one leaves: its place is free again once the BBS sees it gone
        clients[0].close()

        def subscribed() -> bool:
            with clients[-1].stream("GET", "/v1/events") as again:
                if again.status_code == 200:
                    return True
                again.read()
                raise Unmet(again.text)

        wait_for(subscribed, 15.0, "a place for a new subscriber")


def test_every_server_has_the_limits_outside_everything_that_waits() -> None:
    """The body cap, the timeout and the concurrency limit cover authorization too (a token check waits on
    the BBS) and everything inside it. Only the request id and the request metrics sit outside them: they
    read nothing of the body and wait on nothing, and a refusal of the limits then carries a request id
    and is counted."""
    apps = {"bbs": bbs_app(), "auctioneer": auctioneer_app(), "rep": rep_app()}
    for name, app in apps.items():
        order = [m.cls for m in app.user_middleware]  # outermost first
        assert LimitsMiddleware in order, f"{name}: {order}"
        outside = order[: order.index(LimitsMiddleware)]
        assert set(outside) <= {RequestIdMiddleware, HTTPMetricsMiddleware}, f"{name}: {order}"
