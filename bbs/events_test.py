import asyncio
import json

from bbs.events import EventHub, event


async def test_subscribers_receive_published_events_in_order() -> None:
    hub = EventHub()
    stream = hub.stream()
    assert await anext(stream) == ": connected\n\n"
    hub.publish([event("task_created", {"task_guid": "a"}), event("task_removed", {"task_guid": "a"})])
    chunk = await asyncio.wait_for(anext(stream), 2)
    blocks = [b for b in chunk.split("\n\n") if b]
    assert [b.splitlines()[0] for b in blocks] == ["event: task_created", "event: task_removed"]
    assert json.loads(blocks[0].splitlines()[1].removeprefix("data: "))["data"] == {"task_guid": "a"}
    hub.close()
    assert [c async for c in stream] == []
    assert hub.subscriber_count == 0


async def test_heartbeat_comment_when_idle() -> None:
    hub = EventHub(heartbeat_s=0.05)
    stream = hub.stream()
    await anext(stream)
    assert await asyncio.wait_for(anext(stream), 2) == ": heartbeat\n\n"
    await stream.aclose()
    assert hub.subscriber_count == 0


async def test_a_subscriber_that_falls_behind_is_disconnected() -> None:
    hub = EventHub(queue_chunks=2)
    stream = hub.stream()
    await anext(stream)
    for i in range(5):
        hub.publish([event("task_changed", {"i": i})])
    assert hub.subscriber_count == 0
    assert [c async for c in stream] == []
