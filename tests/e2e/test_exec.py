"""End to end: `vendue exec` against real processes with TLS on (docs/exec.md): one cluster of one cell.

A shell under a real pseudo-terminal (the CLI driven through one, as a person's terminal) sees the
instance's $PORT and runs as its uid, follows a resize, survives a Ctrl-C that interrupts what it runs,
and its `exit 3` is the CLI's status; a plain exec pipes stdin and passes its status through; a reader,
no identity, an app pushed with --no-exec and an index that does not run are refused; every exec is an
event and in the app's story without its output; a dropped connection kills what the command started;
a reader that stops reading blocks the command, not the servers' memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import aiohttp
import pytest

from common.tls import CA_CERT, client_context
from tests.support.cli_process import cli_env, vendue_argv
from tests.support.containers import uid_of
from tests.support.pty_session import PtySession

from .conftest import (
    APP_COMMAND,
    ROOT,
    E2ECluster,
    _start_cluster,
    _stop_clusters,
    app_processes,
    expect,
    hold_for,
    proc_alive,
    wait_all_running,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2ECluster]:
    started: list[E2ECluster] = []
    try:
        c = _start_cluster(started, tmp_path_factory.mktemp("cluster"), "http", cells=1, zones=1)
        c.follow_events()
        yield c
    finally:
        _stop_clusters(started)


@pytest.fixture(scope="module")
def web(cluster: E2ECluster) -> str:
    assert cluster.bbs is not None
    guid = cluster.guid("web")
    cluster.bbs.desire(guid, 1, command=APP_COMMAND)
    wait_all_running(cluster.bbs, guid, 1, timeout=60)
    return guid


def instance(c: E2ECluster, guid: str) -> tuple[int, int, str]:
    """(its port, its main process's uid, its instance guid)."""
    assert c.bbs is not None
    actual = next(a for a in c.bbs.actuals(guid) if a["state"] == "RUNNING")
    pid = app_processes(guid)[0][0]
    return actual["ports"][0]["host_port"], uid_of(pid), actual["instance_guid"]


def processes_with(argv: list[bytes]) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[:-1] == argv and \
                        proc_alive(int(entry)):
                    found.append(int(entry))
    return found


def test_a_shell_under_a_terminal_runs_as_the_instance(cluster: E2ECluster, web: str) -> None:
    port, uid, _ = instance(cluster, web)
    if cluster.lc.isolation == "cgroups":
        assert uid != 0, "an isolated instance runs under its own uid"
    session = PtySession(vendue_argv("exec", web, "0", "-it", "--", "sh"), cli_env(cluster), rows=24, cols=80,
                         cwd=str(ROOT))
    try:
        session.expect(rb"[$#] ")  # the remote shell's prompt
        session.send(b"echo P=$PORT U=$(id -u) T=$(tty)\r")
        found = session.expect(rb"P=(\d+) U=(\d+) T=(\S+)")
        assert (int(found[1]), int(found[2])) == (port, uid), f"expected port {port}, uid {uid}: {found[0]!r}"
        assert found[3].startswith(b"/dev/pts/"), found[0]

        session.resize(33, 101)  # SIGWINCH to the CLI, a resize to the remote terminal
        wait_for(lambda: expect(_size_is(session, b"33 101"), session.seen[-200:]), 15,
                 "the remote terminal resized to 33 x 101")

        session.send(b"sleep 1007\r")
        sleeping = wait_for(lambda: expect(processes_with([b"sleep", b"1007"]), "no sleep 1007 yet"), 15,
                            "sleep 1007 running in the instance")
        assert all(uid_of(pid) == uid for pid in sleeping)
        session.send(b"\x03")  # Ctrl-C: the remote terminal's SIGINT to its foreground job
        wait_for(lambda: expect(not any(proc_alive(p) for p in sleeping), sleeping), 15,
                 "the sleep interrupted by Ctrl-C")
        session.send(b"echo alive-$((40+2))\r")
        session.expect(rb"alive-42")

        session.send(b"exit 3\r")
        assert session.wait() == 3, f"expected the CLI to exit 3: {session.seen[-300:]!r}"
    finally:
        session.close()


def _size_is(session: PtySession, size: bytes) -> bool:
    session.send(b"stty size\r")
    try:
        session.expect(rb"\n" + size + rb"\r?\n", timeout=2)
    except AssertionError:
        return False
    return True


def test_a_plain_exec_pipes_stdin_and_passes_the_status_through(cluster: E2ECluster, web: str) -> None:
    port, _, instance_guid = instance(cluster, web)
    script = "cat; echo port=$PORT index=$INSTANCE_INDEX guid=$INSTANCE_GUID; pwd; echo oops >&2; exit 7"
    run = subprocess.run(vendue_argv("exec", web, "0", "-i", "--", "sh", "-c", script), input=b"hi there\n",
                         env=cli_env(cluster), cwd=ROOT, capture_output=True, timeout=60)
    out = run.stdout.decode().splitlines()
    assert run.returncode == 7, (run.returncode, run.stdout, run.stderr)
    assert out[:2] == ["hi there", f"port={port} index=0 guid={instance_guid}"], out
    assert out[2].endswith(instance_guid), f"the instance's directory is the cwd: {out}"
    assert run.stderr == b"oops\n"
    # Without -i the command's stdin is empty: cat ends at once.
    run = subprocess.run(vendue_argv("exec", web, "0", "--", "cat"), input=b"not sent\n",
                         env=cli_env(cluster), cwd=ROOT, capture_output=True, timeout=60)
    assert (run.returncode, run.stdout) == (0, b""), (run.returncode, run.stdout, run.stderr)


def test_refusals_are_one_line_and_run_nothing(cluster: E2ECluster, web: str) -> None:
    c = cluster
    reader = c.cli("tokens", "create", "--role", "reader", "--name", "exec-reader")
    assert reader.code == 0, reader.output
    refused = c.cli("exec", web, "0", "--token", reader.stdout.strip(), "--", "true")
    assert refused.code == 1 and "403" in refused.stderr, refused.output
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr

    cases = (
        ((web, "5", "--", "true"), 2, "no index 5"),
        (("no-such-app", "0", "--", "true"), 2, "not found"),
        ((web, "x", "--", "true"), 2, "INDEX"),
        ((web, "0"), 2, "COMMAND"),
        ((web, "0", "--", "/no/such/program"), 1, "/no/such/program"),
    )
    with ThreadPoolExecutor(len(cases)) as pool:  # independent CLI processes: at once
        answers = list(pool.map(lambda case: c.cli("exec", *case[0]), cases))
    for (args, code, words), answer in zip(cases, answers, strict=True):
        assert answer.code == code and words in answer.stderr, (args, answer.output)
        assert len(answer.stderr.strip().splitlines()) == 1, answer.stderr

    sealed = c.guid("sealed")
    pushed = c.cli("push", sealed, "--no-exec", "--", *APP_COMMAND)
    assert pushed.code == 0, pushed.output
    assert c.bbs is not None
    wait_all_running(c.bbs, sealed, 1, timeout=60)
    before = instance(c, sealed)[2]
    answer = c.cli("exec", sealed, "0", "--", "true")
    assert answer.code == 1 and "exec is disabled" in answer.stderr, answer.output
    assert c.cli("exec-enable", sealed).code == 0
    answer = c.cli("exec", sealed, "0", "--", "echo", "let-in")
    assert (answer.code, answer.stdout) == (0, "let-in\n"), answer.output
    assert instance(c, sealed)[2] == before, "toggling exec rolls no instance"


def test_an_upgrade_without_identity_or_role_is_refused(cluster: E2ECluster, web: str) -> None:
    c = cluster
    ca = client_context(None, ca=c.lc.certs_dir / CA_CERT)
    reader = c.lc.issue_certificate("reader", "exec-reader-cert")
    rep = next(iter(c.reps.values()))
    _, _, instance_guid = instance(c, web)
    bbs_path = f"{c.lc.bbs_url}/v1/desired_lrps/{web}/instances/0/exec"
    rep_path = f"{rep.url}/instances/{instance_guid}/exec"
    cases = [
        (bbs_path, ca, 401),
        (bbs_path, client_context(reader), 403),
        (rep_path, ca, 401),
        (rep_path, c.lc.verify, 403),  # the admin: only the BBS calls a rep's exec
    ]
    for url, ssl_context, status in cases:
        seen = asyncio.run(_upgrade_status(url.replace("https://", "wss://"), ssl_context))
        assert seen == status, f"expected {status} for {url}, saw {seen}"


async def _upgrade_status(url: str, ssl_context: object) -> int:
    async with aiohttp.ClientSession() as session:
        try:
            ws = await session.ws_connect(url, params={"argv": "true", "cell": "x"}, ssl=ssl_context)
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status
        await ws.close()
        return 101


def test_every_exec_is_an_event_and_in_the_story_without_its_output(cluster: E2ECluster, web: str) -> None:
    c = cluster
    marker = f"secret-output-{time.monotonic_ns()}"
    answer = c.cli("exec", web, "0", "--", "echo", marker)
    assert answer.code == 0 and marker in answer.stdout, answer.output
    assert c.events is not None

    def started() -> list:
        return [e for e in c.events.snapshot() if e.type == "exec_started"
                and e.data.get("process_guid") == web and e.data.get("program") == "echo"]

    events = wait_for(lambda: expect(started(), [e.type for e in c.events.snapshot()][-10:]), 15,
                      "an exec_started event")
    data = events[-1].data
    assert data["args"] == 1 and data["index"] == 0 and data["user"].startswith("admin"), data
    wait_for(lambda: expect([e for e in c.events.snapshot() if e.type == "exec_ended"
                             and e.data.get("program") == "echo"], "no exec_ended"), 15,
             "an exec_ended event")
    assert not any(marker in str(e.data) for e in c.events.snapshot()), "an event holds the command's output"
    story = c.cli("app", web, "--json")
    assert story.code == 0 and '"exec"' in story.stdout, story.output
    assert marker not in story.stdout
    shown = c.cli("app", web)
    assert "exec" in shown.stdout and "echo" in shown.stdout, shown.output


def test_dropping_the_connection_kills_the_command(cluster: E2ECluster, web: str) -> None:
    _, uid, instance_guid = instance(cluster, web)
    proc = subprocess.Popen(vendue_argv("exec", web, "0", "--", "sh", "-c", "echo $$; exec sleep 1009"),
                            env=cli_env(cluster), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        pid = int(proc.stdout.readline())
        assert proc_alive(pid) and uid_of(pid) == uid
        if cluster.lc.isolation == "cgroups":
            cgroup = Path(f"/proc/{pid}/cgroup").read_text()
            assert instance_guid in cgroup, f"expected the instance's cgroup, saw {cgroup}"
        proc.send_signal(signal.SIGKILL)  # the connection drops without a close
        proc.wait(timeout=10)
        wait_for(lambda: expect(not proc_alive(pid), f"pid {pid} alive"), 20, "the exec'd command killed")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) / 1024


def written(pid: int) -> int:
    io = Path(f"/proc/{pid}/io").read_text()
    return int(next(line for line in io.splitlines() if line.startswith("wchar:")).split()[1])


def test_a_reader_that_stops_reading_stops_the_command_not_the_memory(cluster: E2ECluster, web: str) -> None:
    """`yes` into a CLI whose stdout nobody reads: every buffer on the way fills, then the command blocks
    on its writes, while the rep's and the BBS's memory stay flat."""
    pids = cluster.lc.pids()
    servers = {"bbs": pids["bbs"], "rep": pids[next(iter(cluster.reps.values())).component]}
    before = {name: rss_mb(pid) for name, pid in servers.items()}
    line = "y" * 1000
    proc = subprocess.Popen(vendue_argv("exec", web, "0", "--", "sh", "-c", f"echo $$; exec yes {line}"),
                            env=cli_env(cluster), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        pid = int(proc.stdout.readline())  # and nothing more is read
        last = [-1]

        def blocked() -> int:
            now = written(pid)
            still, last[0] = now == last[0], now
            return expect(still and now, f"{now} bytes written and counting")

        total = wait_for(blocked, 60, "yes blocked on its writes", interval=0.5)

        def flat() -> bool:
            grown = {name: rss_mb(p) - before[name] for name, p in servers.items()}
            return expect(written(pid) == total and all(mb < 32 for mb in grown.values()),
                          f"written {written(pid)} (blocked at {total}), grown MB {grown}")

        hold_for(flat, 3.0, "the command blocked and the servers' memory flat")
        print(f"blocked after {total / 2**20:.1f} MiB; RSS {before} -> "
              f"{ {name: rss_mb(p) for name, p in servers.items()} }")
        assert total < 256 * 2**20, f"expected the buffers on the way to hold little, {total} bytes went"
    finally:
        proc.kill()
        proc.wait(timeout=10)
