"""An artifact server in the test's own process: plain HTTP on loopback, path -> bytes, counting GETs."""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Files:
    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.gets: dict[str, int] = {}
        self.gate = threading.Event()  # cleared: every GET waits until it is set again
        self.gate.set()
        self.stall_after: int | None = None  # send this many bytes, then wait for `gate` before the rest
        self.base = ""

    def add(self, path: str, data: bytes) -> str:
        """Serve `data` at `path`; its URL."""
        self.blobs[path] = data
        return self.base + path


@contextlib.contextmanager
def serve_files() -> Iterator[Files]:
    state = Files()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            state.gets[self.path] = state.gets.get(self.path, 0) + 1
            if state.stall_after is None:
                state.gate.wait(10)
            data = state.blobs.get(self.path)
            if data is None:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if state.stall_after is not None:
                self.wfile.write(data[: state.stall_after])
                self.wfile.flush()
                state.gate.wait(10)
                data = data[state.stall_after:]
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.gate.set()
        server.shutdown()
        server.server_close()
        thread.join(10)
