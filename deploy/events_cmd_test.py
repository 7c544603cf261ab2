"""`vendue events`' one line per event."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from common.models.event import Event

from .events_cmd import duration, summarize


def line(kind: str, data: dict[str, Any]) -> str:
    return summarize(Event(type=kind, data=data, at=datetime.now(UTC)))


def test_a_crash_shows_its_count_and_reason() -> None:
    after = {"process_guid": "web", "index": 0, "state": "CRASHED", "cell_id": "cell-1", "crash_count": 2,
             "crash_reason": "health check failed: port 8080: connection refused", "version": 3}
    assert line("actual_lrp_changed", {"before": {}, "after": after}) == (
        "web/0 @cell-1 CRASHED v3 crash #2 crashed: health check failed: port 8080: connection refused")


@pytest.mark.parametrize(("kind", "data", "expected"), [
    ("cell_changed", {"cell_id": "cell-3", "cordoned": True, "draining": False, "state": "present"},
     "cell-3 cordoned"),
    ("cell_changed", {"cell_id": "cell-3", "cordoned": True, "draining": True, "state": "present"},
     "cell-3 draining"),
    ("cell_changed", {"cell_id": "cell-3", "cordoned": False, "draining": False, "state": "present"},
     "cell-3 uncordoned"),
    ("cell_changed", {"cell_id": "cell-3", "cordoned": True, "evacuating": True, "state": "suspect"},
     "cell-3 cordoned, evacuating, suspect (presence expired)"),
    ("cell_appeared", {"cell_id": "cell-4", "zone": "z2", "state": "present"}, "cell-4 in z2 appeared"),
    ("cell_disappeared", {"cell_id": "cell-4", "state": "suspect"},
     "cell-4 disappeared (its presence expired), suspect (presence expired)"),
])
def test_a_cell_event_says_what_changed(kind: str, data: dict[str, Any], expected: str) -> None:
    assert line(kind, data) == expected
    assert "state=" not in line(kind, data)


def test_versions_instances_and_tasks_read_as_words() -> None:
    assert line("desired_lrp_changed", {"process_guid": "web", "instances": 3, "version": 4}) == \
        "web v4 3 instance(s)"
    task = {"task_guid": "t-1", "state": "COMPLETED", "cell_id": "cell-1", "failure_reason": "exit status 1"}
    assert line("task_changed", task) == "t-1 @cell-1 COMPLETED failed: exit status 1"
    rollout = {"process_guid": "web", "from_version": 2, "to_version": 3, "state": "paused", "done": 1,
               "total": 3, "reason": "instance 2 crashed"}
    assert line("rollout_changed", rollout) == "web v2→v3 paused 1/3 done reason: instance 2 crashed"


def test_durations_are_rounded() -> None:
    rounded = [duration(s) for s in (0.000412, 0.0123456, 1.23456, 300.0)]
    assert rounded == ["0.4 ms", "12 ms", "1.2 s", "5 min"]
    assert line("convergence_completed", {"duration_s": 0.004123456}) == "took 4.1 ms"
    assert line("auction_completed", {"duration_s": 0.0234567, "fetch_states_s": 0.00512, "lrps_placed": 3,
                                      "lrps_failed": 0, "tasks_placed": 0, "tasks_failed": 0}) == \
        "took 23 ms fetch_states=5.1 ms lrps_placed=3"


class FakeStream:
    """A BBS client that knows no app and streams `events` once."""

    def __init__(self, events: list[Event]) -> None:
        self.events, self.queries = events, []

    def desired_lrp(self, name: str) -> None:
        from .bbs_client import NotFound

        raise NotFound(f"no app {name!r}")

    def follow_events(self, query: Any, on_reconnect: Any, on_open: Any) -> Iterator[Event]:
        self.queries.append(query)
        yield from self.events


@pytest.fixture
def stream(monkeypatch: pytest.MonkeyPatch) -> FakeStream:
    from . import events_cmd

    at = datetime(2026, 11, 29, 5, 30, 0, 123456, tzinfo=UTC)
    fake = FakeStream([Event(type="convergence_completed", data={"duration_s": 0.004}, at=at),
                       Event(type="cell_changed", data={"cell_id": "cell-3", "cordoned": True}, at=at),
                       Event(type="actual_lrp_changed", data={"process_guid": "web", "index": 0}, at=at)])

    @contextlib.contextmanager
    def connect(connection: Any) -> Iterator[FakeStream]:
        yield fake

    monkeypatch.setattr(events_cmd, "connect", connect)
    return fake


def events(*args: str) -> Any:
    from typer.testing import CliRunner

    from .cli import app

    return CliRunner().invoke(app, ["events", *args])


def test_convergence_is_hidden_unless_asked_and_types_can_be_excluded(stream: FakeStream) -> None:
    default = events()
    assert default.exit_code == 0, default.output
    assert "convergence_completed" not in default.stdout and "cell-3 cordoned" in default.stdout
    for asked in (["--all"], ["--type", "convergence_completed"]):
        assert "took 4.0 ms" in events(*asked).stdout, asked
    excluded = events("--exclude-type", "cell_changed", "--exclude-type", "actual_lrp_changed")
    assert excluded.stdout == "", excluded.stdout
    bad = events("--exclude-type", "nonsense")
    assert bad.exit_code == 2 and "--exclude-type" in bad.output, bad.output


def test_an_unknown_app_is_warned_of_and_json_times_are_rfc3339(stream: FakeStream) -> None:
    followed = events("--app", "wbe", "--json")
    assert followed.exit_code == 0, followed.output
    assert "warning: --app: no app named 'wbe'" in followed.stderr
    lines = [json.loads(text) for text in followed.stdout.splitlines()]
    assert [e["type"] for e in lines] == ["cell_changed", "actual_lrp_changed"]
    assert {e["at"] for e in lines} == {"2026-11-29T05:30:00.123Z"}


def test_yaml_is_one_document_per_event(stream: FakeStream) -> None:
    import yaml

    followed = events("-o", "yaml")
    assert followed.exit_code == 0, followed.output
    documents = list(yaml.safe_load_all(followed.stdout))
    assert [d["type"] for d in documents] == ["cell_changed", "actual_lrp_changed"], followed.stdout
