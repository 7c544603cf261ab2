"""`vendue exec`'s CLI side without a cluster: its URL and query, the terminal put back after raw mode
whatever happens, the output shown safe on a terminal only, bad input as one line and exit 2."""

from __future__ import annotations

import os
import pty
import termios

import pytest
from typer.testing import CliRunner

from deploy.cli import app
from deploy.exec_cmd import Output, exec_params, exec_url, raw_terminal


def test_the_url_and_the_query() -> None:
    assert exec_url("https://bbs:8443/", "web", 2) == "wss://bbs:8443/v1/desired_lrps/web/instances/2/exec"
    assert exec_url("http://127.0.0.1:1", "web", 0).startswith("ws://127.0.0.1:1/")
    size = os.terminal_size((120, 40))
    assert exec_params(["sh", "-c", "a b"], True, size) == [
        ("argv", "sh"), ("argv", "-c"), ("argv", "a b"), ("tty", "true"), ("rows", "40"), ("cols", "120")]
    assert exec_params(["ls"], False, None) == [("argv", "ls"), ("tty", "false")]


def test_raw_mode_is_undone_even_on_an_error() -> None:
    leader, follower = pty.openpty()
    try:
        before = termios.tcgetattr(follower)
        with pytest.raises(RuntimeError), raw_terminal(follower):
            assert termios.tcgetattr(follower)[3] & termios.ECHO == 0, "raw: no echo"
            raise RuntimeError("the session broke")
        assert termios.tcgetattr(follower) == before
    finally:
        os.close(leader)
        os.close(follower)


def test_output_is_raw_into_a_pipe_and_escaped_on_a_terminal() -> None:
    read_end, write_end = os.pipe()
    try:
        Output(write_end, safe=False).write(b"\x1b]0;owned\x07ok\n")
        assert os.read(read_end, 100) == b"\x1b]0;owned\x07ok\n"
        safe = Output(write_end, safe=True)
        safe.write(b"\x1b[2Jcaf\xc3")  # a character split across two chunks stays whole
        safe.write(b"\xa9\tline\n")
        assert os.read(read_end, 100) == "\\x1b[2Jcafé\tline\n".encode()
    finally:
        os.close(read_end)
        os.close(write_end)


@pytest.mark.parametrize(("args", "words"), [
    (["exec", "web", "x", "--", "true"], "INDEX: must be a whole number"),
    (["exec", "web", "-1", "--", "true"], "-1"),  # an option to the parser: refused all the same
    (["exec", "web", "0"], "COMMAND: give the command"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], words: str) -> None:
    result = CliRunner().invoke(app, args)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and words in lines[0], result.output
