"""Encryption at rest with real `vendue bbs` processes (SQLite file and PostgreSQL): `vendue bbs rotate-keys`
while a BBS serves and clients keep writing loses nothing and leaves every record sealed with the active key
and readable, a second run changes nothing; a BBS without the key of an encrypted database, or with a keys
file others may read, refuses to start with one line and exit 2 (--check-config: deploy/bbs_cmd_test.py)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from bbs.store import tables
from common.tls import TLSFiles
from tests.support.bbs_process import ROOT, BBSProcess, certificates
from tests.support.polling import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

KEYS = {label: base64.b64encode(os.urandom(32)).decode() for label in ("k1", "k2")}


def write_keys(path: Path, active: str, *labels: str, mode: int = 0o600) -> Path:
    path.write_text(json.dumps({"active": active, "keys": {label: KEYS[label] for label in labels}}))
    path.chmod(mode)
    return path


def vendue(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "deploy.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


async def vendue_async(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "deploy.cli", *args, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    except BaseException:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, out.decode(), err.decode()


async def raw_labels(database_url: str) -> dict[str, dict[str, str | None]]:
    """guid -> key label of every row of desired_lrps and tasks, read from the database directly."""
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as connection:
            lrps = (await connection.execute(sa.select(tables.desired_lrps.c.process_guid,
                                                       tables.desired_lrps.c.key_label))).all()
            tasks = (
                await connection.execute(sa.select(tables.tasks.c.task_guid, tables.tasks.c.key_label))
            ).all()
    finally:
        await engine.dispose()
    return {"desired_lrps": dict(lrps), "tasks": dict(tasks)}  # type: ignore[arg-type]


class Writers:
    """Clients creating desired LRPs and tasks (each with a secret of its own in env) and scaling the LRPs
    made before, as fast as the BBS answers; what was acknowledged is kept to be checked."""

    def __init__(self, bbs: BBSProcess, existing: list[str], workers: int = 4) -> None:
        self.bbs = bbs
        self.existing = existing
        self.desired: dict[str, int] = {}  # guid -> instances acknowledged last
        self.tasks: list[str] = []
        self.acknowledged = 0
        self._stop = asyncio.Event()
        self._workers = [asyncio.create_task(self._work(n)) for n in range(workers)]

    async def _work(self, worker: int) -> None:
        async with self.bbs.async_client(timeout=30) as http:
            for n in range(1_000_000):
                if self._stop.is_set():
                    return
                guid = f"live-{worker}-{n}"
                if n % 3 == 0:
                    response = await http.post("/v1/desired_lrps", json=lrp(guid))
                    if response.status_code == 201:
                        self.desired[guid] = 1
                elif n % 3 == 1:
                    response = await http.post("/v1/tasks", json=task(guid))
                    if response.status_code == 201:
                        self.tasks.append(guid)
                else:
                    old = self.existing[(worker * 7919 + n) % len(self.existing)]
                    instances = n % 4
                    response = await http.patch(f"/v1/desired_lrps/{old}", json={"instances": instances})
                    if response.status_code == 200:
                        self.desired[old] = instances
                assert response.status_code in (200, 201), response.text
                self.acknowledged += 1

    async def stop(self) -> None:
        self._stop.set()
        for result in await asyncio.gather(*self._workers, return_exceptions=True):
            if isinstance(result, BaseException):
                raise result


def lrp(guid: str) -> dict[str, Any]:
    return {"process_guid": guid, "instances": 1, "command": ["./run", f"--token=cmd-{guid}"],
            "env": {"DATABASE_PASSWORD": f"pw-{guid}"}}


def task(guid: str) -> dict[str, Any]:
    return {
        "task_guid": guid,
        "command": ["./job", f"--token=cmd-{guid}"],
        "env": {"DATABASE_PASSWORD": f"pw-{guid}"},
    }


def refusal(stderr: str) -> list[str]:
    """What a refused start printed besides its JSON log lines (the migrations' info lines); none of those
    is an error or carries a traceback."""
    logs = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert all(entry["level"] == "info" and "exc" not in entry for entry in logs), logs
    return [line for line in stderr.splitlines() if not line.startswith("{")]


async def test_rotate_keys_while_the_bbs_serves_loses_nothing_and_leaves_every_record_on_the_active_key(
    tmp_path: Path, database_url: str
) -> None:
    keys = tmp_path / "bbs-keys.json"
    write_keys(keys, "k1", "k1")
    first = BBSProcess(tmp_path, "k1", database_url, "--encryption-keys-file", str(keys))
    try:
        async with first.async_client(timeout=30) as http:
            for n in range(120):
                assert (await http.post("/v1/desired_lrps", json=lrp(f"old-{n:03}"))).status_code == 201
            for n in range(40):
                assert (await http.post("/v1/tasks", json=task(f"old-t-{n:03}"))).status_code == 201
    finally:
        first.stop()
    before = await raw_labels(database_url)
    assert set(before["desired_lrps"].values()) == set(before["tasks"].values()) == {"k1"}

    # Every replica gets the new key as the active one (keeping k1 to read), then the rows are resealed.
    write_keys(keys, "k2", "k1", "k2")
    bbs = BBSProcess(tmp_path, "k2", database_url, "--encryption-keys-file", str(keys))
    try:
        old = [f"old-{n:03}" for n in range(120)]
        writers = Writers(bbs, old)
        await eventually(lambda: writers.acknowledged >= 20, 60.0, "20 writes acknowledged before rotating",
                         lambda: f"{writers.acknowledged} acknowledged")
        at_start = writers.acknowledged
        code, out, err = await vendue_async("bbs", "--database-url", database_url, "--encryption-keys-file",
                                            str(keys), "rotate-keys", "--batch", "16", "--json")
        during = writers.acknowledged - at_start
        await writers.stop()
        assert code == 0, err
        rotation = json.loads(out)
        # No LRP changed its definition: no kept version to reseal.
        assert rotation["active"] == "k2"
        assert rotation["resealed"] == {"desired_lrps": 120, "tasks": 40, "lrp_versions": 0}
        assert during > 0, "no write was acknowledged while rotate-keys ran"

        async with bbs.async_client(timeout=30) as http:
            lrps = {d["process_guid"]: d for d in (await http.get("/v1/desired_lrps")).json()["items"]}
            tasks = {t["task_guid"]: t for t in (await http.get("/v1/tasks")).json()["items"]}
        expected_lrps = {guid: 1 for guid in old} | writers.desired
        assert {guid: lrps[guid]["instances"] for guid in expected_lrps if guid in lrps} == expected_lrps
        for guid, record in lrps.items():  # readable, and each its own secret
            assert record["env"] == {"DATABASE_PASSWORD": f"pw-{guid}"}, guid
            assert record["command"] == ["./run", f"--token=cmd-{guid}"], guid
        expected_tasks = {f"old-t-{n:03}" for n in range(40)} | set(writers.tasks)
        assert set(tasks) == expected_tasks
        assert all(tasks[guid]["env"] == {"DATABASE_PASSWORD": f"pw-{guid}"} for guid in tasks)
    finally:
        bbs.stop()

    after = await raw_labels(database_url)
    assert set(after["desired_lrps"]) == set(lrps) and set(after["tasks"]) == expected_tasks
    assert set(after["desired_lrps"].values()) == set(after["tasks"].values()) == {"k2"}

    again = vendue("bbs", "--database-url", database_url, "--encryption-keys-file", str(keys), "rotate-keys")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == (
        "sealed 0 desired LRPs, 0 tasks and 0 versions of LRPs with key 'k2' in 0 batches")
    assert again.stdout.splitlines()[1:] == [
        f"desired_lrps: {len(lrps)} k2",
        f"tasks: {len(expected_tasks)} k2",
        "lrp_versions: none",  # no definition changed: no kept version
    ]


def test_a_bbs_without_the_key_of_an_encrypted_database_refuses_to_start(
    tmp_path: Path, database_url: str
) -> None:
    keys = write_keys(tmp_path / "bbs-keys.json", "k1", "k1")
    bbs = BBSProcess(tmp_path, "1", database_url, "--encryption-keys-file", str(keys))
    try:
        with bbs.client(timeout=10) as http:
            assert http.post("/v1/tasks", json=task("t1")).status_code == 201
    finally:
        bbs.stop()

    served = TLSFiles.in_dir(certificates(tmp_path), "bbs")  # TLS: no warning line besides the refusal
    start = ["bbs", "--port", "0", "--database-url", database_url, "--ready-file", str(tmp_path / "ready"),
             "--tls-cert", str(served.cert), "--tls-key", str(served.key), "--tls-ca", str(served.ca)]
    without = vendue(*start)
    assert (without.returncode, refusal(without.stderr)) == (2, [
        'error: --encryption-keys-file (encryption_keys_file): the database holds records encrypted with key '
        '"k1"; give the key ring'])
    lacking = vendue(*start, VENDUE_ENCRYPTION_KEYS=json.dumps({"active": "k2", "keys": {"k2": KEYS["k2"]}}))
    assert (lacking.returncode, refusal(lacking.stderr)) == (
        2,
        [
            'error: encryption_keys: the database holds records encrypted with key "k1", which the key ring '
            '(keys k2) '
            "lacks"
        ],
    )
    keys.chmod(0o644)
    too_open = vendue(*start, "--encryption-keys-file", str(keys))
    assert (too_open.returncode, refusal(too_open.stderr)) == (2, [
        f"error: --encryption-keys-file (encryption_keys_file): {keys} is mode 0644; it holds keys, so it "
        "must be 0600 or stricter "
        f"(chmod 600 {keys})"])
    assert not (tmp_path / "ready").exists()
    # The key ring given back, it serves again.
    keys.chmod(0o600)
    again = BBSProcess(tmp_path, "2", database_url, "--encryption-keys-file", str(keys))
    try:
        with again.client(timeout=10) as http:
            assert http.get("/v1/tasks/t1").json()["env"] == {"DATABASE_PASSWORD": "pw-t1"}
    finally:
        again.stop()


async def test_no_request_fails_for_want_of_the_key_on_a_plain_database(tmp_path: Path) -> None:
    """Without a ring the BBS stores in the clear (and warns); given one later, it reads those rows."""
    plain = BBSProcess(tmp_path, "plain", None)
    try:
        async with plain.async_client(timeout=10) as http:
            assert (await http.post("/v1/tasks", json=task("t1"))).status_code == 201
    finally:
        plain.stop()
    log = [
        json.loads(line)
        for line in (tmp_path / "bbs-plain.log").read_text().splitlines()
        if line.startswith("{")
    ]
    assert any(entry["msg"].startswith("encryption at rest is off") for entry in log)
    keys = write_keys(tmp_path / "bbs-keys.json", "k1", "k1")
    sealed = BBSProcess(tmp_path, "sealed", None, "--encryption-keys-file", str(keys))
    try:
        async with sealed.async_client(timeout=10) as http:
            assert (await http.get("/v1/tasks/t1")).json()["env"] == {"DATABASE_PASSWORD": "pw-t1"}
    finally:
        sealed.stop()
