import asyncio
import gzip
import json
import secrets
import zlib

import pytest

from bbs.events import PIECE_BYTES, EventFilter, EventHub, event


async def _next(stream) -> str:
    """The next piece a stream sends, as text."""
    return bytes(await asyncio.wait_for(anext(stream), 2)).decode()


async def test_subscribers_receive_published_events_in_order() -> None:
    hub = EventHub()
    stream = hub.stream()
    assert await _next(stream) == ": connected\n\n"
    hub.publish([event("task_created", {"task_guid": "a"}), event("task_removed", {"task_guid": "a"})])
    chunk = await _next(stream)
    blocks = [b for b in chunk.split("\n\n") if b]
    assert [b.splitlines()[1] for b in blocks] == ["event: task_created", "event: task_removed"]
    assert json.loads(blocks[0].splitlines()[2].removeprefix("data: "))["data"] == {"task_guid": "a"}
    hub.close()
    assert [bytes(c) async for c in stream] == [b""]  # the end of the body: nothing more when plain
    assert hub.subscriber_count == 0


async def test_heartbeat_comment_when_idle() -> None:
    hub = EventHub(heartbeat_s=0.05)
    stream = hub.stream()
    await anext(stream)
    assert await _next(stream) == ": heartbeat\n\n"
    await stream.aclose()
    assert hub.subscriber_count == 0


async def test_a_subscriber_that_falls_behind_is_disconnected() -> None:
    hub = EventHub(queue_chunks=2, flush_s=0)  # each publish a batch of its own
    stream = hub.stream()
    await anext(stream)
    for i in range(5):
        hub.publish([event("task_changed", {"i": i})])
    assert hub.subscriber_count == 0
    assert [bytes(c) async for c in stream] == [b""]


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
        got.extend(_blocks(await _next(stream)))
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
    assert await _next(stream) == ": heartbeat\n\n"
    await stream.aclose()


@pytest.mark.parametrize("last_id", ["other-3", "garbage", "", "{epoch}-1", "{epoch}-99"])
async def test_an_id_it_cannot_resume_from_gets_a_resync_with_the_newest_id(last_id: str) -> None:
    hub = EventHub(replay_events=4, flush_s=0)
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


async def test_unfiltered_subscribers_share_one_text_per_publish() -> None:
    hub = EventHub()
    streams = [hub.stream() for _ in range(3)]
    for stream in streams:
        await anext(stream)
    hub.publish([event("task_changed", {"task_guid": f"t{i}"}) for i in range(100)])
    pieces = [await asyncio.wait_for(anext(stream), 2) for stream in streams]
    assert pieces[0].obj is pieces[1].obj is pieces[2].obj  # built once, by whichever subscriber asked first
    for stream in streams:
        await stream.aclose()


class _Client:
    """A follower of one stream: what came (the body) and what it reads (inflated as the pieces come)."""

    def __init__(self, stream, gzipped: bool) -> None:
        self.stream, self.gzipped = stream, gzipped
        self.inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip
        self.body, self.text = b"", ""
        self.piece_sizes: list[int] = []

    def take(self, piece) -> None:
        self.piece_sizes.append(len(piece))
        self.body += bytes(piece)
        self.text += (self.inflater.decompress(bytes(piece)) if self.gzipped else bytes(piece)).decode()

    async def read(self, events: int) -> None:
        while len(_blocks(self.text)) < events:
            self.take(await asyncio.wait_for(anext(self.stream), 2))
        assert not self.inflater.eof  # the body goes on


@pytest.mark.parametrize("gzipped", [False, True])
async def test_a_large_publish_goes_out_in_pieces_of_at_most_piece_bytes(gzipped: bool) -> None:
    hub = EventHub()
    stream = hub.stream(gzip=gzipped)
    client = _Client(stream, gzipped)
    client.take(await anext(stream))
    # Random pads: even deflated (in a worker thread, being this large) it takes several pieces.
    hub.publish([event("task_changed", {"task_guid": f"t{i}", "pad": secrets.token_hex(100)})
                 for i in range(2000)])
    pieces = len(client.body)
    await client.read(2000)
    assert len(client.body) - pieces > 3 * PIECE_BYTES
    assert [b["id"] for b in _blocks(client.text)] == [f"{hub.epoch}-{i}" for i in range(1, 2001)]
    assert all(0 < n <= PIECE_BYTES for n in client.piece_sizes)
    await stream.aclose()


async def test_a_subscriber_leaving_while_a_batch_is_deflated_leaves_it_to_the_others() -> None:
    hub = EventHub(flush_s=0)
    leaving, staying = _Client(hub.stream(gzip=True), True), _Client(hub.stream(gzip=True), True)
    for client in (leaving, staying):
        client.take(await anext(client.stream))
    hub.publish([event("task_changed", {"task_guid": f"t{i}", "pad": secrets.token_hex(100)})
                 for i in range(1000)])
    batch = hub._kept[-1]
    reading = asyncio.ensure_future(anext(leaving.stream))  # the first to ask: it starts the deflating
    for _ in range(100):  # a few turns of the loop: until it waits on the deflating
        if batch._segment is not None:
            break
        await asyncio.sleep(0)
    assert batch._segment is not None and not batch._segment.done()
    reading.cancel()
    await staying.read(1000)
    assert len(_blocks(staying.text)) == 1000


async def test_a_gzipped_stream_is_one_valid_gzip_body_made_of_shared_and_own_segments() -> None:
    hub = EventHub()
    hub.publish([event("task_changed", {"task_guid": "before"})])
    clients = {
        "plain": _Client(hub.stream(), gzipped=False),
        "everything": _Client(hub.stream(gzip=True), gzipped=True),  # the batches' shared segments
        # its own segments: a filtered pick, and a replay before the shared ones
        "filtered": _Client(hub.stream(wanted=EventFilter(types=frozenset({"task_removed"})), gzip=True),
                            gzipped=True),
        "replaying": _Client(hub.stream(last_event_id=f"{hub.epoch}-0", gzip=True), gzipped=True),
    }
    for client in clients.values():
        client.take(await anext(client.stream))  # subscribed: ": connected"
    for i in range(3):
        hub.publish([event("task_changed", {"task_guid": f"t{i}"}),
                     event("task_removed", {"task_guid": f"t{i}"})])
    for name, events in {"plain": 6, "everything": 6, "filtered": 3, "replaying": 7}.items():
        await clients[name].read(events)
    texts = {name: client.text for name, client in clients.items()}
    assert texts["everything"] == texts["plain"]
    assert [b["event"] for b in _blocks(texts["filtered"])] == ["task_removed"] * 3
    assert [json.loads(b["data"])["data"]["task_guid"] for b in _blocks(texts["replaying"])] == [
        "before", "t0", "t0", "t1", "t1", "t2", "t2"]
    assert len(clients["everything"].body) < len(clients["plain"].body)
    hub.close()  # each gzip body ends with its trailer: a whole gzip file, CRC and length checked
    for name, client in clients.items():
        rest = b"".join([bytes(c) async for c in client.stream])
        if client.gzipped:
            assert gzip.decompress(client.body + rest).decode() == texts[name], name


async def test_what_is_published_within_flush_s_goes_out_as_one_batch() -> None:
    hub = EventHub(flush_s=0.05)
    stream = hub.stream()
    await anext(stream)
    for i in range(100):  # a hundred desires' worth of publishes, one loop turn apart
        hub.publish([event("task_changed", {"task_guid": f"t{i}"})])
        await asyncio.sleep(0)
    assert hub.last_id == f"{hub.epoch}-100"  # numbered at once
    text = await _next(stream)
    assert [b["id"] for b in _blocks(text)] == [f"{hub.epoch}-{i}" for i in range(1, 101)]
    await stream.aclose()


async def test_a_subscriber_gets_a_pending_batch_from_where_it_came_or_resumed() -> None:
    hub = EventHub(flush_s=0.05)
    early = hub.stream()
    await anext(early)
    hub.publish([event("task_changed", {"task_guid": "a"}), event("task_changed", {"task_guid": "b"})])
    late = hub.stream()  # came after a and b were published, before they went out
    resuming = hub.stream(last_event_id=f"{hub.epoch}-1")  # had a (from a sink, say)
    await anext(late)
    await anext(resuming)
    hub.publish([event("task_changed", {"task_guid": "c"})])
    guids = {name: [json.loads(b["data"])["data"]["task_guid"] for b in _blocks(await _next(stream))]
             for name, stream in {"early": early, "late": late, "resuming": resuming}.items()}
    assert guids == {"early": ["a", "b", "c"], "late": ["c"], "resuming": ["b", "c"]}
    for stream in (early, late, resuming):
        await stream.aclose()


def test_the_replay_buffer_keeps_about_replay_events() -> None:
    hub = EventHub(replay_events=100)
    for i in range(50):
        hub.publish([event("task_changed", {"task_guid": f"t{i}-{j}"}) for j in range(7)])
    kept = sum(len(batch.events) for batch in hub._kept)
    assert 100 <= kept < 100 + 7, kept  # whole batches: at least the bound, less than one batch more


async def test_recent_gives_the_last_kept_events_that_match_oldest_first() -> None:
    hub = EventHub(replay_events=6, flush_s=0)  # each publish a batch of its own, kept at once
    assert hub.recent(10) == []
    for i in range(5):  # 10 events, the last 6 kept
        guid = {"task_guid": f"t{i}"}
        hub.publish([event("task_changed", guid), event("task_removed", guid)])
    hub.flush_s = 60
    hub.publish([event("actual_lrp_changed", {"process_guid": "web", "cell_id": "c1"})])  # not flushed yet
    newest = hub.recent(3)
    assert [e["id"].rsplit("-", 1)[1] for e in newest] == ["9", "10", "11"], newest
    removed = hub.recent(100, EventFilter(types=frozenset({"task_removed"})))
    assert [e["data"]["task_guid"] for e in removed] == ["t2", "t3", "t4"], "only what was kept, in order"
    assert [e["type"] for e in hub.recent(100, EventFilter(app="web"))] == ["actual_lrp_changed"]
    assert hub.recent(100, EventFilter(cell="c2")) == []
