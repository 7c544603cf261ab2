"""The blob store through the BBS's API, in-process, on each kind of database (the `h` fixture): upload
verified while it streams, ranges, the caps, deletion, and garbage collection (docs/artifacts.md)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bbs.blob_collector import BlobCollector
from bbs.routes.blobs import Unsatisfiable, byte_range
from bbs.store.blobs import CHUNK_BYTES
from tests.support.bbs_harness import Harness

pytestmark = pytest.mark.timeout(300)

MIB = 1024 * 1024


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def payload(size: int, seed: int = 0) -> bytes:
    """Bytes that are not one repeated chunk (a chunk boundary mistake shows)."""
    block = hashlib.sha256(str(seed).encode()).digest()
    return (bytes(range(256)) + block * 8)[: 256 + 256] * (size // 512) + block[: size % 512]


async def upload(h: Harness, data: bytes, digest: str | None = None) -> tuple[int, dict]:
    response = await h.http.put(f"/v1/blobs/{digest or digest_of(data)}", content=data)
    return response.status_code, response.json()


def stored_files(h: Harness) -> list[str]:
    directory = Path(h.bbs.settings.data_dir) / "blobs"
    if not directory.exists():
        return []
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


async def test_a_blob_is_stored_listed_read_and_deleted(h: Harness) -> None:
    data = payload(3 * CHUNK_BYTES + 1234)
    digest = digest_of(data)
    status, body = await upload(h, data)
    assert status == 201, body
    assert body["digest"] == digest and body["size"] == len(data)
    assert (await upload(h, data))[0] == 200, "a second upload of the same bytes stores nothing new"

    got = await h.http.get(f"/v1/blobs/{digest}")
    assert got.status_code == 200 and got.content == data
    assert got.headers["etag"] == f'"{digest}"' and got.headers["accept-ranges"] == "bytes"
    head = await h.http.head(f"/v1/blobs/{digest}")
    assert head.status_code == 200 and head.headers["content-length"] == str(len(data)) and not head.content
    listed = (await h.http.get("/v1/blobs")).json()["items"]
    assert [(b["digest"], b["size"]) for b in listed] == [(digest, len(data))]

    assert (await h.http.delete(f"/v1/blobs/{digest}")).status_code == 204
    assert (await h.http.get(f"/v1/blobs/{digest}")).status_code == 404
    assert (await h.http.head(f"/v1/blobs/{digest}")).status_code == 404
    assert (await h.http.delete(f"/v1/blobs/{digest}")).status_code == 404
    assert stored_files(h) == []


async def test_an_empty_blob(h: Harness) -> None:
    status, body = await upload(h, b"")
    assert status == 201 and body["size"] == 0
    got = await h.http.get(f"/v1/blobs/{digest_of(b'')}")
    assert got.status_code == 200 and got.content == b""


async def test_a_body_that_is_not_its_digest_is_refused_and_nothing_is_stored(h: Harness) -> None:
    data = payload(2 * CHUNK_BYTES + 7)
    claimed = digest_of(b"something else")
    response = await h.http.put(f"/v1/blobs/{claimed}", content=data)
    assert response.status_code == 422, response.text
    error = response.json()["detail"][0]
    assert error["loc"] == ["path", "digest"] and digest_of(data) in error["msg"], error
    assert (await h.http.get("/v1/blobs")).json()["items"] == []
    assert (await h.http.get(f"/v1/blobs/{claimed}")).status_code == 404
    assert stored_files(h) == []


@pytest.mark.parametrize("bad", ["sha256:" + "A" * 64, "sha256:abc", "md5:" + "0" * 64, "0" * 64])
async def test_a_malformed_digest_is_refused_naming_it(h: Harness, bad: str) -> None:
    response = await h.http.put(f"/v1/blobs/{bad}", content=b"x")
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["path", "digest"]


async def test_a_blob_past_the_cap_is_refused_and_nothing_is_stored(h: Harness) -> None:
    h.bbs.settings.blob_max_bytes = CHUNK_BYTES + 10
    data = payload(2 * CHUNK_BYTES)
    declared = await h.http.put(f"/v1/blobs/{digest_of(data)}", content=data)
    assert declared.status_code == 413 and "--blob-max-bytes" in declared.json()["detail"], declared.text

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: refused as it goes past the cap
        for start in range(0, len(data), 65536):
            yield data[start : start + 65536]

    streamed = await h.http.put(f"/v1/blobs/{digest_of(data)}", content=chunked())
    assert streamed.status_code == 413, streamed.text
    assert (await h.http.get("/v1/blobs")).json()["items"] == []
    assert stored_files(h) == []
    # Up to the cap, stored: the BBS's 1 MiB body cap for everything else does not apply here.
    fits = data[: CHUNK_BYTES + 10]
    assert (await upload(h, fits))[0] == 201


async def test_ranges_and_a_resumed_download(h: Harness) -> None:
    data = payload(2 * CHUNK_BYTES + 999, seed=3)
    digest = digest_of(data)
    assert (await upload(h, data))[0] == 201
    url = f"/v1/blobs/{digest}"
    for header, (start, end) in {
        "bytes=0-0": (0, 1),
        "bytes=10-19": (10, 20),
        f"bytes={CHUNK_BYTES - 5}-{CHUNK_BYTES + 5}": (CHUNK_BYTES - 5, CHUNK_BYTES + 6),  # across chunks
        f"bytes={CHUNK_BYTES + 3}-": (CHUNK_BYTES + 3, len(data)),
        "bytes=-100": (len(data) - 100, len(data)),
        f"bytes=5-{len(data) * 2}": (5, len(data)),  # past the end: up to the end
    }.items():
        response = await h.http.get(url, headers={"range": header})
        assert response.status_code == 206, (header, response.status_code)
        assert response.content == data[start:end], header
        assert response.headers["content-range"] == f"bytes {start}-{end - 1}/{len(data)}", header
    unsatisfiable = await h.http.get(url, headers={"range": f"bytes={len(data)}-"})
    assert unsatisfiable.status_code == 416
    assert unsatisfiable.headers["content-range"] == f"bytes */{len(data)}"
    # A download cut short, resumed where it stopped: the same bytes.
    first = (await h.http.get(url, headers={"range": f"bytes=0-{CHUNK_BYTES + 1000}"})).content
    rest = await h.http.get(url, headers={"range": f"bytes={len(first)}-"})
    assert first + rest.content == data
    # Several ranges are answered whole (a server may ignore Range).
    whole = await h.http.get(url, headers={"range": "bytes=0-1,5-6"})
    assert whole.status_code == 200 and whole.content == data


def test_byte_range_parsing() -> None:
    for ignored in (None, "items=0-1", "bytes=-", "bytes=0-1,5-6"):
        assert byte_range(ignored, 10) is None, ignored
    assert byte_range("bytes=2-", 10) == (2, 10) and byte_range("bytes=-3", 10) == (7, 10)
    assert byte_range("bytes=-30", 10) == (0, 10)
    for unsatisfiable in ("bytes=10-", "bytes=5-4", "bytes=-0"):
        with pytest.raises(Unsatisfiable):
            byte_range(unsatisfiable, 10)


async def test_the_metrics_count_uploads_and_downloads(h: Harness) -> None:
    data = payload(CHUNK_BYTES + 5)
    assert (await upload(h, data))[0] == 201
    for _ in range(3):
        await h.http.get(f"/v1/blobs/{digest_of(data)}")
    await h.http.get(f"/v1/blobs/{digest_of(data)}", headers={"range": "bytes=-5"})
    text = (await h.http.get("/metrics")).text
    samples = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
               if line.startswith("vendue_blob")}
    assert samples["vendue_blob_upload_bytes_total"] == len(data)
    assert samples["vendue_blob_downloads_total"] == 4
    assert samples["vendue_blob_download_bytes_total"] == 3 * len(data) + 5
    assert samples["vendue_blobs_stored_bytes"] == len(data)


def lrp(guid: str, *digests: str) -> dict:
    return {"process_guid": guid, "instances": 0, "command": ["true"],
            "artifacts": [{"digest": d, "dest": "app"} for d in digests]}


async def test_garbage_collection_removes_only_what_nothing_named_for_the_grace(h: Harness) -> None:
    a, b, c, d = (payload(1000 + n, seed=n) for n in range(4))
    for data in (a, b, c, d):
        assert (await upload(h, data))[0] == 201
    assert (await h.http.post("/v1/desired_lrps", json=lrp("web", digest_of(a)))).status_code == 201
    task = {"task_guid": "t1", "command": ["true"], "artifacts": [{"digest": digest_of(b)}]}
    assert (await h.http.post("/v1/tasks", json=task)).status_code == 201
    storage, now = h.bbs.blobs.storage, time.time()

    # Within the grace nothing goes; past it, the unreferenced ones do, never the referenced ones.
    assert await storage.collect(3600, now=now + 1800) == []
    removed = await storage.collect(3600, now=now + 7200)
    assert removed == sorted([digest_of(c), digest_of(d)])
    listed = {blob["digest"] for blob in (await h.http.get("/v1/blobs")).json()["items"]}
    assert listed == {digest_of(a), digest_of(b)}
    assert (await h.http.get(f"/v1/blobs/{digest_of(a)}")).content == a

    # Named until now: kept for the grace after the LRP is gone, then removed.
    assert (await h.http.delete("/v1/desired_lrps/web")).status_code == 204
    assert await storage.collect(3600, now=now + 7200 + 1800) == []
    assert await storage.collect(3600, now=now + 7200 + 3601) == [digest_of(a)]
    if not storage.on_postgres:
        assert len(stored_files(h)) == 1, "the removed blobs' files are gone"


async def test_a_referenced_blob_cannot_be_deleted(h: Harness) -> None:
    data = payload(100)
    assert (await upload(h, data))[0] == 201
    assert (await h.http.post("/v1/desired_lrps", json=lrp("web", digest_of(data)))).status_code == 201
    refused = await h.http.delete(f"/v1/blobs/{digest_of(data)}")
    assert refused.status_code == 409 and "desired LRP web" in refused.json()["detail"], refused.text
    assert (await h.http.head(f"/v1/blobs/{digest_of(data)}")).status_code == 200
    [listed] = (await h.http.get("/v1/blobs")).json()["items"]
    assert listed["referenced_by"] == ["desired LRP web"], listed
    assert (await h.http.delete("/v1/desired_lrps/web")).status_code == 204
    [listed] = (await h.http.get("/v1/blobs")).json()["items"]
    assert listed["referenced_by"] == [], "nothing names it once the LRP is gone"


async def test_an_upload_in_progress_survives_a_collection(h: Harness) -> None:
    data = payload(3 * CHUNK_BYTES, seed=9)
    half = asyncio.Event()
    go_on = asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        for n, start in enumerate(range(0, len(data), 65536)):
            if n == 24:
                half.set()
                await go_on.wait()
            yield data[start : start + 65536]

    put = asyncio.create_task(h.http.put(f"/v1/blobs/{digest_of(data)}", content=slow()))
    await asyncio.wait_for(half.wait(), 30)
    # With no grace at all, and as if a day had passed: nothing of the upload may go.
    assert await h.bbs.blobs.storage.collect(0, now=time.time() + 86400) == []
    go_on.set()
    response = await asyncio.wait_for(put, 60)
    assert response.status_code == 201, response.text
    assert (await h.http.get(f"/v1/blobs/{digest_of(data)}")).content == data


async def test_a_crash_leftover_is_never_served_and_is_collected(h: Harness) -> None:
    """What a crash between writing and recording leaves (a temporary file, a file with no row) is not a
    blob: a GET answers 404, and a collection past the grace removes it."""
    if h.bbs.blobs.storage.on_postgres:
        pytest.skip("on PostgreSQL an upload is one transaction: a crash leaves nothing")
    directory = Path(h.bbs.settings.data_dir) / "blobs"
    (directory / "tmp").mkdir(parents=True)
    data = b"half a blob"
    (directory / "tmp" / "dead.part").write_bytes(data)
    (directory / "0123456789abcdef0123456789abcdef").write_bytes(data)
    assert (await h.http.get(f"/v1/blobs/{digest_of(data)}")).status_code == 404
    assert await h.bbs.blobs.storage.collect(3600, now=time.time() + 1800) == []
    assert len(stored_files(h)) == 2, "within the grace, kept (it may be an upload of another process)"
    await h.bbs.blobs.storage.collect(3600, now=time.time() + 7200)
    assert stored_files(h) == []


async def test_memory_does_not_grow_with_the_blob(h: Harness) -> None:
    """A 200 MiB upload, generated a part at a time, then read back: the peak of Python allocations stays a
    few chunks, not the blob."""
    size = 200 * MIB
    part = os.urandom(64 * 1024)
    hasher = hashlib.sha256()
    for _ in range(size // len(part)):
        hasher.update(part)
    digest = "sha256:" + hasher.hexdigest()

    async def generated() -> AsyncIterator[bytes]:
        for _ in range(size // len(part)):
            yield part

    tracemalloc.start()
    try:
        response = await h.http.put(f"/v1/blobs/{digest}", content=generated())
        _, upload_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        info = await h.bbs.blobs.get(digest)
        read = 0
        async for piece in h.bbs.blobs.download(info, 0, info.size):
            read += len(piece)
        _, download_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert response.status_code == 201, response.text
    assert read == size
    print(f"\nblob {size // MIB} MiB: upload peak {upload_peak / MIB:.1f} MiB, "
          f"download peak {download_peak / MIB:.1f} MiB")
    assert upload_peak < 16 * MIB, f"upload peak {upload_peak / MIB:.1f} MiB for a {size // MIB} MiB blob"
    assert download_peak < 16 * MIB, f"download peak {download_peak / MIB:.1f} MiB for {size // MIB} MiB"


async def test_artifacts_travel_with_the_definition_and_a_bad_one_is_refused_naming_it(h: Harness) -> None:
    digest = digest_of(b"code")
    created = await h.http.post("/v1/desired_lrps", json=lrp("web", digest))
    assert created.status_code == 201, created.text
    got = (await h.http.get("/v1/desired_lrps/web")).json()
    assert got["artifacts"] == [{"digest": digest, "url": None, "dest": "app"}]
    assert got["source_blob"] == digest

    bad_lrp = {**lrp("api", digest), "artifacts": [{"digest": digest, "dest": "../up"}]}
    refused = await h.http.post("/v1/desired_lrps", json=bad_lrp)
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["body", "artifacts", 0, "dest"], refused.text
    bad_task = {"task_guid": "t1", "command": ["true"],
                "artifacts": [{"digest": digest, "url": "http://169.254.169.254/x"}]}
    refused = await h.http.post("/v1/tasks", json=bad_task)
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["body", "artifacts", 0, "url"], refused.text
    assert [d["process_guid"] for d in (await h.http.get("/v1/desired_lrps")).json()["items"]] == ["web"]
    assert (await h.http.get("/v1/tasks")).json()["items"] == []


async def test_only_the_replica_holding_the_convergence_lease_collects(h: Harness) -> None:
    h.bbs.settings.blob_gc_grace = 0.0
    data = payload(2000)
    assert (await upload(h, data))[0] == 201
    converger = h.bbs.uow.converger
    assert converger is not None and converger.token is None  # this replica does not lead
    collector = BlobCollector(h.bbs)
    await collector.run_once()
    assert collector.runs == 0 and (await h.http.head(f"/v1/blobs/{digest_of(data)}")).status_code == 200
    converger.token = 7  # as if it had taken the lease
    try:
        await collector.run_once()
    finally:
        converger.token = None
    assert collector.runs == 1 and (await h.http.head(f"/v1/blobs/{digest_of(data)}")).status_code == 404


async def test_concurrent_uploads_of_one_blob_store_it_once(h: Harness) -> None:
    data = payload(3 * CHUNK_BYTES + 1, seed=5)

    async def parts() -> AsyncIterator[bytes]:
        for start in range(0, len(data), 65536):
            await asyncio.sleep(0)  # interleave the uploads
            yield data[start : start + 65536]

    answers = await asyncio.gather(*(h.http.put(f"/v1/blobs/{digest_of(data)}", content=parts())
                                     for _ in range(3)))
    assert sorted(a.status_code for a in answers) == [200, 200, 201], [a.text for a in answers]
    assert (await h.http.get(f"/v1/blobs/{digest_of(data)}")).content == data
    assert [b["size"] for b in (await h.http.get("/v1/blobs")).json()["items"]] == [len(data)]
    if not h.bbs.blobs.storage.on_postgres:
        assert len(stored_files(h)) == 1, stored_files(h)
    else:
        async with h.bbs.store.engine.connect() as connection:
            chunks = (await connection.exec_driver_sql("SELECT count(*) FROM blob_chunks")).scalar()
        assert chunks == 4, "one copy of the chunks: the others' were dropped"
