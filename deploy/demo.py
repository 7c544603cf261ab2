"""`vendue demo`: the product's main job, end to end, on this machine, in under a minute.

1. start a local cluster (BBS, auctioneer, 4 reps in 2 zones, real child processes);
2. push a web app (3 instances of a tiny Python HTTP server on $PORT) and show where each landed and
   that each answers HTTP with its own index;
3. run a task and print its result;
4. kill -9 one instance's process and show the BBS restarted it (crash count 1);
5. stop one cell (SIGTERM: the rep evacuates) and show its instances rescheduled onto other cells;
6. shut everything down.

Every wait polls for a condition with a deadline; a failure says what was expected and what was seen,
keeps the data dir (logs) for a look, stops the cluster and returns 1.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx
from rich.console import Console
from rich.rule import Rule
from rich.table import Table

from common.models import (
    ActualLRP,
    ActualState,
    DesiredLRPCreate,
    HealthCheck,
    Presence,
    Task,
    TaskCreate,
    TaskState,
)
from common.procutil import app_python

from .bbs_client import BBSClient, BBSError, ClientAuth
from .cluster import ClusterError, LocalCluster
from .cluster_view import cluster_table, warn_insecure

APP_NAME = "web"
APP_INSTANCES = 3
# The app: answers GET / with "<index> <cell id> <pid>" so the demo can check who answered.
APP_SOURCE = r"""
import http.server, os
BODY = f"{os.environ['INSTANCE_INDEX']} {os.environ['CELL_ID']} {os.getpid()}".encode()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""
TASK_SOURCE = (
    "import os, platform; "
    "print(f'hello from task {os.environ[\"TASK_GUID\"]} on {os.environ[\"CELL_ID\"]}: "
    "python {platform.python_version()}, 6 x 7 = {6 * 7}')"
)
STEP_TIMEOUT_S = 30.0

T = TypeVar("T")


class DemoFailed(Exception):
    pass


class Unmet(Exception):
    """A condition is not there yet; the message says what it saw."""


def wait_until(condition: Callable[[], T], expected: str, timeout: float = STEP_TIMEOUT_S) -> T:
    """Poll `condition` until it returns a value (it raises Unmet with what it saw until then)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return condition()
        except (Unmet, BBSError, httpx.HTTPError) as exc:
            seen = str(exc) or type(exc).__name__
        if time.monotonic() >= deadline:
            raise DemoFailed(f"expected {expected} within {timeout:g}s; saw {seen}")
        time.sleep(0.1)


def ask(address: str) -> tuple[int, str, int]:
    """GET the app at `address`: (index, cell id, pid) it answers with."""
    response = httpx.get(f"http://{address}/", timeout=2.0)
    response.raise_for_status()
    index, cell_id, pid = response.text.split()
    return int(index), cell_id, int(pid)


def brief(actuals: list[ActualLRP]) -> str:
    return ", ".join(f"{a.index}:{a.state}/{a.presence}@{a.cell_id or '-'}"
                     + (f" ({a.placement_error})" if a.placement_error else "")
                     for a in sorted(actuals, key=lambda a: (a.index, a.presence))) or "no instances"


class Demo:
    def __init__(self, console: Console, cluster: LocalCluster, bbs: BBSClient) -> None:
        self.out = console
        self.cluster = cluster
        self.bbs = bbs

    def step(self, title: str) -> None:
        self.out.print(Rule(f"[bold]{title}", align="left"))

    def all_running(
        self, exclude_cell: str | None = None
    ) -> dict[int, tuple[ActualLRP, tuple[int, str, int]]]:
        """Every index RUNNING once (ORDINARY), not on `exclude_cell`, and answering HTTP as itself."""
        actuals = self.bbs.actual_lrps(process_guid=APP_NAME)
        running = {
            a.index: a for a in actuals if a.state == ActualState.RUNNING and a.presence == Presence.ORDINARY
        }
        if sorted(running) != list(range(APP_INSTANCES)) or len(actuals) != APP_INSTANCES:
            raise Unmet(brief(actuals))
        answers = {}
        for index, actual in running.items():
            if actual.cell_id == exclude_cell:
                raise Unmet(f"index {index} still on {exclude_cell}: {brief(actuals)}")
            try:
                answers[index] = (actual, ask(actual.address))
            except (httpx.HTTPError, ValueError) as exc:
                raise Unmet(f"index {index} at {actual.address} does not answer ({exc!r})") from None
            if answers[index][1][:2] != (index, actual.cell_id):
                raise Unmet(f"{actual.address} answered {answers[index][1]}, expected index {index} on "
                            f"{actual.cell_id}")
        return answers

    def placement_table(self, title: str, answers: dict[int, tuple[ActualLRP, tuple[int, str, int]]],
                        note: Callable[[ActualLRP], str] | None = None) -> Table:
        """One row per instance; a NOTE column only when there is a `note` to ask."""
        table = Table(title=title)
        columns = ("INDEX", "ZONE", "CELL", "ADDRESS", "ANSWERS HTTP", "CRASHES")
        for column in (*columns, "NOTE") if note else columns:
            table.add_column(column, no_wrap=True)
        for index, (actual, (_, cell_id, pid)) in sorted(answers.items()):
            table.add_row(str(index), actual.zone, actual.cell_id, actual.address,
                          f"[green]✓[/] index {index} on {cell_id} (pid {pid})", str(actual.crash_count),
                          *((note(actual),) if note else ()))
        return table

    # --- the steps --------------------------------------------------------------------------------

    def push(self) -> dict[int, tuple[ActualLRP, tuple[int, str, int]]]:
        self.step(f"2. push {APP_NAME}: {APP_INSTANCES} instances of a tiny Python HTTP server on $PORT")
        self.bbs.desire_lrp(DesiredLRPCreate(
            process_guid=APP_NAME, instances=APP_INSTANCES, memory_mb=128, disk_mb=64,
            command=[app_python(), "-c", APP_SOURCE], ports=[8080], health_check=HealthCheck(type="port"),
        ))
        answers = wait_until(
            self.all_running, f"{APP_INSTANCES} instances of {APP_NAME} running and answering"
        )
        self.out.print(self.placement_table("where the auction placed them", answers))
        zones = Counter(actual.zone for actual, _ in answers.values())
        self.out.print(f"spread over zones: {dict(sorted(zones.items()))} (the auction balances zones first)")
        return answers

    def task(self) -> None:
        self.step("3. run a one-off task")
        guid = f"demo-task-{uuid.uuid4().hex[:6]}"
        self.bbs.desire_task(
            TaskCreate(task_guid=guid, command=[app_python(), "-c", TASK_SOURCE], memory_mb=64, disk_mb=64)
        )

        def completed() -> Task:
            task = self.bbs.task(guid)
            if task.state not in (TaskState.COMPLETED, TaskState.RESOLVING):
                raise Unmet(f"task {guid} {task.state}")
            return task

        task = wait_until(completed, f"task {guid} to complete")
        if task.failed:
            raise DemoFailed(f"expected task {guid} to succeed; it failed: {task.failure_reason} "
                             f"(exit status {task.exit_status}, output {task.result!r})")
        self.out.print(f"task [bold]{guid}[/] ran on {task.cell_id}: exit status {task.exit_status}, result:")
        self.out.print(f"  [cyan]{task.result.strip()}[/]", highlight=False)
        self.bbs.resolve_task(guid)

    def crash(self, answers: dict[int, tuple[ActualLRP, tuple[int, str, int]]]) -> None:
        self.step("4. kill -9 one instance's process: the BBS restarts it")
        victim, (_, _, answered_pid) = answers[0]
        pid = self.pid_on_rep(victim)
        if pid != answered_pid:
            raise DemoFailed(f"expected the rep of {victim.cell_id} to report pid {answered_pid} for index 0 "
                             f"(it answered HTTP as that pid); the rep says {pid}")
        os.kill(pid, signal.SIGKILL)
        self.out.print(
            f"killed pid {pid} (index 0 of {APP_NAME} on {victim.cell_id}, pid from its rep's /state)"
        )

        def restarted() -> dict[int, tuple[ActualLRP, tuple[int, str, int]]]:
            now = self.all_running()
            actual, (_, _, new_pid) = now[0]
            if actual.crash_count < 1 or new_pid == pid:
                raise Unmet(f"index 0 crash count {actual.crash_count}, pid {new_pid}")
            return now

        now = wait_until(restarted, "index 0 running again with crash count 1")
        actual, (_, _, new_pid) = now[0]
        self.out.print(f"index 0 is back on {actual.cell_id} at {actual.address} as pid {new_pid} "
                       f"(crash count [bold]{actual.crash_count}[/]; crashes 1–2 restart at once)")

    def pid_on_rep(self, actual: ActualLRP) -> int | None:
        """The instance's OS process, as its rep reports it in GET {rep_url}/state?lrps=full&cells=<cell>."""
        cell_id = actual.cell_id
        detail = self.bbs.cell_details(self.cluster.reps[cell_id].url, [cell_id], timeout=5.0).get(cell_id)
        if detail is None:
            raise DemoFailed(f"expected the rep of {cell_id} to answer GET /state")
        return next((lrp.pid for lrp in detail.lrps if lrp.instance_guid == actual.instance_guid), None)

    def evacuate(self) -> None:
        self.step("5. stop one cell (SIGTERM to its rep: it evacuates)")
        before = self.all_running()
        per_cell = Counter(actual.cell_id for actual, _ in before.values())
        cell_id = per_cell.most_common(1)[0][0]
        moved = sorted(index for index, (actual, _) in before.items() if actual.cell_id == cell_id)
        self.cluster.kill(cell_id, signal.SIGTERM)
        self.out.print(f"stopping {cell_id} (zone {self.cluster.reps[cell_id].zone}), which runs "
                       f"index(es) {moved}")
        after = wait_until(lambda: self.all_running(exclude_cell=cell_id),
                           f"indices {moved} rescheduled off {cell_id}")

        def rep_exited() -> bool:
            if self.cluster.is_running(cell_id):
                raise Unmet(f"the rep of {cell_id} still running")
            return True

        wait_until(rep_exited, f"the rep of {cell_id} to exit after evacuating")
        self.out.print(self.placement_table(
            f"after {cell_id} left", after,
            lambda a: f"[yellow]moved from {cell_id}[/]" if a.index in moved else ""))


def run_demo(console: Console, keep: bool = False, transport: str = "http", nats_url: str | None = None,
             insecure: bool = False) -> int:
    started = time.monotonic()
    data_dir = Path(tempfile.mkdtemp(prefix="vendue-demo-"))
    cluster = LocalCluster(
        data_dir,
        cells=4,
        zones=2,
        executor="process",
        cell_memory_mb=1024,
        cell_disk_mb=2048,
        transport=transport,
        nats_url=nats_url,
        insecure=insecure,
    )
    ok = False
    try:
        over = " over NATS" if transport == "nats" else ""
        console.print(
            Rule(f"[bold]1. start a local cluster{over}: BBS, auctioneer, 4 cells in 2 zones", align="left")
        )
        if insecure:
            warn_insecure(console)
        with console.status("starting…"):
            cluster.start(timeout=60.0)
        console.print(cluster_table(cluster))
        console.print(cluster.isolation_summary(), highlight=False)
        if not insecure:
            console.print(
                f"every component serves HTTPS with a certificate from the cluster CA in "
                f"{cluster.certs_dir}; "
                "the demo talks to them as the admin (admin.pem)",
                highlight=False,
            )
        with BBSClient(cluster.bbs_url, auth=ClientAuth(tls=cluster.client_tls())) as bbs:
            demo = Demo(console, cluster, bbs)
            answers = demo.push()
            demo.task()
            demo.crash(answers)
            demo.evacuate()
        ok = True
    except (DemoFailed, ClusterError, BBSError) as exc:
        console.print(f"[red bold]demo failed:[/] {exc}", highlight=False)
        console.print(f"logs kept in {cluster.logs_dir}", highlight=False)
    finally:
        console.print(Rule("[bold]6. shut down", align="left"))
        cluster.stop()
        leftover = cluster.pids()
        if leftover:
            console.print(f"[red]still running after stop: {leftover}[/]")
            ok = False
        if ok and not keep:
            with contextlib.suppress(OSError):
                shutil.rmtree(data_dir)
    elapsed = time.monotonic() - started
    if ok:
        console.print(f"[green bold]demo complete[/] in {elapsed:.1f} s: every component stopped"
                      + (f"; logs in {cluster.logs_dir}" if keep else ""))
        return 0
    return 1
