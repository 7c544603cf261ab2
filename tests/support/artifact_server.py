"""An artifact server in the test's own process: plain HTTP on loopback (or HTTPS with a certificate and
key), path -> bytes, counting GETs; it answers one `Range: bytes=N-` with 206, can cut a response off,
and redirect."""

from __future__ import annotations

import contextlib
import hashlib
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Files:
    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.gets: dict[str, int] = {}
        self.gate = threading.Event()  # cleared: every GET waits until it is set again
        self.gate.set()
        self.stall_after: int | None = None  # send this many bytes, then wait for `gate` before the rest
        self.stall_s = 10.0  # the longest a GET waits for `gate`
        self.cut_after: int | None = None  # the next response: this many bytes, then the connection closed
        self.redirects: dict[str, str] = {}  # path -> Location (302)
        self.ranges: list[str] = []  # every Range header seen
        self.base = ""

    def add(self, path: str, data: bytes) -> str:
        """Serve `data` at `path`; its URL."""
        self.blobs[path] = data
        return self.base + path


@contextlib.contextmanager
def serve_files(tls: tuple[Path, Path] | None = None) -> Iterator[Files]:
    """`tls`: (certificate, key) to serve HTTPS with."""
    state = Files()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            state.gets[self.path] = state.gets.get(self.path, 0) + 1
            if state.stall_after is None:
                state.gate.wait(state.stall_s)
            if self.path in state.redirects:
                self.send_response(302)
                self.send_header("Location", state.redirects[self.path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = state.blobs.get(self.path)
            if data is None:
                self.send_response(404)
                self.end_headers()
                return
            asked = self.headers.get("Range")
            if asked is not None:
                state.ranges.append(asked)
            if asked is not None and asked.startswith("bytes=") and asked.endswith("-"):
                start = int(asked[len("bytes="):-1])
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                data = data[start:]
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if state.cut_after is not None:
                cut, state.cut_after = state.cut_after, None
                self.wfile.write(data[:cut])
                self.wfile.flush()
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(2)
                return
            if state.stall_after is not None:
                self.wfile.write(data[: state.stall_after])
                self.wfile.flush()
                state.gate.wait(state.stall_s)
                data = data[state.stall_after:]
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    scheme = "http"
    if tls is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(tls[0]), str(tls[1]))
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    state.base = f"{scheme}://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.gate.set()
        server.shutdown()
        server.server_close()
        thread.join(10)
