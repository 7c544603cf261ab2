"""The blob store (docs/artifacts.md): upload (verified against its digest while it streams), download
(whole or a byte range), list, delete, and the garbage collection of blobs nothing names; metered as
`vendue_blob_*`. The bytes live where bbs/store/blobs.py puts them, seen by every replica."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from ..errors import Conflict, NotFound
from ..store.blobs import BlobInfo, BlobReferenced, BlobStorage
from ..unit_of_work import UnitOfWork

log = logging.getLogger("bbs.blobs")


class BlobMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.upload_bytes = Counter("vendue_blob_upload_bytes_total",
                                    "Bytes of blob uploads this BBS stored or found stored already",
                                    registry=registry)
        self.download_bytes = Counter("vendue_blob_download_bytes_total", "Blob bytes this BBS sent",
                                      registry=registry)
        self.downloads = Counter("vendue_blob_downloads_total",
                                 "Blob downloads this BBS began (a resumed one counts again)",
                                 registry=registry)
        self.stored_bytes = Gauge("vendue_blobs_stored_bytes", "Bytes of every blob in the store",
                                  registry=registry)


class Blobs:
    def __init__(self, uow: UnitOfWork) -> None:
        self.uow = uow
        self.storage = BlobStorage(uow.store, uow.settings.data_dir / "blobs")
        self.metrics = BlobMetrics(uow.metrics.registry)

    async def upload(self, digest: str, body: AsyncIterable[bytes]) -> tuple[dict[str, Any], bool]:
        """(the blob's description, whether this upload stored it). Raises store.blobs.DigestMismatch or
        BlobTooLarge with nothing stored."""
        info, stored = await self.storage.put(digest, body, self.uow.settings.blob_max_bytes)
        self.metrics.upload_bytes.inc(info.size)
        if stored:
            log.info("blob stored", extra={"data": {"digest": digest, "size": info.size}})
            await self.refresh_stored_bytes()
        return info.to_wire(), stored

    async def get(self, digest: str) -> BlobInfo:
        info = await self.storage.info(digest)
        if info is None:
            raise NotFound(f"no blob {digest}")
        return info

    async def download(self, info: BlobInfo, start: int, end: int) -> AsyncIterator[bytes]:
        """Bytes [start, end) of the blob, metered as they go out."""
        self.metrics.downloads.inc()
        async for piece in self.storage.read(info, start, end):
            self.metrics.download_bytes.inc(len(piece))
            yield piece

    async def list_all(self) -> list[dict[str, Any]]:
        """Every blob, with the desired LRPs and tasks that name it (`referenced_by`: what keeps it from
        the garbage collection, and what `DELETE` would be refused for)."""
        infos = await self.storage.list_all()
        named = await self.storage.references()
        return [{**info.to_wire(), "referenced_by": sorted(named.get(info.digest, []))} for info in infos]

    async def delete(self, digest: str) -> None:
        try:
            deleted = await self.storage.delete(digest)
        except BlobReferenced as exc:
            raise Conflict(str(exc)) from None
        if not deleted:
            raise NotFound(f"no blob {digest}")
        log.info("blob deleted", extra={"data": {"digest": digest}})
        await self.refresh_stored_bytes()

    async def collect(self) -> list[str]:
        """One garbage collection (run by the replica holding the convergence lease: blob_collector.py)."""
        removed = await self.storage.collect(self.uow.settings.blob_gc_grace)
        if removed:
            log.info("blobs collected", extra={"data": {"digests": removed[:20], "count": len(removed)}})
        await self.refresh_stored_bytes()
        return removed

    async def refresh_stored_bytes(self) -> None:
        self.metrics.stored_bytes.set(await self.storage.stored_bytes())
