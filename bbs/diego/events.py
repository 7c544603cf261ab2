"""Diego's event streams, made from Vendue's own events (bbs/events.py): server-sent events whose `event:`
is Diego's type and whose `data:` is the base64 protobuf of its message.

- `/v1/events/lrp_instances.r1`: desired LRP created/changed/removed, actual LRP instance
  created/changed/removed, actual LRP crashed;
- `/v1/events/tasks.r1`: task created/changed/removed;
- `/v1/events.r1` (and `/v1/events`), the older stream: desired LRP events and actual LRP *group* events.

The body may name a cell (EventsByCellId): then only that cell's instances and tasks. Vendue's events carry
the new state alone; a changed event's `before` is what this stream last sent of it (the same as `after`
when it sent nothing yet). Env values are `***` in every event, as on Vendue's own stream.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

from .mapping import actual_info, diego_actual, diego_lrp, diego_task
from .pb import diego_pb2 as pb

LRP_INSTANCES = "lrp_instances"
TASKS = "tasks"
LEGACY = "legacy"
EVENT_STREAMS = {
    "/v1/events/lrp_instances.r1": LRP_INSTANCES,
    "/v1/events/lrp_instances": LRP_INSTANCES,
    "/v1/events/tasks.r1": TASKS,
    "/v1/events/tasks": TASKS,
    "/v1/events.r1": LEGACY,
    "/v1/events": LEGACY,
}
EVENT_PATHS = tuple(EVENT_STREAMS)
HEARTBEAT = b": heartbeat\n\n"
MAX_REMEMBERED = 200_000  # instances and tasks whose last state a stream keeps for `before`


def _sse(kind: str, message: Any, seq: int) -> bytes:
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (seq, kind.encode(),
                                                   base64.b64encode(message.SerializeToString()))


class Renderer:
    """One subscriber's translation: Vendue events in, Diego's (type, message) out."""

    def __init__(self, stream: str, cell_id: str = "") -> None:
        self.stream = stream
        self.cell_id = cell_id
        self._actuals: dict[tuple[str, int, str], pb.ActualLRP] = {}
        self._desired: dict[str, pb.DesiredLRP] = {}
        self._tasks: dict[str, pb.Task] = {}

    def _remember(self, table: dict[Any, Any], key: Any, value: Any) -> Any:
        before = table.get(key, value)
        if len(table) >= MAX_REMEMBERED:
            table.clear()
        table[key] = value
        return before

    def render(self, e: dict[str, Any]) -> list[tuple[str, Any]]:
        kind, data = str(e.get("type")), e.get("data") or {}
        if kind.startswith("desired_lrp_") and self.stream in (LRP_INSTANCES, LEGACY):
            return self._desired_event(kind, data)
        if kind.startswith("actual_lrp_") and self.stream in (LRP_INSTANCES, LEGACY):
            if self.cell_id and data.get("cell_id") != self.cell_id:
                return []
            return self._actual_event(kind, data)
        if kind.startswith("task_") and self.stream == TASKS:
            if self.cell_id and data.get("cell_id") != self.cell_id:
                return []
            return self._task_event(kind, data)
        return []

    def _desired_event(self, kind: str, data: dict[str, Any]) -> list[tuple[str, Any]]:
        if "process_guid" not in data:
            return []
        lrp = diego_lrp(data, sees_env=False)
        guid = lrp.process_guid
        if kind == "desired_lrp_created":
            self._remember(self._desired, guid, lrp)
            return [(kind, pb.DesiredLRPCreatedEvent(desired_lrp=lrp))]
        if kind == "desired_lrp_changed":
            before = self._remember(self._desired, guid, lrp)
            return [(kind, pb.DesiredLRPChangedEvent(before=before, after=lrp))]
        if kind == "desired_lrp_removed":
            self._desired.pop(guid, None)
            return [(kind, pb.DesiredLRPRemovedEvent(desired_lrp=lrp))]
        return []

    def _actual_event(self, kind: str, data: dict[str, Any]) -> list[tuple[str, Any]]:
        if "process_guid" not in data or "index" not in data:
            return []
        actual = diego_actual(data)
        key = (actual.actual_lrp_key.process_guid, actual.actual_lrp_key.index, str(data.get("presence")))
        if kind == "actual_lrp_removed":
            self._actuals.pop(key, None)
        before = actual if kind == "actual_lrp_removed" else self._remember(self._actuals, key, actual)
        if self.stream == LEGACY:
            return self._group_event(kind, actual, before)
        if kind == "actual_lrp_created":
            return [("actual_lrp_instance_created", pb.ActualLRPInstanceCreatedEvent(actual_lrp=actual))]
        if kind == "actual_lrp_removed":
            return [("actual_lrp_instance_removed", pb.ActualLRPInstanceRemovedEvent(actual_lrp=actual))]
        if kind != "actual_lrp_changed":
            return []
        out: list[tuple[str, Any]] = [("actual_lrp_instance_changed", pb.ActualLRPInstanceChangedEvent(
            actual_lrp_key=actual.actual_lrp_key, actual_lrp_instance_key=actual.actual_lrp_instance_key,
            before=actual_info(before), after=actual_info(actual)))]
        crashed_now = before.state != "CRASHED" or before.crash_count != actual.crash_count
        if actual.state == "CRASHED" and crashed_now:
            out.append(("actual_lrp_crashed", pb.ActualLRPCrashedEvent(
                actual_lrp_key=actual.actual_lrp_key, actual_lrp_instance_key=actual.actual_lrp_instance_key,
                crash_count=actual.crash_count, crash_reason=actual.crash_reason, since=actual.since)))
        return out

    def _group_event(self, kind: str, actual: pb.ActualLRP, before: pb.ActualLRP) -> list[tuple[str, Any]]:
        def group(one: pb.ActualLRP) -> pb.ActualLRPGroup:
            if one.presence == pb.ActualLRP.EVACUATING:
                return pb.ActualLRPGroup(evacuating=one)
            return pb.ActualLRPGroup(instance=one)

        if kind == "actual_lrp_created":
            return [(kind, pb.ActualLRPCreatedEvent(actual_lrp_group=group(actual)))]
        if kind == "actual_lrp_removed":
            return [(kind, pb.ActualLRPRemovedEvent(actual_lrp_group=group(actual)))]
        if kind == "actual_lrp_changed":
            return [(kind, pb.ActualLRPChangedEvent(before=group(before), after=group(actual)))]
        return []

    def _task_event(self, kind: str, data: dict[str, Any]) -> list[tuple[str, Any]]:
        if "task_guid" not in data:
            return []
        task = diego_task(data, sees_env=False)
        if kind == "task_created":
            self._remember(self._tasks, task.task_guid, task)
            return [(kind, pb.TaskCreatedEvent(task=task))]
        if kind == "task_changed":
            before = self._remember(self._tasks, task.task_guid, task)
            return [(kind, pb.TaskChangedEvent(before=before, after=task))]
        if kind == "task_removed":
            self._tasks.pop(task.task_guid, None)
            return [(kind, pb.TaskRemovedEvent(task=task))]
        return []


async def sse_stream(
    batches: AsyncIterator[list[dict[str, Any]]], renderer: Renderer
) -> AsyncIterator[bytes]:
    """The SSE body: each batch of Vendue's events rendered, a comment line for each heartbeat."""
    seq = 0
    yield b": connected\n\n"
    async for batch in batches:
        if not batch:
            yield HEARTBEAT
            continue
        parts = []
        for e in batch:
            for kind, message in renderer.render(e):
                parts.append(_sse(kind, message, seq))
                seq += 1
        if parts:
            yield b"".join(parts)
