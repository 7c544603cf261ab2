from __future__ import annotations

import copy
import json
import os
import socket
from pathlib import Path

import pytest

from rep.container_exec import _read_status, exec_process, receive_console, runc_error
from rep.exec_reaper import shell_status
from rep.oci_spec import CAPS, ContainerSpec, runtime_spec


def container_process(userns: bool = True) -> dict:
    spec = runtime_spec(ContainerSpec(
        rootfs="/i/rootfs", argv=["/bin/sh", "-c", "exec httpd"], env={"PORT": "8080", "HOME": "/www"},
        cwd="/www", hostname="g1", netns="/var/run/netns/vd-1", cgroup="vd-1", host_uid=100123,
        host_gid=100123, userns=userns))
    return spec["process"]


@pytest.mark.parametrize("userns", [True, False])
def test_the_exec_process_is_the_containers_own_with_the_command(userns: bool) -> None:
    own = container_process(userns)
    before = copy.deepcopy(own)
    process = exec_process(own, ["sh", "-c", "id -u"], tty=False, rows=24, cols=80)
    assert own == before, "the container's spec is not changed"
    assert process["args"] == ["sh", "-c", "id -u"]
    assert process["terminal"] is False and "consoleSize" not in process
    # as the container's command runs: its user (root inside the user namespace, else the instance's uid),
    # capabilities, no_new_privs, rlimits, environment and working dir
    for key in ("user", "capabilities", "noNewPrivileges", "rlimits", "env", "cwd"):
        assert process[key] == own[key], key
    assert process["user"]["uid"] == (0 if userns else 100123)
    assert process["capabilities"]["bounding"] == (list(CAPS) if userns else [])
    assert process["noNewPrivileges"] is True and process["cwd"] == "/www"
    assert "PORT=8080" in process["env"]


def test_with_a_tty_the_process_has_a_terminal_of_the_callers_size_and_a_term() -> None:
    process = exec_process(container_process(), ["sh"], tty=True, rows=33, cols=101)
    assert process["terminal"] is True
    assert process["consoleSize"] == {"height": 33, "width": 101}
    assert process["env"][-1] == "TERM=xterm" and "PORT=8080" in process["env"]
    own = {**container_process(), "env": ["TERM=vt100", "PORT=8080"]}
    assert exec_process(own, ["sh"], tty=True, rows=1, cols=1)["env"] == ["TERM=vt100", "PORT=8080"]


def test_the_console_master_is_received_over_the_socket() -> None:
    """runc's way (utils.SendFd): one message, the terminal's name, the descriptor as SCM_RIGHTS."""
    runc_side, rep_side = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    read_end, write_end = os.pipe()
    try:
        socket.send_fds(runc_side, [b"/dev/pts/0"], [write_end])
        received = receive_console(rep_side)
        assert received not in (write_end, read_end)
        os.write(received, b"through the sent descriptor")
        os.close(received)
        assert os.read(read_end, 100) == b"through the sent descriptor"
    finally:
        for fd in (read_end, write_end):
            os.close(fd)
        runc_side.close()
        rep_side.close()


def test_a_message_without_a_descriptor_is_an_error() -> None:
    runc_side, rep_side = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with runc_side, rep_side:
        runc_side.sendall(b"/dev/pts/0")
        with pytest.raises(OSError, match="no terminal"):
            receive_console(rep_side)


def test_runcs_reason_is_its_last_logged_error(tmp_path: Path) -> None:
    log = tmp_path / "runc.log"
    log.write_text("\n".join(json.dumps(e) for e in (
        {"level": "warning", "msg": "something minor"},
        {"level": "error", "msg": 'exec failed: exec: "/no/such": stat /no/such: no such file or directory'},
        {"level": "info", "msg": "after"},
    )) + "\nnot json\n")
    assert runc_error(log) == 'exec failed: exec: "/no/such": stat /no/such: no such file or directory'
    assert runc_error(tmp_path / "absent.log") == "runc failed"


async def test_the_reapers_status_line_is_the_commands_pid_or_nothing() -> None:
    for written, expected in ((b"4242\n", 4242), (b"", None), (b"42", None)):
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        os.write(write_end, written)
        os.close(write_end)
        try:
            assert await _read_status(read_end) == expected, written
        finally:
            os.close(read_end)


def test_the_reaper_reports_status_as_a_shell() -> None:
    assert shell_status(3 << 8) == 3
    assert shell_status(0) == 0
    assert shell_status(9) == 128 + 9  # killed by SIGKILL
