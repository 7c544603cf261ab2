"""Secrets kept secret (docs/security.md "Secrets") in a real HA cluster on NATS: two BBS replicas
on
the embedded PostgreSQL, two auctioneers, two reps running real processes, an embedded nats-server, TLS on.

An app and a task are given an env value (a database password of theirs). It reaches where it is needed (the
app's and the task's own environment) and nowhere else: not a reader's answers (names only, `***`), not the
event stream (SSE, as admin and as reader, and NATS), not any process's command line, not any log line. The
database's own password and URL are on no command line either, and only the BBS replicas hold them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import nats
import pytest

from common.procutil import app_python
from common.tls import TLSFiles, client_context
from common.transport.subjects import EVENTS_ALL

from .conftest import (
    E2ECluster,
    EventLog,
    _start_cluster,
    _stop_clusters,
    app_processes,
    expect,
    proc_environ,
    wait_all_running,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

SECRET = f"s3cr3t-{uuid.uuid4().hex}"  # the app's env value: nobody but the admin and the app may see it
ENV = {"DB_PASSWORD": SECRET}
MASKED = {"DB_PASSWORD": "***"}
# The task proves it got the value without naming it on its command line.
TASK_COMMAND = [
    app_python(),
    "-c",
    "import os, sys; sys.exit(0 if os.environ.get('DB_PASSWORD', '').startswith('s3cr3t-') else 3)",
]
CONTROL_PLANE = {"bbs", "bbs-2", "auctioneer", "auctioneer-2", "cell-0", "cell-1"}


class NatsEvents:
    """Every message on vendue.events.> as the cluster's admin hears it, in a thread of its own."""

    def __init__(self, url: str, files: TLSFiles) -> None:
        self.url = url
        self.context = client_context(files)
        self.messages: list[tuple[str, bytes]] = []
        self.error: BaseException | None = None
        self._subscribed = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: asyncio.Event | None = None

    def start(self) -> NatsEvents:
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._run()), daemon=True, name="nats-events"
        )
        self._thread.start()
        if not self._subscribed.wait(15.0) or self.error is not None:
            raise AssertionError(
                f"expected to subscribe to {EVENTS_ALL} on {self.url} within 15s: {self.error!r}"
            )
        return self

    async def _run(self) -> None:
        self._loop, self._done = asyncio.get_running_loop(), asyncio.Event()
        try:
            nc = await nats.connect(self.url, tls=self.context, tls_handshake_first=True, name="secrets-test",
                                    allow_reconnect=False, connect_timeout=5)

            async def record(msg: nats.aio.msg.Msg) -> None:
                self.messages.append((msg.subject, msg.data))

            await nc.subscribe(EVENTS_ALL, cb=record)
            await nc.flush()
        except Exception as exc:  # noqa: BLE001 - reported by start()
            self.error = exc
            self._subscribed.set()
            return
        self._subscribed.set()
        await self._done.wait()
        await nc.close()

    def snapshot(self) -> list[tuple[str, bytes]]:
        return list(self.messages)

    def stop(self) -> None:
        if self._loop is not None and self._done is not None:
            with contextlib.suppress(RuntimeError):  # its loop ended already
                self._loop.call_soon_threadsafe(self._done.set)
        self._thread.join(10.0)


@dataclass
class Run:
    c: E2ECluster
    app: str
    task: str
    reader: httpx.Client
    sse_admin: EventLog
    sse_reader: EventLog
    nats_events: NatsEvents

    @property
    def database_password(self) -> str:
        return (Path(self.c.lc.data_dir) / "postgres" / "password").read_text().strip()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """The cluster, everyone listening, and an app (2 instances) and a task given ENV, both done with it."""
    started: list[E2ECluster] = []
    listeners: list[EventLog | NatsEvents] = []
    clients: list[httpx.Client] = []
    try:
        c = _start_cluster(started, tmp_path_factory.mktemp("secrets"), "nats", cells=2, zones=1, ha=True)
        lc = c.lc
        reader_files = lc.issue_certificate("reader", "viewer")
        reader = httpx.Client(base_url=lc.bbs_url, verify=client_context(reader_files), timeout=10.0)
        clients.append(reader)
        sse_admin = c.follow_events()
        sse_reader = EventLog(lc.bbs_url, client_context(reader_files)).start()
        nats_events = NatsEvents(lc.nats_url, TLSFiles.in_dir(lc.certs_dir, "admin")).start()
        listeners += [sse_reader, nats_events]

        assert c.bbs is not None
        app, task = c.guid("secret-app"), c.guid("secret-task")
        c.bbs.desire(app, 2, env=ENV)
        wait_all_running(c.bbs, app, 2, timeout=60)
        for index, pids in app_processes(app).items():  # the value reached the app itself
            assert [proc_environ(pid).get("DB_PASSWORD") for pid in pids] == [SECRET], (
                f"index {index}: {pids}"
            )
        c.bbs.create_task(task, TASK_COMMAND, env=ENV)
        done = wait_for(
            lambda: (
                expect(c.bbs.task(task)["state"] == "COMPLETED", c.bbs.task(task)["state"])
                and c.bbs.task(task)
            ),
            60,
            f"task {task} COMPLETED",
        )
        assert not done["failed"], f"expected the task to find DB_PASSWORD in its environment: {done}"
        yield Run(c, app, task, reader, sse_admin, sse_reader, nats_events)
    finally:
        for listener in listeners:
            listener.stop()
        for client in clients:
            client.close()
        _stop_clusters(started)


@pytest.mark.parametrize(
    "path", ["/v1/desired_lrps", "/v1/desired_lrps/{app}", "/v1/tasks", "/v1/tasks/{task}"]
)
def test_a_reader_sees_env_names_with_masked_values_and_the_admin_the_values(run: Run, path: str) -> None:
    url = path.format(app=run.app, task=run.task)
    as_reader = run.reader.get(url)
    assert as_reader.status_code == 200, as_reader.text
    assert SECRET not in as_reader.text, f"a reader's GET {url} holds the env value: {as_reader.text[:500]}"
    body = as_reader.json()
    ours = [
        row for row in body.get("items", [body]) if run.app in json.dumps(row) or run.task in json.dumps(row)
    ]
    assert [row["env"] for row in ours] == [MASKED], ours
    assert run.c.bbs is not None
    as_admin = run.c.bbs.http.get(url)
    assert as_admin.status_code == 200 and SECRET in as_admin.text, as_admin.text[:500]


def process_tree(roots: list[int]) -> dict[int, str]:
    """pid -> command line of each root and every process under it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    found: dict[int, str] = {}
    todo = list(roots)
    while todo:
        pid = todo.pop()
        with contextlib.suppress(OSError):
            found[pid] = (
                Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            )
            todo.extend(children.get(pid, []))
    return found


def test_no_command_line_holds_a_secret(run: Run) -> None:
    lc = run.c.lc
    components = lc.pids()
    assert set(components) == CONTROL_PLANE, components
    assert lc.nats_server is not None and lc.nats_server.proc is not None
    assert lc.postgres is not None and lc.postgres.server.proc is not None
    roots = [*components.values(), lc.nats_server.proc.pid, lc.postgres.server.proc.pid]
    command_lines = process_tree(roots)
    instances = [pid for pids in app_processes(run.app).values() for pid in pids]
    assert instances and set(instances) <= set(command_lines), "expected the app's processes among them"
    assert len(command_lines) > len(roots) + len(instances), "expected postgres's workers among them too"
    secrets = {"the env value": SECRET, "the database password": run.database_password}
    if lc._nats_token:
        secrets["the NATS token"] = lc._nats_token
    for what, secret in secrets.items():
        holding = {pid: line[:200] for pid, line in command_lines.items() if secret in line}
        assert not holding, f"{what} is on the command line of {holding}"
    # The database URL reaches the BBS replicas alone, by environment.
    for name, pid in components.items():
        holds = run.database_password in proc_environ(pid).get("VENDUE_DATABASE_URL", "")
        assert holds == name.startswith("bbs"), f"{name}: VENDUE_DATABASE_URL {'set' if holds else 'unset'}"


def test_no_event_on_sse_or_nats_carries_an_env_value(run: Run) -> None:
    bbs = run.c.bbs
    assert bbs is not None
    bbs.scale(run.app, 1)
    assert bbs.http.delete(f"/v1/tasks/{run.task}").status_code in (204, 404)  # 404: resolved already
    assert bbs.http.delete(f"/v1/desired_lrps/{run.app}").status_code == 204

    def removed(log: EventLog) -> bool:
        kinds = [e.type for e in log.snapshot() if e.data.get("process_guid") == run.app]
        return expect("desired_lrp_removed" in kinds, kinds)

    for log in (run.sse_admin, run.sse_reader):
        wait_for(lambda log=log: removed(log), 30, f"desired_lrp_removed of {run.app} on the SSE stream")
    wait_for(lambda: any(subject.endswith("desired_lrp_removed") and run.app.encode() in data
                         for subject, data in run.nats_events.snapshot()), 30, "desired_lrp_removed on NATS")

    for who, log in (("admin", run.sse_admin), ("reader", run.sse_reader)):
        events = log.snapshot()
        assert not [e for e in events if SECRET in json.dumps(e.data)], f"an env value on {who}'s SSE stream"
        created = [
            e.data for e in events if e.type == "desired_lrp_created" and e.data["process_guid"] == run.app
        ]
        assert [d["env"] for d in created] == [MASKED], created
        assert any(e.type == "task_created" and e.data["task_guid"] == run.task for e in events), who
    heard = run.nats_events.snapshot()
    assert not [subject for subject, data in heard if SECRET.encode() in data], "an env value on NATS"
    assert any(run.task.encode() in data for _, data in heard), "expected the task's events on NATS too"


def test_no_log_line_holds_a_secret(run: Run) -> None:
    """Last: the cluster is stopped first, so every log is complete (shutdown included)."""
    password = run.database_password
    run.c.lc.stop()
    logs = sorted((Path(run.c.lc.data_dir) / "logs").glob("*.log"))
    names = {log.stem for log in logs}
    assert {*CONTROL_PLANE, "nats-server", "postgres"} <= names, names
    for log in logs:
        for number, line in enumerate(log.read_text(errors="replace").splitlines(), 1):
            assert SECRET not in line, f"{log.name}:{number} holds the env value: {line[:300]}"
            assert password not in line, f"{log.name}:{number} holds the database password: {line[:300]}"
