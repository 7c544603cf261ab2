import asyncio
import json

import pytest

from bbs.events import EventFilter, EventHub, event


async def test_subscribers_receive_published_events_in_order() -> None:
    hub = EventHub()
    stream = hub.stream()
    assert await anext(stream) == ": connected\n\n"
    hub.publish([event("task_created", {"task_guid": "a"}), event("task_removed", {"task_guid": "a"})])
    chunk = await asyncio.wait_for(anext(stream), 2)
    blocks = [b for b in chunk.split("\n\n") if b]
    assert [b.splitlines()[1] for b in blocks] == ["event: task_created", "event: task_removed"]
    assert json.loads(blocks[0].splitlines()[2].removeprefix("data: "))["data"] == {"task_guid": "a"}
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


def _blocks(chunk: str) -> list[dict[str, str]]:
    """SSE text -> one {"id", "event", "data"} per event (comments dropped)."""
    out = []
    for block in chunk.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        if fields:
            out.append(fields)
    return out


async def _received(stream, count: int) -> list[dict[str, str]]:
    got: list[dict[str, str]] = []
    while len(got) < count:
        got.extend(_blocks(await asyncio.wait_for(anext(stream), 2)))
    return got


async def test_every_event_has_an_id_of_this_hub_in_its_sse_lines_and_its_data() -> None:
    hub = EventHub()
    stream = hub.stream()
    await anext(stream)
    hub.publish([event("task_created", {"task_guid": "a"}), event("task_changed", {"task_guid": "a"})])
    got = await _received(stream, 2)
    assert [b["id"] for b in got] == [f"{hub.epoch}-1", f"{hub.epoch}-2"]
    assert [json.loads(b["data"])["id"] for b in got] == [f"{hub.epoch}-1", f"{hub.epoch}-2"]
    assert hub.last_id == f"{hub.epoch}-2"
    assert EventHub().epoch != hub.epoch
    await stream.aclose()


async def test_filters_by_app_cell_and_types() -> None:
    hub = EventHub()
    wanted = EventFilter(app="web", cell="c1", types=frozenset({"actual_lrp_changed", "actual_lrp_created"}))
    stream = hub.stream(wanted=wanted)
    everything = hub.stream()
    await anext(stream)
    await anext(everything)
    published = [
        event("actual_lrp_changed", {"process_guid": "web", "index": 0, "cell_id": "c1"}),
        event("actual_lrp_changed", {"process_guid": "api", "index": 0, "cell_id": "c1"}),
        event("actual_lrp_changed", {"process_guid": "web", "index": 1, "cell_id": "c2"}),
        event("desired_lrp_changed", {"process_guid": "web"}),
        event("actual_lrp_created", {"process_guid": "web", "index": 2, "cell_id": "c1"}),
    ]
    hub.publish(published)
    got = await _received(stream, 2)
    assert [(b["event"], json.loads(b["data"])["data"]["index"]) for b in got] == [
        ("actual_lrp_changed", 0), ("actual_lrp_created", 2)]
    assert len(await _received(everything, 5)) == 5
    await stream.aclose()
    await everything.aclose()


async def test_last_event_id_replays_what_was_missed_then_follows() -> None:
    hub = EventHub()
    for i in range(5):
        hub.publish(
            [event("task_changed", {"task_guid": f"t{i}"}), event("task_removed", {"task_guid": f"t{i}"})]
        )
    stream = hub.stream(last_event_id=f"{hub.epoch}-3", wanted=EventFilter(types=frozenset({"task_removed"})))
    await anext(stream)
    replayed = await _received(stream, 4)
    assert [b["id"].rsplit("-", 1)[1] for b in replayed] == [
        "4",
        "6",
        "8",
        "10",
    ]  # removals after 3, in order
    hub.publish([event("task_removed", {"task_guid": "live"})])
    [live] = await _received(stream, 1)
    assert json.loads(live["data"])["data"] == {"task_guid": "live"}
    await stream.aclose()


async def test_the_newest_id_resumes_with_nothing_to_replay() -> None:
    hub = EventHub(heartbeat_s=0.05)
    hub.publish([event("task_changed", {"task_guid": "a"})])
    stream = hub.stream(last_event_id=hub.last_id)
    await anext(stream)
    assert await asyncio.wait_for(anext(stream), 2) == ": heartbeat\n\n"
    await stream.aclose()


@pytest.mark.parametrize("last_id", ["other-3", "garbage", "", "{epoch}-1", "{epoch}-99"])
async def test_an_id_it_cannot_resume_from_gets_a_resync_with_the_newest_id(last_id: str) -> None:
    hub = EventHub(replay_events=4)
    for i in range(6):
        hub.publish([event("task_changed", {"task_guid": f"t{i}"})])  # 1 and 2 are no longer kept
    stream = hub.stream(last_event_id=last_id.format(epoch=hub.epoch))
    await anext(stream)
    [resync] = await _received(stream, 1)
    assert resync["event"] == "resync" and resync["id"] == hub.last_id
    assert json.loads(resync["data"])["data"]["last_event_id"] == last_id.format(epoch=hub.epoch)
    hub.publish([event("task_changed", {"task_guid": "live"})])
    assert (await _received(stream, 1))[0]["id"] == f"{hub.epoch}-7"
    await stream.aclose()


async def test_events_not_built_make_every_earlier_id_resync() -> None:
    hub = EventHub(linger_s=0)
    hub.publish([event("task_changed", {"task_guid": "a"})])
    seen = hub.last_id
    assert not hub.listening
    hub.missed()  # a change whose events nobody built
    stream = hub.stream(last_event_id=seen)
    await anext(stream)
    assert (await _received(stream, 1))[0]["event"] == "resync"
    await stream.aclose()


async def test_it_keeps_listening_for_a_while_after_the_last_subscriber_left() -> None:
    hub = EventHub(linger_s=60)
    assert not hub.listening
    stream = hub.stream()
    await anext(stream)
    await stream.aclose()
    assert hub.listening and hub.subscriber_count == 0


async def test_unfiltered_subscribers_share_one_chunk_per_publish() -> None:
    hub = EventHub()
    streams = [hub.stream() for _ in range(3)]
    for stream in streams:
        await anext(stream)
    hub.publish([event("task_changed", {"task_guid": f"t{i}"}) for i in range(100)])
    chunks = [await asyncio.wait_for(anext(stream), 2) for stream in streams]
    assert chunks[0] is chunks[1] is chunks[2]  # built once, by whichever subscriber asked first
    for stream in streams:
        await stream.aclose()


def test_the_replay_buffer_keeps_about_replay_events() -> None:
    hub = EventHub(replay_events=100)
    for i in range(50):
        hub.publish([event("task_changed", {"task_guid": f"t{i}-{j}"}) for j in range(7)])
    kept = sum(len(batch.events) for batch in hub._kept)
    assert 100 <= kept < 100 + 7, kept  # whole batches: at least the bound, less than one batch more
