"""The launcher with the real components: start, kill, restart, stop; sim hosts; cleanup on failure; TLS with
a certificate per component by default, and the insecure mode."""

from __future__ import annotations

import contextlib
import json
import signal
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from common.procutil import pid_alive
from common.tls import TLSFiles, client_context, identity_of_file, init_ca, issue
from tests.support.containers import container_leftovers, containers_problem, free_subnets
from tests.support.polling import expect, wait_for

from .cli import _register, app
from .cluster import CLUSTER_FILE, ClusterError, LocalCluster, SimRepProcess, read_cluster_file
from .cluster_file import private_log, write_cluster_file

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

FAST_BBS = ("--presence-ttl", "2", "--convergence-interval", "0.5")
FAST_REP = ("--presence-ttl", "2")
# A BBS restarting, or answering with no cell list yet: not yet.
UNANSWERED = (httpx.HTTPError, ValueError, KeyError)
_register()


def cell_ids(lc: LocalCluster, bbs_url: str | None = None) -> list[str]:
    response = httpx.get(f"{bbs_url or lc.bbs_url}/v1/cells", timeout=2.0, verify=lc.verify)
    return sorted(c["cell_id"] for c in response.json()["items"])


def cells_are(lc: LocalCluster, expected: list[str]) -> bool:
    present = cell_ids(lc)
    return expect(present == expected, f"cells {present}")


def all_gone(pids: list[int]) -> bool | str:
    alive = [pid for pid in pids if pid_alive(pid)]
    return True if not alive else f"still alive: {alive}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("lc"), cells=2, zones=2, bbs_args=FAST_BBS,
                      rep_args=FAST_REP).start(timeout=60.0) as lc:
        yield lc


def test_start_runs_every_component_and_writes_cluster_json(cluster: LocalCluster):
    assert sorted(cluster.reps) == ["cell-0", "cell-1"]
    assert [cluster.reps[c].zone for c in ("cell-0", "cell-1")] == ["z0", "z1"]
    assert cell_ids(cluster) == ["cell-0", "cell-1"]
    for url in (cluster.bbs_url, cluster.auctioneer_url, *(r.url for r in cluster.reps.values())):
        assert url.startswith("https://127.0.0.1:"), url
        assert httpx.get(f"{url}/ping", timeout=2.0, verify=cluster.verify).status_code == 200, url
    info = read_cluster_file(cluster.data_dir)
    assert info is not None
    assert info["bbs_url"] == cluster.bbs_url and info["auctioneer_url"] == cluster.auctioneer_url
    assert "insecure" not in info and info["tls"] == {
        "ca": str(cluster.certs_dir / "ca.pem"), "cert": str(cluster.certs_dir / "admin.pem"),
        "key": str(cluster.certs_dir / "admin-key.pem")}
    assert {c: r["url"] for c, r in info["reps"].items()} == {c: r.url for c, r in cluster.reps.items()}
    for name in ("bbs", "auctioneer", "cell-0", "cell-1"):
        assert cluster.log_path(name).stat().st_size > 0, f"expected a log for {name}"


def test_a_second_cluster_in_the_same_data_dir_is_refused(cluster: LocalCluster):
    with pytest.raises(ClusterError, match="already running"):
        LocalCluster(cluster.data_dir, cells=1).start()


def test_killed_rep_restarts_on_its_port_and_reappears(cluster: LocalCluster):
    old = cluster.reps["cell-1"]
    old_pid = old.proc.pid
    cluster.kill("cell-1")
    assert not pid_alive(old_pid) and not cluster.is_running("cell-1")
    wait_for(lambda: cells_are(cluster, ["cell-0"]), 15.0, "cell-1's presence to expire", retry_on=UNANSWERED)
    cluster.restart("cell-1", timeout=30.0)
    assert cluster.reps["cell-1"].url == old.url
    assert cluster.reps["cell-1"].proc.pid != old_pid
    assert cell_ids(cluster) == ["cell-0", "cell-1"]
    info = json.loads((cluster.data_dir / CLUSTER_FILE).read_text())
    assert info["reps"]["cell-1"]["pid"] == cluster.reps["cell-1"].proc.pid


def test_killed_bbs_restarts_with_its_port_and_data(cluster: LocalCluster):
    name = f"keep-{time.monotonic_ns()}"
    body = {"process_guid": name, "instances": 0, "command": ["x"]}
    with cluster.http_client(base_url=cluster.bbs_url, timeout=5.0) as http:
        assert http.post("/v1/desired_lrps", json=body).status_code == 201
        url = cluster.bbs_url
        cluster.kill("bbs")
        with pytest.raises(httpx.ConnectError):
            http.get("/ping", timeout=2.0)
        cluster.restart("bbs", timeout=30.0)
        assert cluster.bbs_url == url
        assert http.get(f"/v1/desired_lrps/{name}").status_code == 200
    wait_for(lambda: cells_are(cluster, ["cell-0", "cell-1"]), 15.0,
             "both cells to heartbeat into the restarted BBS", retry_on=UNANSWERED)


def test_restart_of_a_running_component_replaces_it(cluster: LocalCluster):
    old_pid = cluster.pids()["auctioneer"]
    cluster.restart("auctioneer", timeout=30.0)
    assert cluster.pids()["auctioneer"] != old_pid and not pid_alive(old_pid)
    assert httpx.get(f"{cluster.auctioneer_url}/ping", timeout=2.0, verify=cluster.verify).status_code == 200


def test_unknown_component_names_the_known_ones(cluster: LocalCluster):
    with pytest.raises(KeyError, match="cell-0"):
        cluster.kill("cell-9")


def test_leaving_the_with_block_on_an_exception_stops_everything_gracefully_and_idempotently(tmp_path: Path):
    pids: list[int] = []
    with pytest.raises(RuntimeError, match="boom"):
        with LocalCluster(tmp_path, cells=1, zones=1, bbs_args=FAST_BBS, rep_args=FAST_REP) as lc:
            pids.extend(lc.pids().values())
            raise RuntimeError("boom")
    assert len(pids) == 3 and all_gone(pids) is True
    # Each stopped on its own signal, well within the grace: nothing needed SIGKILL.
    assert lc.returncodes() == {"bbs": 0, "auctioneer": 0, "cell-0": 0}, lc.returncodes()
    assert not (tmp_path / CLUSTER_FILE).exists()
    lc.stop()  # idempotent


def test_a_component_that_cannot_start_fails_start_with_its_log_and_leaves_nothing(tmp_path: Path):
    lc = LocalCluster(tmp_path, cells=1, zones=1, rep_args=("--no-such-flag",))
    with pytest.raises(ClusterError, match="cell-0 did not start") as caught:
        lc.start(timeout=60.0)
    assert "no-such-flag" in str(caught.value), "expected the rep's log tail in the error"
    assert lc.pids() == {}


def test_sim_cells_hosted_several_per_process(tmp_path: Path):
    with LocalCluster(tmp_path, cells=5, zones=2, executor="sim", sim_cells_per_process=2, bbs_args=FAST_BBS,
                      rep_args=FAST_REP).start(timeout=60.0) as lc:
        assert sorted(lc.reps) == ["sim0-0", "sim0-1", "sim1-0", "sim1-1", "sim2-0"]
        assert cell_ids(lc) == sorted(lc.reps)
        assert lc.reps["sim0-0"].proc is lc.reps["sim0-1"].proc
        assert lc.reps["sim0-1"].url == lc.reps["sim0-0"].url, "cells of one process share its URL"
        assert {r.zone for r in lc.reps.values()} == {"z0", "z1"}
        assert len(lc.pids()) == 2 + 3
        # `vendue cells` (as the admin, over TLS) shows every cell's state, asked of its rep process.
        table = CliRunner().invoke(app, ["cells", "--data-dir", str(lc.data_dir)], env={"COLUMNS": "250"})
        assert table.exit_code == 0, table.output
        rows = {
            cell_id: [line for line in table.stdout.splitlines() if f" {cell_id} " in line]
            for cell_id in lc.reps
        }
        assert all(
            len(row) == 1 and "?" not in row[0] and "unreachable" not in row[0] for row in rows.values()
        ), table.stdout
        # A process hosting many cells is killed and restarted as a unit, by any of its cell ids.
        lc.kill("sim1-0", signal.SIGKILL)
        assert not lc.is_running("sim1-1")
        lc.restart("sim1-1", timeout=30.0)
        assert lc.reps["sim1-0"].proc.poll() is None
        assert cell_ids(lc) == sorted(lc.reps)
        # A host of several cells speaks for all of them by their prefix; one cell alone, by its id.
        for name, cells, prefixes in (
            ("rep-0", frozenset(), ("sim0-",)),
            ("rep-2", frozenset({"sim2-0"}), ()),
        ):
            identity = identity_of_file(lc.certs_dir / f"{name}.pem")
            assert identity is not None and (identity.role, identity.name) == ("rep", name)
            assert (identity.cells, identity.cell_prefixes) == (cells, prefixes)


def test_sim_rep_processes_of_the_callers_own_replace_the_planned_cells(tmp_path: Path):
    sized = ("--memory-mb", "512", "--disk-mb", "1024", "--containers", "5", "--tag", "gpu")
    sim_reps = [
        SimRepProcess("rep-a", ("--cells", "2", "--cell-id", "a", "--zone", "east", *sized),
                      (("a-0", "east"), ("a-1", "east")), cell_prefix="a-"),
        SimRepProcess("rep-b", ("--cell-id", "b", "--zone", "west", "--memory-mb", "256"), (("b", "west"),)),
    ]
    launcher = LocalCluster(tmp_path, sim_reps=sim_reps, bbs_args=FAST_BBS, rep_args=FAST_REP)
    with launcher.start(timeout=60.0) as lc:
        assert lc.executor == "sim" and (lc.cells, lc.zones) == (3, 2)
        assert {cell_id: rep.zone for cell_id, rep in lc.reps.items()} == {"a-0": "east", "a-1": "east",
                                                                           "b": "west"}
        assert lc.reps["a-0"].proc is lc.reps["a-1"].proc and len(lc.pids()) == 2 + 2
        cells = httpx.get(f"{lc.bbs_url}/v1/cells", timeout=2.0, verify=lc.verify).json()["items"]
        seen = {c["cell_id"]: (c["zone"], c["total"]["memory_mb"], c["placement_tags"]) for c in cells}
        assert seen == {"a-0": ("east", 512, ["gpu"]), "a-1": ("east", 512, ["gpu"]), "b": ("west", 256, [])}
        identity = identity_of_file(lc.certs_dir / "rep-a.pem")
        assert identity is not None and identity.cell_prefixes == ("a-",)


def test_logs_and_cluster_json_are_the_launchers_alone(cluster: LocalCluster):
    # What apps and components print, and every pid and URL: 0600 files in a 0700 logs dir.
    assert stat.S_IMODE(cluster.logs_dir.stat().st_mode) == 0o700
    logs = sorted(cluster.logs_dir.glob("*.log"))
    assert {path.stem for path in logs} >= {"bbs", "auctioneer", "cell-0", "cell-1"}
    for path in [*logs, cluster.data_dir / CLUSTER_FILE]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_private_files_are_tightened_when_they_exist_already(tmp_path: Path):
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o755)
    (logs / "nats-server.log").write_text("from an older launcher\n")
    (logs / "nats-server.log").chmod(0o644)
    (tmp_path / CLUSTER_FILE).write_text("{}")
    (tmp_path / CLUSTER_FILE).chmod(0o644)
    private_log(logs / "nats-server.log")  # what the launcher does before nats-server or postgres opens it
    private_log(logs / "postgres.log")
    write_cluster_file(tmp_path, {"pid": 1})
    assert stat.S_IMODE(logs.stat().st_mode) == 0o700
    for path in (logs / "nats-server.log", logs / "postgres.log", tmp_path / CLUSTER_FILE):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert (logs / "nats-server.log").read_text() == "from an older launcher\n"  # appended to, not emptied


def test_every_component_has_a_certificate_of_its_own_and_callers_need_one(
    cluster: LocalCluster, tmp_path: Path
):
    certs = cluster.certs_dir
    assert stat.S_IMODE(certs.stat().st_mode) == 0o700
    assert stat.S_IMODE((certs / "ca-key.pem").stat().st_mode) == 0o600
    expected = {"bbs": ("bbs", frozenset()), "auctioneer": ("auctioneer", frozenset()),
                "cell-0": ("rep", frozenset({"cell-0"})), "cell-1": ("rep", frozenset({"cell-1"})),
                "admin": ("admin", frozenset())}
    for name, (role, cells) in expected.items():
        identity = identity_of_file(certs / f"{name}.pem")
        assert identity is not None and (identity.role, identity.name, identity.cells) == (
            role,
            name,
            cells,
        ), name
        assert stat.S_IMODE((certs / f"{name}-key.pem").stat().st_mode) == 0o600, name

    bbs = cluster.bbs_url
    ca_only = client_context(ca=certs / "ca.pem")
    assert httpx.get(f"{bbs}/ping", timeout=5.0, verify=ca_only).status_code == 200, "/ping is public"
    assert httpx.get(f"{bbs}/v1/desired_lrps", timeout=5.0, verify=ca_only).status_code == 401
    reader = client_context(cluster.issue_certificate("reader", "viewer"))
    assert httpx.get(f"{bbs}/v1/desired_lrps", timeout=5.0, verify=reader).status_code == 200
    refused = httpx.post(
        f"{bbs}/v1/desired_lrps",
        json={"process_guid": "nope", "instances": 0, "command": ["x"]},
        timeout=5.0,
        verify=reader,
    )
    assert refused.status_code == 403 and "reader" in refused.json()["detail"], refused.text
    # A certificate the cluster's CA did not sign does not get through the handshake.
    init_ca(tmp_path)
    issue(tmp_path, role="admin", name="stranger")
    stranger = client_context(
        TLSFiles(tmp_path / "stranger.pem", tmp_path / "stranger-key.pem", certs / "ca.pem")
    )
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{bbs}/v1/desired_lrps", timeout=5.0, verify=stranger)

    # The CLI acts as the admin through cluster.json; with another certificate, as its holder.
    listed = CliRunner().invoke(app, ["cells", "--json", "--data-dir", str(cluster.data_dir)])
    assert listed.exit_code == 0, listed.output
    assert [(c["cell_id"], c["insecure"]) for c in json.loads(listed.stdout)] == [
        ("cell-0", False),
        ("cell-1", False),
    ]
    viewer = ["--tls-cert", str(certs / "viewer.pem"), "--tls-key", str(certs / "viewer-key.pem"),
              "--tls-ca", str(certs / "ca.pem")]
    pushed = CliRunner().invoke(
        app, ["push", "nope", "--data-dir", str(cluster.data_dir), *viewer, "--", "x"]
    )
    assert pushed.exit_code == 1, pushed.output
    [line] = pushed.stderr.splitlines()
    assert line.startswith("error: 403: role reader (viewer) may not POST /v1/desired_lrps: only admin"), line


def test_the_bbs_seals_command_and_env_with_a_key_ring_named_in_its_environment(cluster: LocalCluster):
    keys = cluster.data_dir / "bbs-keys.json"
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    key = next(iter(json.loads(keys.read_text())["keys"].values()))
    for name, pid in cluster.pids().items():
        argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert b"bbs-keys" not in argv and key.encode() not in argv, name
        given = [item for item in environ if item.startswith(b"VENDUE_ENCRYPTION_KEYS")]
        assert given == ([f"VENDUE_ENCRYPTION_KEYS_FILE={keys}".encode()] if name == "bbs" else []), name
    body = {"process_guid": "sealed", "instances": 0, "command": ["./run"], "env": {"PASSWORD": "pw-at-rest"}}
    created = httpx.post(f"{cluster.bbs_url}/v1/desired_lrps", json=body, timeout=5.0, verify=cluster.verify)
    assert created.status_code == 201, created.text
    assert stored_label(cluster.data_dir, "sealed") == "k1"
    assert b"pw-at-rest" not in b"".join(f.read_bytes() for f in (cluster.data_dir / "bbs").glob("bbs.db*"))


def stored_label(data_dir: Path, process_guid: str) -> str | None:
    """The key label of a desired LRP's row in the local cluster's SQLite database, read directly."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(data_dir / "bbs" / "bbs.db")) as db:
        [(label,)] = db.execute("SELECT key_label FROM desired_lrps WHERE process_guid = ?", (process_guid,))
    return label


def test_an_insecure_cluster_serves_plain_http_and_says_so(tmp_path: Path):
    with LocalCluster(tmp_path, cells=1, zones=1, bbs_args=FAST_BBS, rep_args=FAST_REP,
                      insecure=True).start(timeout=60.0) as lc:
        assert lc.client_tls() is None and not lc.certs_dir.exists()
        for url in (lc.bbs_url, lc.auctioneer_url, lc.reps["cell-0"].url):
            assert url.startswith("http://127.0.0.1:"), url
            ping = httpx.get(f"{url}/ping", timeout=5.0).json()
            assert ping.get("insecure") is True, f"expected {url}/ping to say insecure: {ping}"
        info = read_cluster_file(lc.data_dir)
        assert info is not None and info["insecure"] is True and "tls" not in info, info
        # Authorization is off: anyone may write.
        body = {"process_guid": "anyone", "instances": 0, "command": ["x"]}
        assert httpx.post(f"{lc.bbs_url}/v1/desired_lrps", json=body, timeout=5.0).status_code == 201
        assert "--insecure" in lc.log_path("bbs").read_text().splitlines()[0]
        # The CLI finds it through cluster.json and shows it.
        listed = CliRunner().invoke(app, ["cells", "--json", "--data-dir", str(lc.data_dir)])
        assert listed.exit_code == 0, listed.output
        assert [c["insecure"] for c in json.loads(listed.stdout)] == [True], listed.stdout
        table = CliRunner().invoke(app, ["cells", "--data-dir", str(lc.data_dir)], env={"COLUMNS": "250"})
        assert table.exit_code == 0 and "INSECURE" in table.stdout, table.output
        row = next(line for line in table.stdout.splitlines() if "cell-0" in line)
        assert "yes" in row, table.stdout
        # Encryption at rest does not depend on TLS.
        assert stored_label(lc.data_dir, "anyone") == "k1"
    keys = (tmp_path / "bbs-keys.json").read_bytes()
    with LocalCluster(tmp_path, cells=1, zones=1, bbs_args=FAST_BBS, rep_args=FAST_REP,
                      insecure=True).start(timeout=60.0) as again:
        # The key ring is kept across runs: what the first run sealed still opens.
        assert (tmp_path / "bbs-keys.json").read_bytes() == keys
        kept = httpx.get(f"{again.bbs_url}/v1/desired_lrps/anyone", timeout=5.0)
        assert kept.status_code == 200 and kept.json()["command"] == ["x"], kept.text


def test_the_database_url_reaches_the_bbs_by_its_environment_never_its_command_line_or_log(tmp_path: Path):
    database = tmp_path / "elsewhere" / "bbs.db"
    database.parent.mkdir()
    url = f"sqlite+aiosqlite:///{database}"
    with LocalCluster(tmp_path / "cluster", cells=1, zones=1, bbs_args=FAST_BBS, rep_args=FAST_REP,
                      database_url=url).start(timeout=60.0) as lc:
        assert database.is_file(), "expected the BBS on the database it was given"
        cmdline = Path(f"/proc/{lc.pids()['bbs']}/cmdline").read_bytes().decode()
        assert str(database) not in cmdline, cmdline
        starting = [
            line for line in lc.log_path("bbs").read_text().splitlines() if "launcher: starting" in line
        ]
        assert starting and all(str(database) not in line for line in starting), starting


CONTAINERS_PROBLEM = containers_problem()


@pytest.mark.skipif(CONTAINERS_PROBLEM is not None,
                    reason=f"this machine cannot run containers: {CONTAINERS_PROBLEM}")
def test_a_container_rep_killed_is_swept_at_stop_whatever_its_subnet(tmp_path: Path):
    subnet = free_subnets(1)[0]  # not the rep's default: the sweep does not know the rep's flags
    with LocalCluster(tmp_path / "lc", cells=1, zones=1, executor="container", container_subnet=subnet) as lc:
        assert lc.container_subnets == (subnet,), lc.container_subnets
        rep_dir = lc.rep_data_dirs()[0]
        made = container_leftovers(rep_dir)  # the cell's masquerade rule, set when its executor opens
        assert any(f"-s {subnet}" in item and "masquerade" in item for item in made), made
        lc.kill("cell-0")
    assert container_leftovers(rep_dir) == [], f"the killed rep's leftovers: {container_leftovers(rep_dir)}"
