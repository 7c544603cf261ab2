"""End to end, the event stream: filters (app, cell, type) applied by the BBS, a client that reconnects with
Last-Event-ID getting exactly what it missed, a `resync` for an id the BBS cannot resume from (unknown, or
from before a restart), `vendue events` with filters, and `vendue events` following across two BBS
replicas when the one it reads dies.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from deploy.cluster import LocalCluster

from .conftest import (
    BBS_ARGS,
    REP_ARGS,
    ROOT,
    E2ECluster,
    EventLog,
    Received,
    expect,
    wait_all_running,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def running_events(log: EventLog, process_guid: str) -> set[int]:
    """The indices of `process_guid` that `log` saw become RUNNING."""
    return {e.data["index"] for e in log.snapshot() if e.type in ("actual_lrp_changed", "actual_lrp_created")
            and e.data.get("process_guid") == process_guid and e.data.get("state") == "RUNNING"}


def brief_events(events: list[Received]) -> str:
    return ", ".join(f"{e.id} {e.type} {e.data.get('process_guid') or e.data.get('cell_id') or ''}"
                     for e in events[-12:])


class FollowingCLI:
    """`vendue events ARGS --json` running (it follows until killed), its stdout lines read in a thread."""

    def __init__(self, data_dir: Path, bbs_urls: str, *args: str) -> None:
        env = {**os.environ, "VENDUE_BBS_URL": bbs_urls, "VENDUE_DATA_DIR": str(data_dir), "NO_COLOR": "1"}
        for name in ("VENDUE_TLS_CERT", "VENDUE_TLS_KEY", "VENDUE_TLS_CA", "VENDUE_TOKEN"):
            env.pop(name, None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "deploy.cli", "events", "--json", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: list[dict] = []
        self.errors: list[str] = []
        self._threads = [threading.Thread(target=self._read, daemon=True),
                         threading.Thread(target=self._read_errors, daemon=True)]
        for thread in self._threads:
            thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(json.loads(line))

    def _read_errors(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.errors.append(line.rstrip("\n"))

    def subscribed(self, url: str, timeout: float = 30.0) -> None:
        """Wait until the CLI says it follows the BBS at `url`."""
        line = f"following the events of {url} "
        wait_for(lambda: expect(any(e.startswith(line) for e in self.errors) or self.proc.poll() is not None,
                                f"stderr {self.errors[-3:]}"), timeout, f"vendue events following {url}")
        assert self.proc.poll() is None, f"vendue events exited {self.proc.returncode}: {self.errors[-5:]}"

    def seen(self, describe: str, match, timeout: float = 30.0) -> dict:
        """The first line `match` accepts, waiting for it (and failing if the CLI exits first)."""

        def found() -> dict | None:
            hit = next((line for line in list(self.lines) if match(line)), None)
            if hit is None and self.proc.poll() is not None:
                raise AssertionError(f"vendue events exited {self.proc.returncode} before {describe}: "
                                     f"{self.errors[-5:]}")
            return hit or expect(
                False,
                f"{len(self.lines)} lines, last {[ln['type'] for ln in self.lines[-8:]]}, "
                f"stderr {self.errors[-3:]}",
            )

        return wait_for(found, timeout, describe)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


@contextlib.contextmanager
def following_cli(data_dir: Path, bbs_urls: str, *args: str) -> Iterator[FollowingCLI]:
    cli = FollowingCLI(data_dir, bbs_urls, *args)
    try:
        yield cli
    finally:
        cli.stop()


def test_filters_replay_from_last_event_id_and_resync(make_cluster) -> None:
    c: E2ECluster = make_cluster(cells=2, zones=1)
    lc = c.lc
    web, api = c.guid("web"), c.guid("api")
    first_cell = sorted(c.reps)[0]
    everything = EventLog(lc.bbs_url, lc.verify).start()
    only_web = EventLog(lc.bbs_url, lc.verify, params=[("app", web), ("type", "actual_lrp_changed")]).start()
    on_cell = EventLog(lc.bbs_url, lc.verify, params=[("cell", first_cell)]).start()
    try:
        c.bbs.desire(web, 1)
        c.bbs.desire(api, 4)  # on both cells (balanced): some on first_cell
        wait_all_running(c.bbs, web, 1)
        wait_all_running(c.bbs, api, 4)
        wait_for(lambda: expect(running_events(only_web, web) == {0}, brief_events(only_web.snapshot())),
                 15, f"{web}/0 RUNNING on the stream filtered to it")
        wait_for(
            lambda: expect(
                running_events(everything, api) == {0, 1, 2, 3}, brief_events(everything.snapshot())
            ),
            15,
            f"every instance of {api} RUNNING on the unfiltered stream",
        )
        on_first = {a["index"] for a in c.bbs.actuals(api) if a["cell_id"] == first_cell}
        assert on_first, f"expected some of {api} on {first_cell}: {c.bbs.actuals(api)}"
        wait_for(lambda: expect(running_events(on_cell, api) == on_first, brief_events(on_cell.snapshot())),
                 15, f"the instances of {api} on {first_cell} RUNNING on the stream filtered to that cell")

        # Filters hold for every event, not only the ones waited for.
        strays = [
            e for e in only_web.snapshot() if e.type != "actual_lrp_changed" or e.data["process_guid"] != web
        ]
        assert strays == [], f"the stream for app={web} type=actual_lrp_changed got {brief_events(strays)}"
        strays = [e for e in on_cell.snapshot() if e.data.get("cell_id") != first_cell]
        assert strays == [], f"the stream for cell={first_cell} got {brief_events(strays)}"
        kinds = {"desired_lrp_created", "actual_lrp_created", "actual_lrp_changed", "convergence_completed"}
        wait_for(lambda: expect({e.type for e in everything.snapshot()} >= kinds,
                                sorted({e.type for e in everything.snapshot()})),
                 15, f"each of {sorted(kinds)} on the unfiltered stream (a convergence pass every 0.5 s)")

        # Disconnect, change things, reconnect with the last id: exactly what was missed, then the live
        # stream.
        everything.stop()
        last = everything.snapshot()[-1]
        c.bbs.scale(web, 2)
        wait_all_running(c.bbs, web, 2)
        resumed = EventLog(lc.bbs_url, lc.verify, headers={"Last-Event-ID": last.id}).start()
        wait_for(lambda: expect(running_events(resumed, web) >= {1}, brief_events(resumed.snapshot())), 15,
                 f"{web}/1 RUNNING in what the resumed stream replayed")
        c.bbs.desire(c.guid("later"), 1)
        wait_for(lambda: expect(any(e.type == "desired_lrp_created" for e in resumed.snapshot()),
                                brief_events(resumed.snapshot())), 15, "a live event after the replay")
        seqs = [e.id_seq for e in resumed.snapshot()]
        assert seqs == list(range(last.id_seq + 1, last.id_seq + 1 + len(seqs))), (
            f"expected every event after {last.id} once, in order; saw seqs {seqs[:20]}...")
        assert resumed.snapshot()[0].id.rpartition("-")[0] == last.id.rpartition("-")[0]
        resumed.stop()

        # An id the BBS cannot resume from: resync (with the newest id), then the live stream.
        foreign = EventLog(lc.bbs_url, lc.verify, headers={"Last-Event-ID": "0123abc-7"}).start()
        resync = wait_for(lambda: foreign.snapshot()[0] if foreign.snapshot() else None, 15, "a resync event",
                          seen=lambda: f"no event; the stream's error: {foreign.error!r}")
        assert resync.type == "resync" and resync.data["last_event_id"] == "0123abc-7", resync
        foreign.stop()
        newest = resumed.snapshot()[-1]
    finally:
        for log in (everything, only_web, on_cell):
            log.stop()

    # A BBS restarted is a new epoch: the ids it gave before cannot be resumed from.
    lc.restart("bbs")
    after_restart = EventLog(lc.bbs_url, lc.verify, headers={"Last-Event-ID": newest.id}).start()
    try:
        resync = wait_for(lambda: after_restart.snapshot()[0] if after_restart.snapshot() else None, 15,
                          "a resync event after the restart")
        assert resync.type == "resync" and "earlier run" in resync.data["reason"], resync
        assert resync.id.rpartition("-")[0] != newest.id.rpartition("-")[0]
        # Live after the resync: a change the restarted BBS commits (placing it would wait for the
        # auctioneer's lease to settle after the restart: not what this is about).
        late = c.guid("late")
        c.bbs.desire(late, 1)
        wait_for(
            lambda: expect(
                any(
                    e.type == "desired_lrp_created" and e.data["process_guid"] == late
                    for e in after_restart.snapshot()
                ),
                brief_events(after_restart.snapshot()),
            ),
            30,
            f"desired_lrp_created of {late}, live, after the resync",
        )
        assert all(e.id.rpartition("-")[0] == resync.id.rpartition("-")[0] for e in after_restart.snapshot())
    finally:
        after_restart.stop()


def test_bad_filters_are_422_naming_the_parameter_and_the_cli_says_the_flag(shared_cluster) -> None:
    c = shared_cluster
    with httpx.Client(base_url=c.lc.bbs_url, verify=c.lc.verify, timeout=10) as http:
        for params, name in (({"type": "actual_lrp_chnged"}, "type"), ({"app": "no spaces"}, "app"),
                             ({"cell": "a/b"}, "cell")):
            response = http.get("/v1/events", params=params)
            assert response.status_code == 422, f"{params}: {response.status_code} {response.text}"
            assert response.json()["detail"][0]["loc"][:2] == ["query", name], response.text
    result = c.cli("events", "--type", "actual_lrp_chnged")
    assert result.code == 2 and result.stderr.startswith("error: --type (type): "), result.output
    assert len(result.stderr.splitlines()) == 1 and result.stdout == "", result.output


def test_the_cli_prints_only_what_its_filters_ask_for(shared_cluster) -> None:
    c = shared_cluster
    web, other = c.guid("web"), c.guid("other")
    with following_cli(c.lc.data_dir, c.lc.bbs_url, "--app", web, "--type", "actual_lrp_changed") as cli:
        cli.subscribed(c.lc.bbs_url)
        c.bbs.desire(other, 1)
        c.bbs.desire(web, 2)
        for index in (0, 1):
            cli.seen(f"{web}/{index} RUNNING", lambda line, i=index: line["data"].get("index") == i
                     and line["data"].get("state") == "RUNNING")
        wait_all_running(c.bbs, other, 1)
        strays = [line for line in cli.lines if line["type"] != "actual_lrp_changed"
                  or line["data"]["process_guid"] != web]
        assert strays == [], f"expected only {web}'s actual_lrp_changed, saw {strays[:3]}"
        assert all(line["id"] for line in cli.lines)


CLUSTER = {"cells": 2, "zones": 1}


@pytest.fixture
def two_replicas(tmp_path: Path, fresh_postgres_database: str) -> Iterator[LocalCluster]:
    lc = LocalCluster(tmp_path / "cluster", cells=2, zones=1, executor="sim", ha=True,
                      database_url=fresh_postgres_database, bbs_args=list(BBS_ARGS), rep_args=list(REP_ARGS))
    try:
        lc.start(timeout=90.0)
        yield lc
    finally:
        lc.stop()


def test_the_cli_follows_the_stream_to_the_other_replica_when_its_bbs_dies(
    two_replicas: LocalCluster,
) -> None:
    lc = two_replicas
    first, second = lc.bbs_urls
    body = {"instances": 1, "command": ["sleep", "1000"], "memory_mb": 16, "disk_mb": 16}
    with following_cli(lc.data_dir, f"{first},{second}", "--type", "desired_lrp_created",
                       "--type", "resync") as cli, httpx.Client(verify=lc.verify, timeout=10) as http:

        def desire(url: str, name: str) -> None:
            response = http.post(f"{url}/v1/desired_lrps", json={"process_guid": name, **body})
            assert response.status_code == 201, response.text

        cli.subscribed(first)
        desire(first, "before-kill")
        cli.seen("the desire made through the first replica",
                 lambda line: line["data"].get("process_guid") == "before-kill")
        lc.kill("bbs")
        resync = cli.seen("a resync from the second replica", lambda line: line["type"] == "resync")
        cli.subscribed(second)
        assert "another BBS replica" in resync["data"]["reason"], resync
        desire(second, "after-kill")
        cli.seen("the desire made through the second replica",
                 lambda line: line["data"].get("process_guid") == "after-kill")
        assert cli.proc.poll() is None, f"vendue events exited: {cli.errors}"
        assert any(line.startswith("reconnecting: ") for line in cli.errors), cli.errors
