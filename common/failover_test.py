"""The failover transports against two real HTTP servers on loopback (http.server in threads): a stopped
replica, a 5xx, a hung one, stickiness, request bodies sent again, and what the caller sees when every
replica fails."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from common.failover import AsyncFailoverTransport, FailoverTransport, URLListError, split_urls

pytestmark = pytest.mark.timeout(60)


class Replica:
    """One HTTP server on 127.0.0.1: answers 200 with what it received, or `status`, or hangs."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.status = 200
        self.hang = threading.Event()  # set: hold every request until released (or 10 s)
        self.release = threading.Event()
        self.received: list[dict] = []
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Replica:
        replica = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length).decode() if length else ""
                replica.received.append({"method": self.command, "path": self.path, "body": body,
                                         "host": self.headers.get("host")})
                if replica.hang.is_set():
                    replica.release.wait(10.0)
                payload = json.dumps({"server": replica.name, "path": self.path, "body": body}).encode()
                self.send_response(replica.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = _answer

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close the listening socket: connections to the port are refused from now on."""
        self.release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5.0)


@pytest.fixture
def replicas() -> Iterator[tuple[Replica, Replica]]:
    a, b = Replica("a").start(), Replica("b").start()
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


def served_by(response: httpx.Response) -> str:
    return response.json()["server"]


def test_split_urls_takes_one_or_several_and_refuses_empty_entries() -> None:
    assert split_urls("http://a:1") == ["http://a:1"]
    assert split_urls(" http://a:1/ ,http://b:2") == ["http://a:1", "http://b:2"]
    for bad in ("", "http://a:1,", ",http://b:2", "http://a:1,,http://b:2"):
        with pytest.raises(URLListError):
            split_urls(bad)


async def test_a_stopped_replica_is_skipped_and_the_next_one_stays_current(replicas) -> None:
    a, b = replicas
    transport = AsyncFailoverTransport([a.url, b.url])
    async with httpx.AsyncClient(base_url=a.url, transport=transport, timeout=5.0) as client:
        assert served_by(await client.get("/v1/cells")) == "a"
        a.stop()
        first = await client.get("/v1/cells?x=1")
        assert (served_by(first), first.json()["path"]) == ("b", "/v1/cells?x=1")
        assert b.received[-1]["host"] == f"127.0.0.1:{b.port}", (
            f"expected b's own Host header, saw {b.received[-1]}"
        )
        a.start()  # back on its port: the client stays with b (sticky) until b fails
        seen = [served_by(await client.get("/ping")) for _ in range(3)]
        assert seen == ["b", "b", "b"], f"expected b to stay current after a came back; saw {seen}"
        assert [r["path"] for r in a.received] == ["/v1/cells"], f"a saw {a.received}"
        b.stop()
        assert served_by(await client.get("/ping")) == "a"
        assert transport.replicas.switches == 2 and transport.current_url == a.url


async def test_a_5xx_moves_on_and_the_body_is_sent_again(replicas) -> None:
    a, b = replicas
    a.status = 503
    transport = AsyncFailoverTransport(f"{a.url},{b.url}")
    async with httpx.AsyncClient(transport=transport, timeout=5.0) as client:
        response = await client.post(f"{a.url}/v1/cells/c1/lifecycle", json={"n": 1})  # an absolute URL
    assert (response.status_code, served_by(response)) == (200, "b")
    assert [(r["method"], r["body"]) for r in a.received] == [("POST", '{"n":1}')]
    assert [(r["method"], r["body"]) for r in b.received] == [("POST", '{"n":1}')]
    assert transport.current_url == b.url


async def test_a_hung_replica_times_out_and_the_next_one_answers(replicas) -> None:
    a, b = replicas
    a.hang.set()
    async with httpx.AsyncClient(base_url=a.url, transport=AsyncFailoverTransport([a.url, b.url]),
                                 timeout=0.5) as client:
        response = await client.get("/v1/leases/auctioneer")
    assert served_by(response) == "b"


async def test_when_every_replica_fails_the_caller_sees_the_last_answer_or_the_error(replicas) -> None:
    a, b = replicas
    a.status = 500
    b.stop()
    transport = AsyncFailoverTransport([a.url, b.url])
    async with httpx.AsyncClient(base_url=a.url, transport=transport, timeout=5.0) as client:
        response = await client.get("/v1/cells")  # a answered 500, b refused: a's answer, body and all
        assert (response.status_code, served_by(response)) == (500, "a")
        b.start()
        b.status = 502
        response = await client.get("/v1/cells")  # both answer 5xx: the last one's
        assert (response.status_code, served_by(response)) == (502, "b")
        a.stop()
        b.stop()
        with pytest.raises(httpx.ConnectError):
            await client.get("/v1/cells")


async def test_streams_and_other_hosts(replicas) -> None:
    a, b = replicas
    other = Replica("other").start()
    try:
        a.stop()
        async with httpx.AsyncClient(transport=AsyncFailoverTransport([a.url, b.url]), timeout=5.0) as client:
            async with client.stream("GET", f"{a.url}/v1/events") as response:
                body = json.loads(await response.aread())
            assert body["server"] == "b"
            # Not one of the replicas: sent as it is.
            assert served_by(await client.get(f"{other.url}/elsewhere")) == "other"
            assert [r["path"] for r in b.received] == ["/v1/events"]
    finally:
        other.stop()


def test_base_urls_with_a_path_prefix(replicas) -> None:
    a, b = replicas
    a.stop()
    with httpx.Client(base_url=f"{a.url}/bbs", transport=FailoverTransport([f"{a.url}/bbs", f"{b.url}/api/"]),
                      timeout=5.0) as client:
        assert client.get("/v1/cells").json()["path"] == "/api/v1/cells"


def test_the_sync_transport_fails_over_and_sticks(replicas) -> None:
    a, b = replicas
    transport = FailoverTransport([a.url, b.url])
    with httpx.Client(base_url=a.url, transport=transport, timeout=5.0) as client:
        a.stop()
        assert served_by(client.post("/v1/desired_lrps", json={"process_guid": "web",
                                                               "command": ["true"]})) == "b"
        assert b.received[-1]["body"] == '{"process_guid":"web","command":["true"]}'
        a.start()
        assert served_by(client.get("/v1/desired_lrps")) == "b"
        assert a.received == []
