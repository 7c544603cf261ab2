"""The host's artifact cache fetching from a real BBS's blob store over TLS, as a rep (its certificate's
role): one download for many concurrent starts, counted by the BBS itself."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from common.models.artifact import Artifact
from common.tls import TLSFiles, client_context, issue
from rep.artifact_cache import ArtifactCache, ArtifactError
from tests.support.artifact_server import digest
from tests.support.bbs_process import BBSProcess, certificates

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture
def bbs(tmp_path: Path) -> Iterator[BBSProcess]:
    certs = certificates(tmp_path)
    issue(certs, role="rep", name="rep-1", cells=["cell-1"])
    process = BBSProcess(tmp_path, "blobs", certs=certs)
    try:
        yield process
    finally:
        process.stop()


def downloads(bbs: BBSProcess) -> float:
    with bbs.client(timeout=10) as client:
        for line in client.get("/metrics").text.splitlines():
            if line.startswith("vendue_blob_downloads_total"):
                return float(line.split()[-1])
    return 0.0


async def test_twenty_starts_download_once_from_the_blob_store(bbs: BBSProcess, tmp_path: Path) -> None:
    data = os.urandom(3 << 20)  # not an archive: placed as one file
    with bbs.client(timeout=30) as admin:
        assert admin.put(f"/v1/blobs/{digest(data)}", content=data).status_code == 201
    art = Artifact(digest=digest(data), dest="bin/model")
    missing = Artifact(digest=digest(b"never uploaded"), dest="x")
    rep_tls = client_context(TLSFiles.in_dir(tmp_path / "certs", "rep-1"))
    async with httpx.AsyncClient(verify=rep_tls, timeout=10) as client:
        cache = ArtifactCache(tmp_path / "cache", 64 << 20, bbs_client=client, bbs_url=bbs.url)
        await asyncio.wait_for(asyncio.gather(
            *(cache.place(f"i{n}", [art], tmp_path / f"i{n}") for n in range(20))), 60)
        with pytest.raises(ArtifactError) as err:
            await cache.place("j", [missing], tmp_path / "j")
    assert downloads(bbs) == 1, "one download from the BBS for twenty starts"
    for n in range(20):
        assert (tmp_path / f"i{n}" / "bin" / "model").read_bytes() == data
    assert str(err.value) == f"artifact {missing.digest[:11]}… from the blob store: unreachable (HTTP 404)"
