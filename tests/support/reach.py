"""Whether a TCP listener answers, from the calling thread's network namespace (a host's thread, or the
tests' own in the root namespace): the multi-host network's tests (tests/cluster) probe with these."""

from __future__ import annotations

import socket

PORT = 7070
PROBE_TIMEOUT_S = 0.5  # a vanished SYN: the connect times out (a refusal would be at once)


def probe(address: str, port: int = PORT) -> str:
    """How a TCP connection to address:port from the calling thread's namespace goes: "accepted",
    "timeout" (the SYN vanished), or the name of the error (e.g. ConnectionRefusedError at once)."""
    try:
        with socket.create_connection((address, port), timeout=PROBE_TIMEOUT_S):
            return "accepted"
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return type(exc).__name__


def reaches(address: str, port: int = PORT) -> bool:
    """Whether a TCP connection to address:port is accepted from the calling thread's namespace."""
    return probe(address, port) == "accepted"


def listen(address: str, port: int = PORT) -> socket.socket:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((address, port))
    server.listen(16)
    return server
