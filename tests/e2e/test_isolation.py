"""Isolation on the cell, as a tenant would try it: real clusters (LocalCluster, TLS on), real
app processes, as root on a machine with the cgroup controllers; skipped, with the reason, elsewhere.

Each instance runs under its own uid, in its own cgroup (memory with swap, pids, CPU shares) and its own
directory; stop, delete and a rep restarted after `kill -9` kill everything of it; a rep that cannot isolate
says so in one line and exits 2 unless given `--isolation none`, which `vendue cells` then shows.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from common.procutil import app_python, child_preexec, pid_alive, unreachable_by_others, wait_ready_file
from rep.cgroups import CgroupsUnavailable, detect, parse_mountinfo
from rep.isolation import isolation_problem
from rep.settings import RepSettings

from .conftest import (
    APP_COMMAND,
    ROOT,
    E2ECluster,
    _start_cluster,
    _stop_clusters,
    all_running,
    app_processes,
    expect,
    hold_for,
    proc_alive,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

NOBODY = 65534
PROBLEM = isolation_problem(RepSettings(executor="process", isolation="cgroups"))
isolating = pytest.mark.skipif(PROBLEM is not None, reason=f"this machine cannot isolate: {PROBLEM}")


@pytest.fixture
def transport() -> str:
    """Isolation is the rep's own business: one transport is enough (conftest runs both by default)."""
    return "http"


def desire(c: E2ECluster, guid: str, instances: int, command: list[str], **fields: object) -> None:
    assert c.bbs is not None
    c.bbs.desire(guid, instances, command=command, **fields)


def python(source: str) -> list[str]:
    return [app_python(), "-c", source]


def uid_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])


# Touches twice its memory_mb (MEMORY_MB), a MiB at a time.
MEMORY_MB = 48
GREEDY = f"""
import time
chunks = [b"x" * 2**20 for _ in range(2 * {MEMORY_MB})]
time.sleep(600)
"""


@isolating
def test_an_app_over_its_memory_crashes_out_of_memory_and_its_neighbours_run_on(
    make_cluster: Callable[..., E2ECluster],
) -> None:
    c = make_cluster(cells=1, zones=1)
    assert c.bbs is not None
    neighbours = c.guid("neighbours")
    desire(c, neighbours, 2, APP_COMMAND)
    wait_for(lambda: all_running(c.bbs, neighbours, 2), 60, "the neighbours running")
    pids = app_processes(neighbours)

    greedy = c.guid("greedy")
    desire(c, greedy, 1, python(GREEDY), memory_mb=MEMORY_MB, ports=[], health_check={"type": "process"})

    def crashed_out_of_memory() -> dict:
        actuals = c.bbs.actuals(greedy) if c.bbs else []
        crashed = [a for a in actuals if a["crash_count"] >= 1]
        return expect(crashed and crashed[0]["crash_reason"] == "out of memory (killed by signal 9)",
                      [(a["state"], a["crash_count"], a["crash_reason"]) for a in actuals])

    wait_for(crashed_out_of_memory, 60, "the greedy app CRASHED out of memory")
    listed = c.cli("instances", greedy)
    assert "out of memory (killed by signal 9)" in listed.stdout, listed.output
    assert app_processes(neighbours) == pids, "the neighbours are the very same processes"
    all_running(c.bbs, neighbours, 2)


FORK_BOMB = """
import os, time
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.05)
"""
PIDS_LIMIT = 64


@isolating
def test_a_fork_bomb_stops_at_the_pids_limit_and_the_cell_stays_healthy(
    make_cluster: Callable[..., E2ECluster],
) -> None:
    c = make_cluster(cells=1, zones=1, rep_args=["--pids-limit", str(PIDS_LIMIT)])
    assert c.bbs is not None
    bomb = c.guid("bomb")
    desire(c, bomb, 1, python(FORK_BOMB), memory_mb=1024, ports=[], health_check={"type": "process"})

    def bomb_size() -> int:
        return sum(len(pids) for pids in app_processes(bomb).values())

    wait_for(lambda: expect(bomb_size() == PIDS_LIMIT, f"{bomb_size()} processes"), 60,
             f"the bomb at its limit of {PIDS_LIMIT} processes")
    hold_for(
        lambda: expect(bomb_size() <= PIDS_LIMIT, f"{bomb_size()} processes"),
        1.0,
        "the bomb within its limit",
    )

    assert c.rep_state("cell-0")["bid"]["cell_id"] == "cell-0", "the rep answers"
    after = c.guid("after")
    desire(c, after, 1, APP_COMMAND)
    wait_for(lambda: all_running(c.bbs, after, 1), 60, "another app running beside the bomb")

    deleted = c.cli("delete", bomb)
    assert deleted.code == 0, deleted.output
    wait_for(
        lambda: expect(bomb_size() == 0, f"{bomb_size()} processes"), 30, "every process of the bomb gone"
    )


# A daemon, the classic way: fork, setsid, fork again, the middle one exits; it even scrubs its environment
# and leads a new process group. The main process sleeps on.
ESCAPES = """
import os, time, pathlib
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.setpgid(0, 0)
        os.execve("/bin/sleep", ["sleep", "600"], {})
    os._exit(0)
time.sleep(600)
"""


def escapee_of(main: int) -> int:
    """The daemon ESCAPES left: the one process of the instance's uid besides its main process."""
    uid = uid_of(main)
    others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != main
              and proc_alive(int(p)) and _uid_or_none(int(p)) == uid]
    return expect(len(others) == 1 and others[0], f"processes of uid {uid} besides {main}: {others}")


def _uid_or_none(pid: int) -> int | None:
    try:
        return uid_of(pid)
    except (OSError, StopIteration):
        return None


def main_pid(c: E2ECluster, guid: str) -> int:
    lrps = [x for x in c.rep_state("cell-0")["lrps"] if x["process_guid"] == guid]
    return expect(len(lrps) == 1 and lrps[0]["state"] == "running" and lrps[0].get("pid"), lrps)


@isolating
def test_a_setsid_double_fork_escapee_dies_with_delete_and_with_a_rep_killed_and_restarted(
    make_cluster: Callable[..., E2ECluster],
) -> None:
    c = make_cluster(cells=1, zones=1)
    assert c.bbs is not None
    fields = {"ports": [], "health_check": {"type": "process"}}

    deleted = c.guid("escapes")
    desire(c, deleted, 1, python(ESCAPES), **fields)
    main = wait_for(lambda: main_pid(c, deleted), 60, "the app running")
    escapee = wait_for(lambda: escapee_of(main), 30, "its escapee")
    assert os.getsid(escapee) != os.getsid(main), "a session of its own"

    result = c.cli("delete", deleted)
    assert result.code == 0, result.output
    wait_for(lambda: expect(not proc_alive(escapee) and not proc_alive(main), (main, escapee)), 30,
             "the app and its escapee gone after delete")

    survivor = c.guid("escapes")
    desire(c, survivor, 1, python(ESCAPES), **fields)
    main = wait_for(lambda: main_pid(c, survivor), 60, "the second app running")
    escapee = wait_for(lambda: escapee_of(main), 30, "its escapee")

    c.lc.kill("cell-0", signal.SIGKILL)

    wait_for(lambda: expect(not proc_alive(main), main), 30, "the main process gone with its rep (PDEATHSIG)")
    assert proc_alive(escapee), "the escapee outlives its rep (until the rep comes back)"
    c.lc.restart("cell-0")
    wait_for(lambda: expect(not proc_alive(escapee), escapee), 30, "the escapee killed by the restarted rep")


@isolating
def test_each_app_runs_under_a_uid_of_its_own_and_cells_say_how_they_isolate(
    make_cluster: Callable[..., E2ECluster],
) -> None:
    c = make_cluster(cells=1, zones=1)
    assert c.bbs is not None
    rep_uid = uid_of(c.lc.pids()["cell-0"])
    guid = c.guid("uids")
    desire(c, guid, 2, APP_COMMAND)
    wait_for(lambda: all_running(c.bbs, guid, 2), 60, "two instances running")
    uids = {index: uid_of(pids[0]) for index, pids in app_processes(guid).items()}
    assert len(set(uids.values())) == 2 and not {0, rep_uid} & set(uids.values()), uids

    task = c.cli("task", "run", "--memory", "64", "--", "id", "-u")
    assert task.code == 0, task.output
    task_uid = int(task.stdout.strip().splitlines()[-1])
    assert task_uid not in (0, rep_uid), task.output

    cells = c.cli("cells")
    assert c.lc.isolation == "cgroups" and ("cgroup-v1" in cells.stdout or "cgroup-v2" in cells.stdout), (
        cells.output
    )
    [cell] = json.loads(c.cli("cells", "--json").stdout)
    version, disk = cell["isolation"].split(" ")
    assert version in ("cgroup-v1", "cgroup-v2") and disk in ("disk:ext4", "disk:poll"), cell["isolation"]


# Tries what a tenant should not be able to; prints one verdict a line.
TRESPASS = """
import os
def attempt(what, act):
    try:
        act()
        print(what, "ALLOWED")
    except OSError as exc:
        print(what, "denied", exc.errno)
attempt("environ", lambda: open(f"/proc/{os.environ['REP_PID']}/environ", "rb").read())
attempt("data-dir", lambda: open(os.path.join(os.environ["REP_DATA"], "planted"), "w").write("x"))
attempt("sqlite", lambda: open(os.environ["BBS_DB"], "r+b").write(b"x"))
"""


@pytest.fixture
def open_cluster() -> Iterator[E2ECluster]:
    """A cluster whose data dir's parents every user may pass (0755), so that only what the rep and the
    launcher make private keeps an app out."""
    root = Path(tempfile.mkdtemp(prefix="vendue-isolation-"))
    root.chmod(0o755)
    started: list[E2ECluster] = []
    try:
        try:
            yield _start_cluster(started, root / "cluster", "http", cells=1, zones=1)
        finally:
            _stop_clusters(started)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@isolating
def test_an_app_cannot_read_the_reps_environment_nor_write_its_data_dir_or_the_bbs_database(
    open_cluster: E2ECluster,
) -> None:
    c = open_cluster
    data = c.lc.data_dir
    assert unreachable_by_others(data) is None, "the cluster's own dir is open: the rep must protect itself"
    env = {"REP_PID": str(c.lc.pids()["cell-0"]), "REP_DATA": str(data / "cells" / "cell-0"),
           "BBS_DB": str(data / "bbs" / "bbs.db")}
    assert Path(env["BBS_DB"]).is_file()
    flags = [arg for name, value in env.items() for arg in ("--env", f"{name}={value}")]

    task = c.cli("task", "run", "--memory", "64", *flags, "--", *python(TRESPASS))

    assert task.code == 0, task.output
    verdicts = dict(line.split(" ", 1) for line in task.stdout.splitlines() if line.split(" ")[0] in
                    ("environ", "data-dir", "sqlite"))
    assert verdicts == {"environ": "denied 13", "data-dir": "denied 13", "sqlite": "denied 13"}, task.output
    assert not (data / "cells" / "cell-0" / "planted").exists()


# --- where it cannot isolate --------------------------------------------------------------------------------


def rep_argv(*args: str) -> list[str]:
    """`vendue rep` with an interpreter and packages an unprivileged user can run (this one may be under
    /root): the apps' Python with this environment's packages on PYTHONPATH."""
    return [app_python(), "-m", "deploy.cli", "rep", *args]


def nobody_env() -> dict[str, str]:
    packages = sysconfig.get_paths()["purelib"]
    for needed in (ROOT, Path(packages)):
        if unreachable_by_others(needed) is not None:
            pytest.skip(f"{needed} is out of reach of uid {NOBODY}")
    version = subprocess.run(
        [app_python(), "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()
    if version != str(sys.version_info[:2]):
        pytest.skip(
            f"{app_python()} is Python {version}, this environment's packages are for {sys.version_info[:2]}"
        )
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": "/tmp",
        "PYTHONPATH": f"{ROOT}:{packages}",
        "PYTHONUNBUFFERED": "1",
    }


@pytest.fixture
def nobody_dir() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("starting a rep as another user needs root")
    root = Path(tempfile.mkdtemp(prefix="vendue-nobody-"))
    os.chown(root, NOBODY, NOBODY)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def as_nobody() -> Callable[[], None]:
    return child_preexec(uid=NOBODY, gid=NOBODY)


def test_a_rep_not_root_refuses_to_isolate_in_one_line_and_exit_2(nobody_dir: Path) -> None:
    env = nobody_env()
    result = subprocess.run(rep_argv("--port", "0", "--data-dir", str(nobody_dir / "data"), "--cell-id", "x"),
                            env=env, cwd=nobody_dir, capture_output=True, text=True, timeout=60,
                            preexec_fn=as_nobody())
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: cannot isolate instances: not running as root (uid {NOBODY}); run as root, or pass "
        "--isolation "
        "none to run apps as the rep's own user, unisolated"
    ), result.stderr
    assert len([line for line in result.stderr.splitlines() if line.startswith("error:")]) == 1


def a_cgroup_mount_lacking_a_controller() -> Path:
    """A real cgroup mount of this machine under which the rep does not find memory, pids and cpu."""
    for mount in parse_mountinfo(Path("/proc/self/mountinfo").read_text()):
        try:
            detect("probe", fs_root=mount.point)
        except CgroupsUnavailable:
            return mount.point
    pytest.skip("every cgroup mount of this machine has memory, pids and cpu")


def test_a_missing_controller_is_one_line_and_exit_2(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the controllers are checked as root only (not root is refused first)")
    mount = a_cgroup_mount_lacking_a_controller()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "deploy.cli",
            "rep",
            "--port",
            "0",
            "--data-dir",
            str(tmp_path),
            "--cell-id",
            "x",
            "--cgroup-fs",
            str(mount),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith("error: cannot isolate instances: ") and str(mount) in line, line
    assert line.endswith("or pass --isolation none to run apps as the rep's own user, unisolated"), line


@isolating
def test_isolation_none_as_a_user_works_and_is_shown(make_cluster: Callable[..., E2ECluster],
                                                     nobody_dir: Path) -> None:
    c = make_cluster(cells=1, zones=1)
    assert c.bbs is not None
    files = c.lc.issue_certificate("rep", "rep-nobody", cells=["cell-nobody"])
    for source in (files.cert, files.key, files.ca):
        shutil.copy(source, nobody_dir / source.name)
        os.chown(nobody_dir / source.name, NOBODY, NOBODY)
    ready = nobody_dir / "ready"
    argv = rep_argv(
        "--port",
        "0",
        "--data-dir",
        str(nobody_dir / "data"),
        "--cell-id",
        "cell-nobody",
        "--zone",
        "z0",
        "--tag",
        "nobody",
        "--bbs-url",
        c.lc.bbs_url,
        "--isolation",
        "none",
        "--memory-mb",
        "1024",
        "--disk-mb",
        "1024",
        "--ready-file",
        str(ready),
        "--tls-cert",
        str(nobody_dir / files.cert.name),
        "--tls-key",
        str(nobody_dir / files.key.name),
        "--tls-ca",
        str(nobody_dir / files.ca.name),
        "--presence-ttl",
        "2",
    )
    with open(nobody_dir / "rep.log", "wb") as log:
        rep = subprocess.Popen(argv, env=nobody_env(), cwd=nobody_dir, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True, preexec_fn=as_nobody())
    try:
        wait_ready_file(ready, timeout_s=60, proc=rep)
        assert "isolation none" in (nobody_dir / "rep.log").read_text(), "a warning at start"

        def shown() -> bool:
            table = c.cli("cells")
            row = [line for line in table.stdout.splitlines() if "cell-nobody" in line]
            return expect(row and " none " in f" {row[0]} ", table.stdout)

        wait_for(shown, 30, "cell-nobody listed with isolation none")
        guid = c.guid("unisolated")
        desire(c, guid, 1, APP_COMMAND, placement_tags=["nobody"])
        running = wait_for(lambda: all_running(c.bbs, guid, 1), 60, "the app running on the unisolated cell")
        assert running[0]["cell_id"] == "cell-nobody"
        [[pid]] = app_processes(guid).values()
        assert uid_of(pid) == NOBODY, "an unisolated app runs as its rep's user"
        c.cli("delete", guid)
        wait_for(lambda: expect(not pid_alive(pid), pid), 30, "the app stopped")
    finally:
        rep.send_signal(signal.SIGINT)
        try:
            rep.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(rep.pid, signal.SIGKILL)
            rep.wait(timeout=10)
        if rep.returncode not in (0, None):
            print((nobody_dir / "rep.log").read_text(errors="replace")[-3000:])

