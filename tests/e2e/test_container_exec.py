"""`vendue exec` into a container end to end (docs/exec.md, docs/containers.md "Exec"): a real registry
(tests/support/oci_registry.py), one cell of a real cluster (TLS on) running `--executor container` as
root with runc; skipped, with the reason, where this machine cannot run containers.

A command sees the container's $PORT, uid and root filesystem (the image's busybox layout, not the host's);
a shell under a real pseudo-terminal (the CLI driven through one) gets runc's terminal, follows a resize and
its `exit 3` is the CLI's status; a program the image lacks is refused in one line; a dropped connection
kills the command inside the container.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.artifact_server import digest
from tests.support.cli_process import cli_env, vendue_argv
from tests.support.containers import containers_problem, free_subnets, uid_of
from tests.support.oci_registry import HTTPD_IMAGE, Registry, build_image, oci_registry, tools_missing
from tests.support.pty_session import PtySession

from .conftest import (
    ROOT,
    E2ECluster,
    _start_cluster,
    _stop_clusters,
    app_processes,
    expect,
    proc_alive,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

PROBLEM = containers_problem() or tools_missing()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2ECluster]:
    """One container cell, the httpd image in a plain-http registry beside it."""
    if PROBLEM is not None:
        pytest.skip(f"this machine cannot run containers: {PROBLEM}")
    work = tmp_path_factory.mktemp("registry")
    started: list[E2ECluster] = []
    with oci_registry(work / "registry") as reg:
        try:
            layout = build_image(work / "layout", "web", **HTTPD_IMAGE)
            reg.push(layout, "web", "team/web", "1")
            c = _start_cluster(started, tmp_path_factory.mktemp("cluster"), "http", cells=1, zones=1,
                               executor="container", container_subnets=free_subnets(1),
                               bbs_args=["--insecure-registry", reg.host],
                               rep_args=["--insecure-registry", reg.host, "--stop-grace", "1"])
            c.registry = reg  # type: ignore[attr-defined]
            yield c
        finally:
            _stop_clusters(started)


@pytest.fixture(scope="module")
def web(cluster: E2ECluster) -> str:
    """The image serving on the default container port (the definition names none: 8080, Diego's)."""
    assert cluster.bbs is not None
    reg: Registry = cluster.registry  # type: ignore[attr-defined]
    guid = cluster.guid("web")
    cluster.bbs.desire(guid, 1, image={"ref": f"{reg.host}/team/web:1"},
                       command=[*HTTPD_IMAGE["entrypoint"], HTTPD_IMAGE["cmd"][0]])

    def up() -> list[dict]:
        assert cluster.bbs is not None
        actuals = cluster.bbs.actuals(guid)
        return expect([a for a in actuals if a["state"] == "RUNNING"],
                      [(a["state"], a.get("crash_reason")) for a in actuals])

    wait_for(up, 120, "the image's instance RUNNING")
    return guid


def container_uid(pid: int) -> int:
    """The uid of host process `pid` as its user namespace sees it (uid_map: inside outside count)."""
    host = uid_of(pid)
    for line in Path(f"/proc/{pid}/uid_map").read_text().splitlines():
        inside, outside, count = (int(n) for n in line.split())
        if outside <= host < outside + count:
            return inside + host - outside
    raise AssertionError(f"uid {host} of pid {pid} is not mapped in its user namespace")


def main_process(guid: str) -> int:
    """The container's command (the oldest process of the instance: before any exec)."""
    pids = app_processes(guid).get(0, [])
    assert pids, f"no process of {guid} found"
    return min(pids, key=lambda p: int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[19]))


def processes_with(argv: list[bytes]) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[:-1] == argv and \
                        proc_alive(int(entry)):
                    found.append(int(entry))
    return found


def cgroup_procs(pid: int) -> Path:
    """The cgroup.procs file of `pid`'s cgroup (v2, else v1's pids or memory hierarchy)."""
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    by_controller = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            by_controller[name] = path
    for name, base in (("", "/sys/fs/cgroup"), ("pids", "/sys/fs/cgroup/pids"),
                       ("memory", "/sys/fs/cgroup/memory")):
        if name in by_controller and Path(base, by_controller[name].lstrip("/"), "cgroup.procs").exists():
            return Path(base, by_controller[name].lstrip("/"), "cgroup.procs")
    raise AssertionError(f"no cgroup.procs for pid {pid}: {lines}")


def test_a_command_sees_the_containers_port_uid_and_root(cluster: E2ECluster, web: str) -> None:
    marker = Path(f"/vendue-host-only-{os.getpid()}")
    marker.touch()
    try:
        answer = cluster.cli("exec", web, "0", "--", "sh", "-c", "echo $PORT; id -u; ls /; pwd")
    finally:
        marker.unlink()
    assert answer.code == 0, answer.output
    lines = answer.stdout.splitlines()
    uid = container_uid(main_process(web))
    assert lines[:2] == ["8080", str(uid)], f"expected the container's port 8080 and uid {uid}: {lines}"
    root = set(lines[2:-1])
    assert marker.name not in root and "work" not in root, f"the host's / seen inside: {sorted(root)}"
    assert {"bin", "www", "proc", "tmp"} <= root, f"expected the image's busybox layout: {sorted(root)}"
    assert lines[-1] == "/www", "the image's working dir"


def test_a_plain_exec_pipes_stdin_and_passes_stderr_and_the_status_through(cluster: E2ECluster,
                                                                           web: str) -> None:
    run = subprocess.run(vendue_argv("exec", web, "0", "-i", "--", "sh", "-c", "cat; echo oops >&2; exit 7"),
                         input=b"hi there\n", env=cli_env(cluster), cwd=ROOT, capture_output=True, timeout=60)
    assert (run.returncode, run.stdout, run.stderr) == (7, b"hi there\n", b"oops\n"), \
        (run.returncode, run.stdout, run.stderr)


def test_a_program_the_image_lacks_is_refused_in_one_line(cluster: E2ECluster, web: str) -> None:
    answer = cluster.cli("exec", web, "0", "--", "/no/such/program")
    assert answer.code == 1 and "/no/such/program" in answer.stderr, answer.output
    assert len(answer.stderr.strip().splitlines()) == 1, answer.stderr


def _size_is(session: PtySession, size: bytes) -> bool:
    session.send(b"busybox stty size\r")
    try:
        session.expect(rb"\n" + size + rb"\r?\n", timeout=2)
    except AssertionError:
        return False
    return True


def test_a_shell_under_a_terminal_gets_the_containers_terminal(cluster: E2ECluster, web: str) -> None:
    uid = container_uid(main_process(web))
    session = PtySession(vendue_argv("exec", web, "0", "-it", "--", "sh"), cli_env(cluster), rows=24, cols=80,
                         cwd=str(ROOT))
    try:
        session.expect(rb"[$#] ")  # the shell's prompt
        session.send(b"echo P=$PORT U=$(id -u) T=$(tty)\r")
        found = session.expect(rb"P=(\d+) U=(\d+) T=(\S+)")
        assert (int(found[1]), int(found[2])) == (8080, uid), f"expected port 8080, uid {uid}: {found[0]!r}"
        assert found[3].startswith(b"/dev/pts/"), found[0]
        assert _size_is(session, b"24 80"), f"expected the CLI's size 24 80 at the start: {session.seen!r}"

        session.resize(33, 101)  # SIGWINCH to the CLI, TIOCSWINSZ on the container terminal's master
        wait_for(lambda: expect(_size_is(session, b"33 101"), session.seen[-200:]), 15,
                 "the container's terminal resized to 33 x 101")

        session.send(b"sleep 1013\r")
        sleeping = wait_for(lambda: expect(processes_with([b"sleep", b"1013"]), "no sleep 1013 yet"), 15,
                            "sleep 1013 running in the container")
        session.send(b"\x03")  # Ctrl-C: the container terminal's SIGINT to its foreground job
        wait_for(lambda: expect(not any(proc_alive(p) for p in sleeping), sleeping), 15,
                 "the sleep interrupted by Ctrl-C")
        session.send(b"echo alive-$((40+2))\r")
        session.expect(rb"alive-42")

        session.send(b"exit 3\r")
        assert session.wait() == 3, f"expected the CLI to exit 3: {session.seen[-300:]!r}"
    finally:
        session.close()


def test_dropping_the_connection_kills_the_command_in_the_container(cluster: E2ECluster, web: str) -> None:
    uid = container_uid(main_process(web))
    proc = subprocess.Popen(vendue_argv("exec", web, "0", "--", "sh", "-c", "echo $$; exec sleep 1011"),
                            env=cli_env(cluster), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        inside = int(proc.stdout.readline())
        pids = wait_for(lambda: expect(processes_with([b"sleep", b"1011"]), "no sleep 1011 yet"), 15,
                        "sleep 1011 running")
        assert len(pids) == 1, pids
        pid = pids[0]
        status = Path(f"/proc/{pid}/status").read_text()
        nspid = next(line for line in status.splitlines() if line.startswith("NSpid:")).split()[1:]
        assert nspid[-1] == str(inside) and len(nspid) > 1, f"expected pid {inside} in a namespace: {nspid}"
        assert container_uid(pid) == uid
        procs = cgroup_procs(pid)
        assert procs == cgroup_procs(main_process(web)), "the command is in the container's cgroup"
        assert str(pid) in procs.read_text().split()

        proc.send_signal(signal.SIGKILL)  # the connection drops without a close
        proc.wait(timeout=10)

        def gone() -> bool:
            listed = procs.read_text().split()
            return expect(str(pid) not in listed and not proc_alive(pid),
                          f"pid {pid} alive {proc_alive(pid)}, in the container's cgroup: {listed}")

        wait_for(gone, 20, "the command killed and out of the container's cgroup")

        def not_listed_inside() -> bool:  # killed, it may be listed until the container's init reaps it
            answer = cluster.cli("exec", web, "0", "--", "sh", "-c", "ls /proc")
            return expect(answer.code == 0 and str(inside) not in answer.stdout.split(),
                          f"pid {inside} listed in the container's /proc: {answer.output[-300:]}")

        wait_for(not_listed_inside, 20, f"pid {inside} gone from the container's /proc")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def _tar_gz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_an_images_artifacts_are_at_their_dest_below_its_working_dir(cluster: E2ECluster) -> None:
    """An app's code on its base image (Diego's droplet on its rootfs): a tree at `.` and a single file at
    `conf/app.conf`, both from the blob store, are in the image's working dir /www, which httpd serves;
    the container cannot change them."""
    assert cluster.bbs is not None
    reg: Registry = cluster.registry  # type: ignore[attr-defined]
    tree = _tar_gz({"hello.txt": b"from an artifact\n", "sub/inner.txt": b"inner\n"})
    conf = b"setting = 1\n"
    blobs = []
    with cluster.lc.http_client(base_url=cluster.lc.bbs_url, timeout=30) as admin:
        for data in (tree, conf):
            answer = admin.put(f"/v1/blobs/{digest(data)}", content=data)
            assert answer.status_code == 201, f"expected 201 storing the blob, saw {answer.status_code}"
            blobs.append(digest(data))
    guid = cluster.guid("artifacts")
    cluster.bbs.desire(guid, 1, image={"ref": f"{reg.host}/team/web:1"},
                       command=[*HTTPD_IMAGE["entrypoint"], HTTPD_IMAGE["cmd"][0]],
                       artifacts=[{"digest": blobs[0], "dest": "."},
                                  {"digest": blobs[1], "dest": "conf/app.conf"}])

    def running() -> dict:
        assert cluster.bbs is not None
        actuals = cluster.bbs.actuals(guid)
        up = [a for a in actuals if a["state"] == "RUNNING"]
        return expect(up, [(a["state"], a.get("crash_reason")) for a in actuals])[0]

    actual = wait_for(running, 120, "the image with artifacts RUNNING")
    host_port = actual["ports"][0]["host_port"]
    for path, body in (("/hello.txt", b"from an artifact\n"), ("/sub/inner.txt", b"inner\n"),
                       ("/conf/app.conf", conf)):
        answer = httpx.get(f"http://127.0.0.1:{host_port}{path}", timeout=5.0)
        assert (answer.status_code, answer.content) == (200, body), \
            f"expected httpd to serve the artifact's {path}: {answer.status_code} {answer.content!r}"
    answer = cluster.cli("exec", guid, "0", "--", "sh", "-c",
                         "cat conf/app.conf; echo changed > hello.txt && echo WROTE; cat hello.txt; "
                         "echo mine > own.txt && cat own.txt")
    assert answer.code == 0, answer.output
    lines = answer.stdout.splitlines()
    assert lines == ["setting = 1", "from an artifact", "mine"], \
        f"expected the artifacts readable, unchangeable, and the working dir the app's: {answer.output}"
    cluster.bbs.scale(guid, 0)


def test_stopping_the_instance_ends_the_session_and_the_command(cluster: E2ECluster) -> None:
    assert cluster.bbs is not None
    reg: Registry = cluster.registry  # type: ignore[attr-defined]
    guid = cluster.guid("stopped")
    cluster.bbs.desire(guid, 1, image={"ref": f"{reg.host}/team/web:1"},
                       command=[*HTTPD_IMAGE["entrypoint"], HTTPD_IMAGE["cmd"][0]])
    wait_for(lambda: expect(app_processes(guid).get(0), "no instance yet"), 120, "the instance running")
    proc = subprocess.Popen(vendue_argv("exec", guid, "0", "--", "sh", "-c", "echo $$; exec sleep 1019"),
                            env=cli_env(cluster), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip().isdigit(), "the command started"
        pids = wait_for(lambda: expect(processes_with([b"sleep", b"1019"]), "no sleep 1019 yet"), 15,
                        "sleep 1019 running")
        cluster.bbs.scale(guid, 0)
        wait_for(lambda: expect(proc.poll() is not None and not any(proc_alive(p) for p in pids),
                                f"CLI exit {proc.poll()}, sleep alive {[proc_alive(p) for p in pids]}"), 30,
                 "the CLI ended and the command killed with the instance")
        assert proc.returncode != 0, "the session did not end as the command's own exit"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
