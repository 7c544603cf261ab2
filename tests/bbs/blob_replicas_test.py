"""The blob store across `vendue bbs --ha`-style replicas (two processes, TLS on, one PostgreSQL, each its own
data dir): a blob uploaded through one is downloaded through the other, whole and resumed, and outlives a
restart of both (docs/artifacts.md)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.bbs_process import BBSProcess, certificates
from tests.support.polling import expect, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

MIB = 1024 * 1024
NO_CONVERGENCE = ("--convergence-interval", "60")


def peak_rss_mib(bbs: BBSProcess) -> float:
    """The process's peak resident set (VmHWM), MiB."""
    for line in Path(f"/proc/{bbs.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc/<pid>/status")


def start_pair(tmp_path: Path, database_url: str, processes: list[BBSProcess],
               run: int) -> tuple[BBSProcess, BBSProcess]:
    certs = certificates(tmp_path)
    pair = []
    for name in ("one", "two"):
        data_dir = tmp_path / name  # nothing shared but the database
        data_dir.mkdir(exist_ok=True)
        # A ready file of its own per run: the last run's would say the stopped process's URL.
        bbs = BBSProcess(data_dir, f"{name}-{run}", database_url, *NO_CONVERGENCE, certs=certs)
        processes.append(bbs)
        pair.append(bbs)
    return pair[0], pair[1]


def test_a_blob_uploaded_through_one_replica_is_downloaded_through_the_other_and_survives_restarts(
    tmp_path: Path, fresh_postgres_database: str, processes: list[BBSProcess]
) -> None:
    one, two = start_pair(tmp_path, fresh_postgres_database, processes, run=1)
    assert one.url.startswith("https://") and two.url.startswith("https://")
    size = 96 * MIB + 12345  # many 1 MiB chunks and a short last one
    part = os.urandom(MIB)
    parts = [part[: MIB - n] for n in range(size // MIB)]
    parts.append(part[: size - sum(map(len, parts))])
    digest = "sha256:" + hashlib.sha256(b"".join(parts)).hexdigest()
    whole = b"".join(parts)

    def body() -> Iterator[bytes]:  # streamed: no Content-Length
        yield from parts

    rss_before = peak_rss_mib(one)
    with one.client(timeout=60) as http:
        uploaded = http.put(f"/v1/blobs/{digest}", content=body())
        assert uploaded.status_code == 201, uploaded.text
        assert uploaded.json()["size"] == size
        mismatch = http.put(f"/v1/blobs/sha256:{'0' * 64}", content=b"not zeros")
        assert mismatch.status_code == 422 and mismatch.json()["detail"][0]["loc"] == ["path", "digest"]
    upload_growth = peak_rss_mib(one) - rss_before

    rss_before = peak_rss_mib(two)
    with two.client(timeout=60) as http:
        head = http.head(f"/v1/blobs/{digest}")
        assert head.status_code == 200 and head.headers["content-length"] == str(size), head.headers
        received = bytearray()
        with http.stream("GET", f"/v1/blobs/{digest}") as response:
            assert response.status_code == 200
            for piece in response.iter_bytes():
                received += piece
                if len(received) >= size // 3:
                    break  # the connection drops mid-download...
        resumed = http.get(f"/v1/blobs/{digest}", headers={"range": f"bytes={len(received)}-"})
        assert resumed.status_code == 206, resumed.status_code  # ...and the download resumes there
        assert bytes(received) + resumed.content == whole
        listed = http.get("/v1/blobs").json()["items"]
        assert [(b["digest"], b["size"]) for b in listed] == [(digest, size)]
        metrics = http.get("/metrics").text
    download_growth = peak_rss_mib(two) - rss_before
    assert "vendue_blob_downloads_total 2.0" in metrics, [ln for ln in metrics.splitlines() if "blob" in ln]
    print(f"\n{size / MIB:.0f} MiB blob: peak RSS growth upload {upload_growth:.1f} MiB (replica one), "
          f"download {download_growth:.1f} MiB (replica two)")
    # Streamed both ways: a blob twice the size of what the process may grow by.
    assert upload_growth < 48 and download_growth < 48, (upload_growth, download_growth)

    for bbs in (one, two):
        bbs.stop()
    processes.clear()
    one, two = start_pair(tmp_path, fresh_postgres_database, processes, run=2)
    for bbs in (one, two):
        with bbs.client(timeout=60) as http:
            got = http.get(f"/v1/blobs/{digest}")
            assert got.status_code == 200 and hashlib.sha256(got.content).hexdigest() == digest[7:]
    with two.client(timeout=30) as http:
        assert http.delete(f"/v1/blobs/{digest}").status_code == 204
    with one.client(timeout=30) as http:
        assert http.get(f"/v1/blobs/{digest}").status_code == 404, "deleted through two, gone through one"


def test_a_blob_on_sqlite_outlives_a_restart_and_a_refused_upload_leaves_nothing(
    tmp_path: Path, processes: list[BBSProcess]
) -> None:
    bbs = BBSProcess(tmp_path, "a", None, *NO_CONVERGENCE, "--blob-max-bytes", str(4 * MIB))
    processes.append(bbs)
    data = os.urandom(3 * MIB + 17)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    with bbs.client(timeout=30) as http:
        assert http.put(f"/v1/blobs/{digest}", content=data).status_code == 201
        too_large = http.put(f"/v1/blobs/sha256:{'1' * 64}", content=os.urandom(5 * MIB))
        assert too_large.status_code == 413, too_large.text
        try:  # a streamed body past the cap: 413, and the connection closed, maybe before the client reads it
            answer = http.put(f"/v1/blobs/sha256:{'2' * 64}", content=iter([os.urandom(MIB)] * 6))
            assert answer.status_code == 413, answer.text
        except httpx.TransportError:
            pass
    bbs.stop()
    processes.clear()
    files = sorted(p.name for p in (tmp_path / "blobs").rglob("*") if p.is_file())
    assert len(files) == 1, f"one blob's file and no leftover of the refused uploads: {files}"
    again = BBSProcess(tmp_path, "b", None, *NO_CONVERGENCE)
    processes.append(again)
    with again.client(timeout=30) as http:
        assert http.get(f"/v1/blobs/{digest}").content == data


def test_the_leader_collects_unreferenced_blobs_after_the_grace_and_never_a_referenced_one(
    tmp_path: Path, processes: list[BBSProcess]
) -> None:
    grace = 2.0
    bbs = BBSProcess(tmp_path, "gc", None, *NO_CONVERGENCE, "--blob-gc-grace", str(grace),
                     "--blob-gc-interval", "0.2")
    processes.append(bbs)
    named, loose, later = (os.urandom(1000 + n) for n in range(3))

    def digest(data: bytes) -> str:
        return "sha256:" + hashlib.sha256(data).hexdigest()

    with bbs.client(timeout=30) as http:
        for data in (named, loose):
            assert http.put(f"/v1/blobs/{digest(data)}", content=data).status_code == 201
        desired = {"process_guid": "web", "instances": 0, "command": ["./run"],
                   "artifacts": [{"digest": digest(named), "dest": "app"}]}
        created = http.post("/v1/desired_lrps", json=desired)
        assert created.status_code == 201, created.text
        assert created.json()["source_blob"] == digest(named)

        def stored() -> set[str]:
            return {b["digest"] for b in http.get("/v1/blobs").json()["items"]}

        def gone(data: bytes) -> bool:
            now = stored()
            return expect(digest(data) not in now, f"stored: {sorted(now)}")

        wait_for(lambda: gone(loose), 20.0, f"the unreferenced blob collected after its {grace} s grace")
        # Another blob, uploaded after the first was collected, collected in turn: at least one more
        # collection ran after the named blob's grace had passed, and it kept the named one.
        assert http.put(f"/v1/blobs/{digest(later)}", content=later).status_code == 201
        wait_for(lambda: gone(later), 20.0, "the second unreferenced blob collected")
        assert stored() == {digest(named)}
        assert http.get(f"/v1/blobs/{digest(named)}").content == named
        metrics = http.get("/metrics").text
        assert f"vendue_blobs_stored_bytes {float(len(named))}" in metrics, [
            line for line in metrics.splitlines() if line.startswith("vendue_blob")]


def test_on_postgresql_one_replica_collects_what_nothing_names_and_keeps_what_the_other_was_told_of(
    tmp_path: Path, fresh_postgres_database: str, processes: list[BBSProcess]
) -> None:
    """Two replicas, one database: whichever holds the convergence lease collects; an upload through one,
    named by a desire through the other, is kept; one nothing names is gone from both after the grace."""
    certs = certificates(tmp_path)
    gc = ("--blob-gc-grace", "2", "--blob-gc-interval", "0.2")
    pair = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        pair.append(BBSProcess(tmp_path / name, name, fresh_postgres_database, *NO_CONVERGENCE, *gc,
                               certs=certs))
        processes.append(pair[-1])
    one, two = pair
    named, loose = os.urandom(2000), os.urandom(3000)

    def digest(data: bytes) -> str:
        return "sha256:" + hashlib.sha256(data).hexdigest()

    with one.client(timeout=30) as http:
        for data in (named, loose):
            assert http.put(f"/v1/blobs/{digest(data)}", content=data).status_code == 201
    with two.client(timeout=30) as http:
        desired = {"process_guid": "web", "instances": 0, "command": ["./run"],
                   "artifacts": [{"digest": digest(named), "dest": "app"}]}
        created = http.post("/v1/desired_lrps", json=desired)
        assert created.status_code == 201, created.text

    def stored(bbs: BBSProcess) -> set[str]:
        with bbs.client(timeout=10) as http:
            return {b["digest"] for b in http.get("/v1/blobs").json()["items"]}

    for bbs in (one, two):
        def collected(b: BBSProcess = bbs) -> bool:
            return expect(digest(loose) not in stored(b), f"stored: {sorted(stored(b))}")

        wait_for(collected, 20.0, "the unreferenced blob collected after its grace, seen through either")
    # Past two more graces: the named one is still there, whole, through either replica.
    later = os.urandom(1000)
    with one.client(timeout=30) as http:
        assert http.put(f"/v1/blobs/{digest(later)}", content=later).status_code == 201
    wait_for(lambda: expect(digest(later) not in stored(two), f"stored: {sorted(stored(two))}"), 20.0,
             "a later unreferenced blob collected in turn")
    for bbs in (one, two):
        assert stored(bbs) == {digest(named)}
        with bbs.client(timeout=30) as http:
            assert http.get(f"/v1/blobs/{digest(named)}").content == named
