"""The blob store's storage (docs/artifacts.md): blobs named by their SHA-256, visible to every BBS replica.

A blob's row in `blobs` (tables.py) is what makes it exist: it is written only after the bytes were
streamed in, hashed on the way, found to match the digest the caller named, and made durable. The bytes
themselves are in
- SQLite: a file `<data-dir>/blobs/<blob_id>`, written as `<data-dir>/blobs/tmp/<id>.part`, fsynced, and
  renamed into place under the write lock just before its row is inserted. A crash leaves at worst a
  temporary file or a file without a row, neither of which a GET serves; the collection removes them.
- PostgreSQL: `blob_chunks` rows of CHUNK_BYTES, inserted as the body arrives in one transaction of the
  upload's own (not under the BBS's write lock: an upload of a gigabyte must not stop heartbeats), which
  inserts the blob's row last and commits only when the digest matched. Another replica reads the same
  rows.

Uploads and downloads hold one chunk (CHUNK_BYTES) in memory at a time, whatever the blob's size.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from .store import Store
from .tables import blob_chunks, blobs, desired_lrps, tasks
from .transaction import in_chunks

CHUNK_BYTES = 1024 * 1024
# Uploads writing to PostgreSQL at once, per BBS process: each holds a pooled connection for its whole
# transaction, and the pool (database.PG_POOL_SIZE + PG_MAX_OVERFLOW: 20) also serves heartbeats and reads.
MAX_CONCURRENT_PG_UPLOADS = 4
TEMP_SUFFIX = ".part"


class DigestMismatch(Exception):
    """The body's SHA-256 is not the digest the upload named (nothing was stored)."""

    def __init__(self, named: str, computed: str) -> None:
        super().__init__(f"the body's digest is {computed}, not {named}: nothing stored")
        self.computed = computed


class BlobTooLarge(Exception):
    """The body went past the size cap (nothing was stored)."""

    def __init__(self, cap: int) -> None:
        super().__init__(f"blob larger than {cap} bytes (--blob-max-bytes)")
        self.cap = cap


class BlobReferenced(Exception):
    """A blob a desired LRP or task names cannot be deleted."""


@dataclass(frozen=True)
class BlobInfo:
    digest: str
    blob_id: str
    size: int
    created_at: float
    last_referenced_at: float

    def to_wire(self) -> dict[str, Any]:
        return {"digest": self.digest, "size": self.size, "created_at": self.created_at,
                "last_referenced_at": self.last_referenced_at}


def _info(row: sa.Row[Any]) -> BlobInfo:
    return BlobInfo(row.digest, row.blob_id, int(row.size), row.created_at, row.last_referenced_at)


def artifact_digests(definitions: Iterable[Any]) -> set[str]:
    """The store's digests named by these definitions' `artifacts` (URL artifacts are not the store's)."""
    found: set[str] = set()
    for artifacts in definitions:
        for artifact in artifacts or ():
            if isinstance(artifact, dict) and not artifact.get("url") and artifact.get("digest"):
                found.add(str(artifact["digest"]))
    return found


async def references(connection: AsyncConnection) -> dict[str, list[str]]:
    """Each stored digest some desired LRP or task names, and who names it ("desired LRP web", "task t1")."""
    named: dict[str, list[str]] = {}
    for table, key, kind in ((desired_lrps, desired_lrps.c.process_guid, "desired LRP"),
                             (tasks, tasks.c.task_guid, "task")):
        result = await connection.execute(sa.select(key, table.c.definition["artifacts"]))
        for guid, artifacts in result.all():
            for digest in artifact_digests([artifacts]):
                named.setdefault(digest, []).append(f"{kind} {guid}")
    return named


class _Chunker:
    """Cuts a stream into CHUNK_BYTES pieces (the last shorter), hashing and counting as it goes."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.size = 0
        self.hasher = hashlib.sha256()
        self._buffer = bytearray()

    async def pieces(self, body: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
        async for part in body:
            if not part:
                continue
            self.size += len(part)
            if self.size > self.cap:
                raise BlobTooLarge(self.cap)
            self._buffer += part
            while len(self._buffer) >= CHUNK_BYTES:
                piece = bytes(self._buffer[:CHUNK_BYTES])
                del self._buffer[:CHUNK_BYTES]
                await asyncio.to_thread(self.hasher.update, piece)  # releases the GIL for large inputs
                yield piece
        if self._buffer:
            piece = bytes(self._buffer)
            self._buffer.clear()
            self.hasher.update(piece)
            yield piece

    @property
    def digest(self) -> str:
        return "sha256:" + self.hasher.hexdigest()


class BlobStorage:
    """Blobs on the store's database (PostgreSQL: chunk rows) or beside it (SQLite: files in `directory`)."""

    def __init__(self, store: Store, directory: Path) -> None:
        self.store = store
        self.on_postgres = store.engine.dialect.name == "postgresql"
        self.directory = directory
        self.temp = directory / "tmp"
        self.uploading: set[Path] = set()  # temporary files being written by this process
        self._pg_uploads = asyncio.Semaphore(MAX_CONCURRENT_PG_UPLOADS)

    # --- writing ---------------------------------------------------------------------------------------

    async def put(self, digest: str, body: AsyncIterable[bytes], cap: int) -> tuple[BlobInfo, bool]:
        """Store the body as the blob `digest`: (its info, whether this upload stored it; False: it was
        there already, and is now counted as referenced). Raises DigestMismatch or BlobTooLarge, having
        stored nothing."""
        chunker = _Chunker(cap)
        if self.on_postgres:
            stored = await self._put_chunks(digest, chunker, body)
        else:
            stored = await self._put_file(digest, chunker, body)
        info = await self.info(digest)
        if info is None:  # only a collection with no grace at all, or a DELETE, can come in between
            raise RuntimeError(f"blob {digest} was removed right after it was stored")
        return info, stored

    async def _put_chunks(self, digest: str, chunker: _Chunker, body: AsyncIterable[bytes]) -> bool:
        blob_id = uuid.uuid4().hex
        try:
            async with self._pg_uploads, self.store.engine.connect() as connection, connection.begin():
                seq = 0
                async for piece in chunker.pieces(body):
                    await connection.execute(
                        blob_chunks.insert().values(blob_id=blob_id, seq=seq, data=piece))
                    seq += 1
                if chunker.digest != digest:
                    raise DigestMismatch(digest, chunker.digest)  # rolls the chunks back
                return await self._record(connection, digest, blob_id, chunker.size,
                                          discard=self._drop_chunks)
        except sa.exc.IntegrityError:
            return False  # another upload of the same digest committed first: it is stored

    async def _drop_chunks(self, connection: AsyncConnection, blob_id: str) -> None:
        await connection.execute(blob_chunks.delete().where(blob_chunks.c.blob_id == blob_id))

    async def _put_file(self, digest: str, chunker: _Chunker, body: AsyncIterable[bytes]) -> bool:
        await asyncio.to_thread(self.temp.mkdir, parents=True, exist_ok=True)
        temporary = self.temp / f"{uuid.uuid4().hex}{TEMP_SUFFIX}"
        self.uploading.add(temporary)
        try:
            handle: IO[bytes] = await asyncio.to_thread(open, temporary, "wb")
            try:
                async for piece in chunker.pieces(body):
                    await asyncio.to_thread(handle.write, piece)
                await asyncio.to_thread(_flush_and_sync, handle)
            finally:
                handle.close()
            if chunker.digest != digest:
                raise DigestMismatch(digest, chunker.digest)
            blob_id = uuid.uuid4().hex
            async with self.store.write() as tx:
                # Under the write lock, so a collection cannot run between the rename and the row. Stored
                # already: the temporary file is removed below.
                return await self._record(tx.connection, digest, blob_id, chunker.size, discard=_keep,
                                          before_insert=lambda: self._rename(temporary, blob_id))
        finally:
            self.uploading.discard(temporary)
            with contextlib.suppress(FileNotFoundError):
                await asyncio.to_thread(temporary.unlink)

    async def _rename(self, temporary: Path, blob_id: str) -> None:
        def rename() -> None:
            os.replace(temporary, self.directory / blob_id)
            _sync_directory(self.directory)

        await asyncio.to_thread(rename)

    async def _record(self, connection: AsyncConnection, digest: str, blob_id: str, size: int, *,
                      discard: Callable[[AsyncConnection, str], Awaitable[None]],
                      before_insert: Callable[[], Awaitable[None]] | None = None) -> bool:
        """The verified bytes under `blob_id` become the blob `digest`, unless it exists: then it is
        marked referenced now (so a collection racing this upload keeps it) and these bytes dropped."""
        now = time.time()
        touched = await connection.execute(
            blobs.update().where(blobs.c.digest == digest).values(last_referenced_at=now))
        if touched.rowcount:
            await discard(connection, blob_id)
            return False
        if before_insert is not None:
            await before_insert()
        await connection.execute(blobs.insert().values(
            digest=digest, blob_id=blob_id, size=size, created_at=now, last_referenced_at=now))
        return True

    # --- reading ---------------------------------------------------------------------------------------

    async def info(self, digest: str) -> BlobInfo | None:
        async with self.store.engine.connect() as connection:
            row = (await connection.execute(sa.select(blobs).where(blobs.c.digest == digest))).first()
        return None if row is None else _info(row)

    async def list_all(self) -> list[BlobInfo]:
        async with self.store.engine.connect() as connection:
            rows = (await connection.execute(sa.select(blobs).order_by(blobs.c.digest))).all()
        return [_info(row) for row in rows]

    async def references(self) -> dict[str, list[str]]:
        """Who names each stored digest now (`references`), read in one connection of its own."""
        async with self.store.engine.connect() as connection:
            return await references(connection)

    async def stored_bytes(self) -> int:
        async with self.store.engine.connect() as connection:
            total = (await connection.execute(
                sa.select(sa.func.coalesce(sa.func.sum(blobs.c.size), 0)))).scalar()
        return int(total or 0)

    async def read(self, info: BlobInfo, start: int, end: int) -> AsyncIterator[bytes]:
        """Bytes [start, end) of the blob, a chunk at a time."""
        if self.on_postgres:
            async for piece in self._read_chunks(info, start, end):
                yield piece
            return
        handle: IO[bytes] = await asyncio.to_thread(open, self.directory / info.blob_id, "rb")
        try:
            await asyncio.to_thread(handle.seek, start)
            left = end - start
            while left > 0:
                piece = await asyncio.to_thread(handle.read, min(CHUNK_BYTES, left))
                if not piece:
                    raise OSError(f"blob {info.digest} is shorter than its recorded size")
                left -= len(piece)
                yield piece
        finally:
            handle.close()

    async def _read_chunks(self, info: BlobInfo, start: int, end: int) -> AsyncIterator[bytes]:
        seq, skip = divmod(start, CHUNK_BYTES)
        position = start
        while position < end:
            # One short query per chunk: a slow client holds no pooled connection between chunks.
            async with self.store.engine.connect() as connection:
                data = (await connection.execute(sa.select(blob_chunks.c.data).where(
                    blob_chunks.c.blob_id == info.blob_id, blob_chunks.c.seq == seq))).scalar()
            if data is None:
                raise OSError(f"blob {info.digest} lost its chunk {seq} (deleted while read)")
            piece = bytes(data[skip : skip + (end - position)])
            skip = 0
            seq += 1
            position += len(piece)
            yield piece

    # --- removing --------------------------------------------------------------------------------------

    async def delete(self, digest: str) -> bool:
        """Remove the blob (False: there is none); BlobReferenced when a desired LRP or task names it."""
        async with self.store.write() as tx:
            named = (await references(tx.connection)).get(digest)
            if named:
                raise BlobReferenced(f"blob {digest} is named by {', '.join(sorted(named)[:5])}")
            gone = await self._delete_rows(tx.connection, [digest], cutoff=None)
        await self._unlink(gone.values())
        return bool(gone)

    async def collect(self, grace_s: float, now: float | None = None) -> list[str]:
        """One garbage collection: every blob a desired LRP or task names is marked referenced now; those
        nothing has named for `grace_s` are removed (their digests returned). In one write transaction, so a
        desire naming a blob cannot commit between the check and the removal. Uploads in progress are
        untouched: on PostgreSQL their rows are not committed, on SQLite their files are skipped by name."""
        now = time.time() if now is None else now
        cutoff = now - grace_s
        async with self.store.write() as tx:
            connection = tx.connection
            named = set(await references(connection))
            for condition in in_chunks(blobs.c.digest, named):
                await connection.execute(blobs.update().where(condition).values(last_referenced_at=now))
            stale = [row.digest for row in (await connection.execute(
                sa.select(blobs.c.digest).where(blobs.c.last_referenced_at < cutoff))).all()
                if row.digest not in named]
            gone = await self._delete_rows(connection, stale, cutoff=cutoff)
            orphans = [] if self.on_postgres else await self._orphan_files(connection, cutoff)
        await self._unlink(list(gone.values()) + orphans)
        return sorted(gone)

    async def _delete_rows(self, connection: AsyncConnection, digests: list[str],
                           cutoff: float | None) -> dict[str, str]:
        """Delete these blobs' rows (and chunks); with `cutoff`, only those still unreferenced since then
        (an upload of the same digest may have marked one meanwhile). {digest: blob_id} of those deleted."""
        gone: dict[str, str] = {}
        for condition in in_chunks(blobs.c.digest, digests):
            statement = blobs.delete().where(condition)
            if cutoff is not None:
                statement = statement.where(blobs.c.last_referenced_at < cutoff)
            result = await connection.execute(statement.returning(blobs.c.digest, blobs.c.blob_id))
            gone.update({row.digest: row.blob_id for row in result.all()})
        if self.on_postgres:
            for condition in in_chunks(blob_chunks.c.blob_id, gone.values()):
                await connection.execute(blob_chunks.delete().where(condition))
        return gone

    async def _orphan_files(self, connection: AsyncConnection, cutoff: float) -> list[str]:
        """Files no row names, older than `cutoff`: left by a crash between a rename and its row, or a
        temporary file of an upload that died with its process (never one this process is writing)."""
        known = {row.blob_id for row in (await connection.execute(sa.select(blobs.c.blob_id))).all()}

        def scan() -> list[str]:
            found: list[str] = []
            for directory, prefix in ((self.directory, ""), (self.temp, "tmp/")):
                if not directory.is_dir():
                    continue
                for entry in os.scandir(directory):
                    if not entry.is_file() or entry.name in known or Path(entry.path) in self.uploading:
                        continue
                    if entry.stat().st_mtime < cutoff:
                        found.append(prefix + entry.name)
            return found

        return await asyncio.to_thread(scan)

    async def _unlink(self, names: Iterable[str]) -> None:
        if self.on_postgres:
            return

        def unlink() -> None:
            for name in names:
                with contextlib.suppress(FileNotFoundError):
                    (self.directory / name).unlink()

        await asyncio.to_thread(unlink)


async def _keep(_: AsyncConnection, __: str) -> None:
    pass


def _flush_and_sync(handle: IO[bytes]) -> None:
    handle.flush()
    os.fsync(handle.fileno())


def _sync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable (the new name survives a power loss)."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
