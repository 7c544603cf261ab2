"""`vendue events`' one line per event."""

from __future__ import annotations

from datetime import UTC, datetime

from common.models.event import Event

from .events_cmd import summarize


def test_a_crash_shows_its_count_and_reason() -> None:
    after = {"process_guid": "web", "index": 0, "state": "CRASHED", "cell_id": "cell-1", "crash_count": 2,
             "crash_reason": "health check failed: port 8080: connection refused"}
    event = Event(type="actual_lrp_crashed", data={"before": {}, "after": after}, at=datetime.now(UTC))
    assert summarize(event) == ("web/0 @cell-1 state=CRASHED crash_count=2 "
                                "crash_reason=health check failed: port 8080: connection refused")
