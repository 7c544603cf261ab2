"""Diego's event streams made from Vendue's events (bbs/diego/events.py): types, before/after, crashes,
a cell's filter, the older stream's groups, and the SSE framing (base64 protobuf)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

from bbs.diego.events import LEGACY, LRP_INSTANCES, TASKS, Renderer, sse_stream
from bbs.diego.pb import diego_pb2 as pb

SINCE = "2026-11-29T09:00:00+00:00"


def actual(state: str, **fields: Any) -> dict[str, Any]:
    return {"process_guid": "web", "index": 0, "domain": "d", "instance_guid": "i", "cell_id": "c1",
            "state": state, "presence": "ORDINARY", "since": SINCE, "crash_count": 0,
            "modification_tag": {"epoch": "e", "index": 0}, **fields}


def test_an_instance_changed_event_carries_what_the_stream_last_sent_as_before() -> None:
    r = Renderer(LRP_INSTANCES)
    [(kind, created)] = r.render({"type": "actual_lrp_created", "data": actual("UNCLAIMED")})
    assert kind == "actual_lrp_instance_created" and created.actual_lrp.state == "UNCLAIMED"
    [(kind, changed)] = r.render({"type": "actual_lrp_changed", "data": actual("RUNNING")})
    assert kind == "actual_lrp_instance_changed"
    assert (changed.before.state, changed.after.state) == ("UNCLAIMED", "RUNNING")
    assert changed.after.routable
    crash = actual("CRASHED", crash_count=1, crash_reason="exit 1")
    out = r.render({"type": "actual_lrp_changed", "data": crash})
    assert [k for k, _ in out] == ["actual_lrp_instance_changed", "actual_lrp_crashed"]
    crashed = out[1][1]
    assert (crashed.crash_count, crashed.crash_reason) == (1, "exit 1")
    assert crashed.actual_lrp_key.process_guid == "web"
    [(kind, removed)] = r.render({"type": "actual_lrp_removed", "data": actual("CRASHED")})
    assert kind == "actual_lrp_instance_removed" and removed.actual_lrp.actual_lrp_key.index == 0


def test_a_stream_for_one_cell_and_the_task_stream_keep_their_own() -> None:
    one_cell = Renderer(LRP_INSTANCES, cell_id="c2")
    assert one_cell.render({"type": "actual_lrp_created", "data": actual("RUNNING")}) == []
    assert one_cell.render({"type": "actual_lrp_created", "data": actual("RUNNING", cell_id="c2")}) != []
    tasks = Renderer(TASKS)
    assert tasks.render({"type": "actual_lrp_created", "data": actual("RUNNING")}) == []
    task = {"task_guid": "t1", "domain": "d", "state": "PENDING", "command": ["true"], "created_at": SINCE}
    [(kind, created)] = tasks.render({"type": "task_created", "data": task})
    assert kind == "task_created" and created.task.state == pb.Task.Pending
    [(kind, changed)] = tasks.render({"type": "task_changed", "data": {**task, "state": "COMPLETED"}})
    assert (changed.before.state, changed.after.state) == (pb.Task.Pending, pb.Task.Completed)


def test_the_older_stream_sends_actual_lrp_groups() -> None:
    r = Renderer(LEGACY)
    [(kind, created)] = r.render({"type": "actual_lrp_created", "data": actual("UNCLAIMED")})
    assert kind == "actual_lrp_created" and created.actual_lrp_group.instance.state == "UNCLAIMED"
    evacuating = actual("RUNNING", presence="EVACUATING")
    [(kind, changed)] = r.render({"type": "actual_lrp_changed", "data": evacuating})
    assert kind == "actual_lrp_changed" and changed.after.evacuating.state == "RUNNING"
    desired = {"process_guid": "web", "domain": "d", "instances": 1, "command": ["true"],
               "modification_tag": {"epoch": "e", "index": 0}}
    [(kind, event)] = r.render({"type": "desired_lrp_created", "data": desired})
    assert kind == "desired_lrp_created" and event.desired_lrp.process_guid == "web"


async def test_the_body_is_sse_with_base64_protobuf_and_heartbeats() -> None:
    async def batches() -> AsyncIterator[list[dict[str, Any]]]:
        yield [{"type": "actual_lrp_created", "data": actual("UNCLAIMED")}]
        yield []

    parts = [part async for part in sse_stream(batches(), Renderer(LRP_INSTANCES))]
    assert parts[0].startswith(b": connected") and parts[-1].startswith(b": heartbeat")
    lines = dict(line.split(b": ", 1) for line in parts[1].strip().split(b"\n"))
    assert lines[b"event"] == b"actual_lrp_instance_created"
    message = pb.ActualLRPInstanceCreatedEvent.FromString(base64.b64decode(lines[b"data"]))
    assert message.actual_lrp.actual_lrp_key.process_guid == "web"
