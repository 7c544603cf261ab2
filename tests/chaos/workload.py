"""The campaign's workload: a client of the BBS that desires, scales and deletes apps and runs tasks, one
write at a time, chosen by a seeded random generator, and writes every one in the ledger with its outcome.

    workload = Workload(cluster.bbs_urls, cluster.verify, ledger, random.Random(seed), markers_dir, prefix)
    thread = threading.Thread(target=workload.run, args=(stop,))
    with workload.paused():    # no write in flight inside: while the checker waits for a repair
        ...

Apps are small: a `sleep` (process health check) or, one in three, the e2e tests' HTTP app (port health
check), 1-4 instances of 16-64 MB; one in four keeps its replicas when it loses a cell (`on_cell_loss:
keep-replicas`, the service scheduler's policy; the others are rescheduled, Diego's). A task runs a Python
snippet that first creates a marker file
`<markers_dir>/<TASK_GUID>.<random hex>` (O_EXCL: every run of the command makes one more file), then
sleeps a little and exits 0: the checker counts the files to see whether a task ran at most once.

A write of unknown outcome (ledger.py) quarantines its app; RESOLVE_AFTER_S later, past the BBS's request
timeout, the workload reads the app's state, writes it down as a resolve and may write to the app again.

Each write goes to one BBS replica; when no connection can be made to it (refused, or no TCP or TLS
handshake in time) the request never left, and the next replica is tried. No connection is reused, so an
error after the handshake always means the request may have arrived (ledger.UNKNOWN). The seed fixes the
choices, not their timing: which fault a write meets depends on the clock.
"""

from __future__ import annotations

import contextlib
import random
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from common.procutil import app_python
from tests.e2e.conftest import APP_COMMAND

from .ledger import ACKNOWLEDGED, LRP_WRITES, NOT_SENT, REFUSED, UNKNOWN, Ledger, Write

WRITE_TIMEOUT_S = 5.0
PACE_S = (0.3, 1.2)  # the pause between two writes, drawn uniformly
MAX_ACTIVE_APPS = 6  # apps the workload still writes to (not deleted, not quarantined)
MAX_APPS = 12  # apps desired at once, quarantined ones included (they stay)
INSTANCES = (1, 4)
TASK_SLEEP_S = (0.5, 3.0)
SLEEP_COMMAND = ["sleep", "1000000"]
# The BBS answers 504 and drops a request after its --request-timeout (60 s): past it, with a margin, a write
# of unknown outcome is over on its side.
RESOLVE_AFTER_S = 90.0
# argv: markers_dir, seconds to sleep. The marker first, so a run the rep kills early still counts.
TASK_SOURCE = r"""
import os, secrets, sys, time
path = os.path.join(sys.argv[1], f"{os.environ['TASK_GUID']}.{secrets.token_hex(8)}")
with open(path, "x") as marker:
    marker.write(f"{os.environ.get('CELL_ID', '')} {os.getpid()} {time.time()!r}\n")
time.sleep(float(sys.argv[2]))
"""
# What the request's error says about whether it left: these only before any byte was sent.
NOT_SENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout)


class Workload:
    def __init__(self, bbs_urls: list[str], verify: ssl.SSLContext | bool, ledger: Ledger, rng: random.Random,
                 markers_dir: Path, prefix: str) -> None:
        self.bbs_urls = list(bbs_urls)
        self.ledger = ledger
        self.rng = rng
        self.markers_dir = markers_dir
        self.prefix = prefix  # of every guid of this run
        # A new connection per request (see the module doc).
        self.http = httpx.Client(verify=verify, timeout=WRITE_TIMEOUT_S,
                                 limits=httpx.Limits(max_keepalive_connections=0))
        self.apps: dict[str, int] = {}  # the apps it writes to -> their instances as last acknowledged
        self.counter = 0
        self._writing = threading.Lock()  # held while a write is in flight
        self._resume = threading.Event()
        self._resume.set()

    def close(self) -> None:
        self.http.close()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No write starts inside, and none is in flight: the one under way is waited for."""
        self._resume.clear()
        with self._writing:
            pass
        try:
            yield
        finally:
            self._resume.set()

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            if not self._resume.wait(timeout=0.5):  # paused: look at `stop` again now and then
                continue
            with self._writing:
                if stop.is_set() or not self._resume.is_set():
                    continue
                self.step()
            stop.wait(self.rng.uniform(*PACE_S))  # the workload's pace, not a synchronisation

    def step(self) -> Write:
        """One write, chosen at random among those that make sense now."""
        quarantined = self.ledger.quarantined(LRP_WRITES)
        for guid in [g for g in self.apps if g in quarantined]:
            del self.apps[guid]
        if due := sorted(
            g for g, ended in quarantined.items() if time.monotonic() - ended >= RESOLVE_AFTER_S
        ):
            resolved = self.resolve(due[0])
            if resolved is not None:
                return resolved
        choices = ["task", "task"]
        if len(self.apps) < MAX_ACTIVE_APPS and self._desired_count() < MAX_APPS:
            choices += ["desire", "desire"]
        if self.apps:
            choices += ["scale", "scale", "delete"]
        kind = self.rng.choice(choices)
        if kind == "desire":
            return self.desire()
        if kind == "task":
            return self.run_task()
        guid = self.rng.choice(sorted(self.apps))
        return self.scale(guid) if kind == "scale" else self.delete(guid)

    def _desired_count(self) -> int:
        """Apps possibly desired now: those written to, and the quarantined ones whose create may stand."""
        expected = self.ledger.expectations().lrps
        return sum(1 for acceptable in expected.values() if acceptable != {None})

    def _guid(self, kind: str) -> str:
        self.counter += 1
        return f"{self.prefix}-{kind}-{self.counter}"

    def desire(self) -> Write:
        guid, instances = self._guid("app"), self.rng.randint(*INSTANCES)
        body: dict[str, Any] = {
            "process_guid": guid,
            "instances": instances,
            "disk_mb": 64,
            "on_cell_loss": "keep-replicas" if self.rng.random() < 1 / 4 else "reschedule",
         "command": ["true"]}
        if self.rng.random() < 1 / 3:
            body |= {"command": APP_COMMAND, "memory_mb": 64, "ports": [8080]}
        else:
            body |= {"command": SLEEP_COMMAND, "memory_mb": self.rng.choice([16, 32]), "ports": [],
                     "health_check": {"type": "process"}}
        write = self.send("desire", guid, instances, "POST", "/v1/desired_lrps", body)
        if write.outcome == ACKNOWLEDGED:
            self.apps[guid] = instances
        return write

    def scale(self, guid: str) -> Write:
        instances = self.rng.choice(
            [n for n in range(INSTANCES[0], INSTANCES[1] + 1) if n != self.apps[guid]]
        )
        write = self.send(
            "scale", guid, instances, "PATCH", f"/v1/desired_lrps/{guid}", {"instances": instances}
        )
        if write.outcome == ACKNOWLEDGED:
            self.apps[guid] = instances
        return write

    def delete(self, guid: str) -> Write:
        write = self.send("delete", guid, None, "DELETE", f"/v1/desired_lrps/{guid}", None)
        if write.outcome == ACKNOWLEDGED:
            del self.apps[guid]
        return write

    def resolve(self, guid: str) -> Write | None:
        """Write down the app's state as the BBS shows it now (None: no replica answered, later then)."""
        for url in self.bbs_urls:
            try:
                response = self.http.get(f"{url}/v1/desired_lrps/{guid}")
            except httpx.HTTPError:
                continue
            if response.status_code in (200, 404):
                instances = int(response.json()["instances"]) if response.status_code == 200 else None
                write = self.ledger.begin("resolve", guid, instances)
                self.ledger.end(write, ACKNOWLEDGED, response.status_code)
                if instances is not None:
                    self.apps[guid] = instances
                return write
        return None

    def run_task(self) -> Write:
        guid = self._guid("task")
        seconds = round(self.rng.uniform(*TASK_SLEEP_S), 2)
        body = {"task_guid": guid, "memory_mb": 64, "disk_mb": 64,
                "command": [app_python(), "-c", TASK_SOURCE, str(self.markers_dir), str(seconds)]}
        return self.send("task", guid, None, "POST", "/v1/tasks", body)

    def send(self, kind: str, guid: str, instances: int | None, method: str, path: str,
             body: dict[str, Any] | None) -> Write:
        write = self.ledger.begin(kind, guid, instances)
        start = self.rng.randrange(len(self.bbs_urls))
        errors = []
        for url in self.bbs_urls[start:] + self.bbs_urls[:start]:
            try:
                response = self.http.request(method, f"{url}{path}", json=body)
            except NOT_SENT_ERRORS as exc:
                errors.append(f"{url}: {type(exc).__name__}")
                continue
            except httpx.HTTPError as exc:
                self.ledger.end(write, UNKNOWN, detail=f"{url}: {type(exc).__name__}: {exc}")
                return write
            if response.is_success:
                self.ledger.end(write, ACKNOWLEDGED, response.status_code)
            else:
                outcome = REFUSED if response.status_code < 500 else UNKNOWN
                self.ledger.end(write, outcome, response.status_code, f"{url}: {response.text}")
            return write
        self.ledger.end(write, NOT_SENT, detail="; ".join(errors))
        return write
