import socket

from common.procutil import EPHEMERAL_RANGE_FILE, LISTEN_PORTS_FROM, free_port


def test_a_free_port_is_bindable_and_outside_the_ephemeral_range() -> None:
    ephemeral_from, ephemeral_to = map(int, EPHEMERAL_RANGE_FILE.read_text().split())
    ports = {free_port() for _ in range(20)}
    for port in ports:
        assert LISTEN_PORTS_FROM <= port < ephemeral_from or port > ephemeral_to, (port, ephemeral_from)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))
    assert len(ports) > 1, "picked at random, not the same port each time"


def test_a_port_taken_by_a_listener_is_not_handed_out() -> None:
    listeners = []
    try:
        taken = set()
        for _ in range(200):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", free_port()))
            sock.listen()
            listeners.append(sock)
            taken.add(sock.getsockname()[1])
        assert len(taken) == 200, "every port handed out was free when its listener bound it"
    finally:
        for sock in listeners:
            sock.close()
