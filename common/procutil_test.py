import asyncio
import contextlib
import os
import signal
import socket
from pathlib import Path

import pytest

from common.procutil import (
    EPHEMERAL_RANGE_FILE,
    LISTEN_PORTS_FROM,
    PORT_RANGE_ENV,
    ephemeral_ports_from,
    free_port,
    run_captured,
)
from tests.support.polling import eventually
from tests.support.ports import worker_port_range


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


def test_a_port_range_given_is_where_free_ports_come_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_RANGE_ENV, "21000-21099")
    ports = {free_port() for _ in range(30)}
    assert ports <= set(range(21000, 21100)), sorted(ports)
    assert len(ports) > 1, "picked at random within the range"


@pytest.mark.parametrize("spec", ["21000", "a-b", "21100-21000", "0-10", "1-70000"])
def test_a_malformed_port_range_is_refused_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, spec: str
) -> None:
    monkeypatch.setenv(PORT_RANGE_ENV, spec)
    with pytest.raises(ValueError, match=f"{PORT_RANGE_ENV}: expected LOW-HIGH"):
        free_port()


def test_test_workers_get_disjoint_shares_below_the_ephemeral_range() -> None:
    bounds = [worker_port_range(i, 3).split("-") for i in range(3)]
    shares = [range(int(low), int(high) + 1) for low, high in bounds]
    for a, b in zip(shares, shares[1:], strict=False):
        assert a.stop <= b.start, shares
    ephemeral_from = ephemeral_ports_from() or 32_768
    assert shares[0].start == LISTEN_PORTS_FROM and shares[-1].stop <= ephemeral_from, shares


def test_each_xdist_worker_picks_ports_from_its_own_share() -> None:
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if worker is None or count is None:
        pytest.skip("not under xdist")
    expected = worker_port_range(int(worker.removeprefix("gw")), int(count))
    assert os.environ.get(PORT_RANGE_ENV) == expected, (worker, count, os.environ.get(PORT_RANGE_ENV))


async def test_a_captured_run_gives_the_exit_code_and_both_outputs_and_takes_stdin() -> None:
    code, out, err = await run_captured(["sh", "-c", "cat; echo oops >&2; exit 3"], stdin=b"given",
                                        env={"PATH": "/usr/bin:/bin"}, timeout_s=30.0)
    assert (code, out, err) == (3, b"given", b"oops\n")


async def test_a_captured_run_past_its_timeout_or_cancelled_is_killed_and_reaped(tmp_path: Path) -> None:
    script = "echo $$ > {}; exec sleep 60"
    started: list[int] = []
    try:
        first = tmp_path / "first"
        with pytest.raises(TimeoutError):
            await run_captured(["sh", "-c", script.format(first)], timeout_s=0.5)
        started.append(int(first.read_text()))

        second = tmp_path / "second"
        run = asyncio.ensure_future(run_captured(["sh", "-c", script.format(second)], timeout_s=60.0))
        await eventually(second.exists, 10.0, "the command to start")
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        started.append(int(second.read_text()))
        for pid in started:
            await eventually(lambda pid=pid: not Path(f"/proc/{pid}").exists(), 10.0,
                             f"pid {pid} killed and reaped (no zombie left)")
    finally:  # what a failure left running (still our `sleep 60`, not a process that took its pid since)
        for pid in started:
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x0060\x00":
                    os.kill(pid, signal.SIGKILL)
