"""The host's artifact cache: one content-addressed store for every cell of a rep host (docs/artifacts.md,
"The cell's cache").

A blob is downloaded at most once per host however many instances start at once (one in-flight fetch per
digest that every starter awaits), streamed to `tmp/` under a name of its own, verified against its
SHA-256 and only then renamed into `blobs/<hex>`: a rep killed mid-download leaves only a temporary file,
never trusted and swept at the next start. An archive (tar, tar.gz, zip, told by its magic bytes) is
extracted once, refusing absolute paths, `..`, device files and links that leave the tree; anything else is
kept as one file. The cached copy is read-only and root's; an instance gets hard links to it, or, when its
directory is a filesystem of its own (where a link cannot reach), a read-only bind mount of it: it can read
but never change what other instances share. Blobs no running instance pins are evicted, least recently
used first, past the size cap.

The index keeps the blobs in the order they were last used (least recently first), so that each cell's
state can list the most recently used ones (`recent`) at every auction for the cost of the list.
"""

from __future__ import annotations

import asyncio
import ctypes
import hashlib
import os
import secrets
import shutil
import ssl
import stat
import tarfile
import time
import zipfile
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO
from urllib.parse import urljoin, urlsplit

import httpx

from common.models.artifact import Artifact
from common.urls import resolved_refusal

CHUNK = 1 << 20
TAR_MAGIC_OFFSET = 257
TMP, BLOBS = "tmp", "blobs"
READ_ONLY_FILE, READ_ONLY_EXEC, READ_ONLY_DIR = 0o444, 0o555, 0o555
MAX_REDIRECTS = 5
RESUMES = 3  # a download cut off resumes (Range) this many times before the instance crashes
BOUND = ".artifacts"  # in an instance's directory: where artifacts placed at "." are mounted
# mount(2) flags
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND = 1, 2, 4, 32, 4096
MNT_DETACH = 2


class ArtifactError(Exception):
    """Why an artifact could not be given to an instance; the message names it."""


def describe(artifact: Artifact) -> str:
    """`artifact sha256:ab12… from https://…` (the URL without its query: a presigned URL's signature is a
    credential) or `… from the blob store`."""
    short = artifact.digest[: len("sha256:") + 4] + "…"
    if artifact.url is None:
        return f"artifact {short} from the blob store"
    parts = urlsplit(artifact.url)
    port = f":{parts.port}" if parts.port else ""
    return f"artifact {short} from {parts.scheme}://{parts.hostname}{port}{parts.path}"


@dataclass
class _Entry:
    size: int
    used: float


def tree_size(path: Path) -> int:
    if not path.is_dir():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if not p.is_dir())


def system_trust_client(timeout: float = 30.0, ca_file: Path | None = None) -> httpx.AsyncClient:
    """The client for a user's artifact server: the system's trust store, as any other download tool, and
    the operator's own CA (`--artifact-ca`) beside it. Redirects are followed by `_download`, which checks
    each one."""
    context = ssl.create_default_context()
    if ca_file is not None:
        context.load_verify_locations(cafile=str(ca_file))
    return httpx.AsyncClient(verify=context, timeout=timeout, follow_redirects=False)


@dataclass
class _Progress:
    sha: Any  # hashlib's object; its class is private
    size: int = 0


@dataclass
class CacheCounters:
    """For the rep's metrics (`vendue_artifact_cache_*`)."""

    hits: int = 0  # an artifact placed from what the host held
    misses: int = 0  # an artifact that had to be fetched (or awaited a fetch in flight)
    downloaded_bytes: int = 0
    evictions: int = 0


class ArtifactCache:
    def __init__(self, root: Path, capacity_bytes: int, *, bbs_client: httpx.AsyncClient | None = None,
                 bbs_url: str | None = None, url_client: httpx.AsyncClient | None = None,
                 url_ca: Path | None = None) -> None:
        self.root = Path(root)
        self.capacity = capacity_bytes
        self._bbs_client, self._bbs_url = bbs_client, (bbs_url or "").rstrip("/")
        self._url_client, self._url_ca = url_client, url_ca
        self._owns_url_client = url_client is None
        self._entries: dict[str, _Entry] = {}  # least recently used first (`_touch` moves one to the end)
        self._pins: dict[str, set[str]] = {}
        self._inflight: dict[str, asyncio.Task[None]] = {}
        self.downloads = 0  # fetches begun, for tests and metrics
        self.counters = CacheCounters()
        self._open()

    # -- state on disk --------------------------------------------------------------------------------

    def _open(self) -> None:
        """Sweep what a killed rep left in tmp/ (never trusted) and index the verified blobs."""
        for p in (self.root / TMP).rglob("*") if (self.root / TMP).is_dir() else ():
            if p.is_dir() and not p.is_symlink():
                os.chmod(p, 0o755)  # read-only trees of an extraction or eviction cut short
        shutil.rmtree(self.root / TMP, ignore_errors=True)
        (self.root / TMP).mkdir(parents=True, exist_ok=True)
        (self.root / BLOBS).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        os.chmod(self.root / BLOBS, 0o755)
        os.chmod(self.root / TMP, 0o700)
        found = [("sha256:" + p.name, _Entry(tree_size(p), p.lstat().st_mtime))
                 for p in (self.root / BLOBS).iterdir()]
        for digest, entry in sorted(found, key=lambda f: f[1].used):  # the latest settled: the most recent
            self._entries[digest] = entry

    def held(self) -> list[str]:
        """The digests this host holds, sorted."""
        return sorted(self._entries)

    def recent(self, limit: int) -> list[str]:
        """Up to `limit` digests this host holds, the most recently used first: what a cell's state lists
        for the auction's cache term."""
        return list(islice(reversed(self._entries), limit))

    def _touch(self, digest: str, entry: _Entry) -> None:
        """`digest` used now: the most recently used."""
        self._entries.pop(digest, None)
        entry.used = time.time()
        self._entries[digest] = entry

    def used_bytes(self) -> int:
        return sum(e.size for e in self._entries.values())

    def path_of(self, digest: str) -> Path:
        return self.root / BLOBS / digest.removeprefix("sha256:")

    # -- pins -----------------------------------------------------------------------------------------

    def pin(self, instance: str, digests: Iterable[str]) -> None:
        for digest in digests:
            self._pins.setdefault(digest, set()).add(instance)

    def unpin(self, instance: str) -> None:
        for digest in list(self._pins):
            self._pins[digest].discard(instance)
            if not self._pins[digest]:
                del self._pins[digest]

    # -- giving artifacts to an instance --------------------------------------------------------------

    async def place(self, instance: str, artifacts: Sequence[Artifact], directory: Path,
                    owner: tuple[int, int] | None = None, *, bind: bool = False) -> None:
        """Fetch (once per host) every artifact and put it at its dest in `directory`; pins them for
        `instance` until `unpin`. Directories made there are `owner`'s (uid, gid), so the instance may add
        files beside the read-only ones. `bind` (root, a directory that is a filesystem of its own):
        read-only bind mounts instead of links, undone by `unbind`. Raises ArtifactError naming it."""
        self.pin(instance, (a.digest for a in artifacts))
        for artifact in artifacts:
            await self.ensure(artifact)
            give = self._bind if bind else self._give
            try:
                await asyncio.to_thread(give, artifact, Path(directory), owner)
            except OSError as exc:
                raise ArtifactError(f"{describe(artifact)}: cannot place at {artifact.dest} ({exc})") from exc

    async def ensure(self, artifact: Artifact) -> Path:
        """The cached copy of `artifact`, fetched first unless held. The fetch is a task of its own that
        every starter of the digest awaits: one starter stopped meanwhile does not cancel the others'."""
        return await self._held_or_made(artifact.digest, lambda: self._fetch(artifact), "fetch")

    async def ensure_tree(self, digest: str, name: str, produce: Callable[[Path], Awaitable[None]]) -> Path:
        """The cached tree of `digest` (an image's unpacked root filesystem, rep/image_store.py), made first
        by `produce(tmp_dir)` unless held: one producer per digest that every starter awaits, indexed,
        pinned and evicted as every other blob. `produce` verifies what it writes; it raises ArtifactError."""
        return await self._held_or_made(digest, lambda: self._produce(digest, name, produce), "tree")

    async def _held_or_made(self, digest: str, make: Callable[[], Coroutine[Any, Any, None]],
                            what: str) -> Path:
        """The cached path of `digest`, made by `make()` unless held: one flight per digest for all."""
        entry = self._entries.get(digest)
        if entry is not None:
            self._touch(digest, entry)
            self.counters.hits += 1
            return self.path_of(digest)
        self.counters.misses += 1
        flight = self._inflight.get(digest)
        if flight is None:
            flight = asyncio.create_task(make(), name=f"{what}-{digest[7:19]}")
            self._inflight[digest] = flight
            flight.add_done_callback(lambda done: self._landed(digest, done))
        await asyncio.shield(flight)
        return self.path_of(digest)

    async def _produce(self, digest: str, name: str, produce: Callable[[Path], Awaitable[None]]) -> None:
        work = self.root / TMP / f"{digest.removeprefix('sha256:')}.{secrets.token_hex(4)}.tree"
        work.mkdir(mode=0o700)
        self.downloads += 1
        try:
            await produce(work)
            tree = work / "tree"
            size = await asyncio.to_thread(tree_size, tree)
            self._make_room(size, name, keep=digest)
            os.chmod(tree, 0o755)
            os.replace(tree, self.path_of(digest))
            self._touch(digest, _Entry(size, 0.0))
        finally:
            await asyncio.to_thread(shutil.rmtree, work, True)

    def _landed(self, digest: str, flight: asyncio.Task[None]) -> None:
        self._inflight.pop(digest, None)
        if not flight.cancelled():
            flight.exception()  # retrieved here too: every starter may have gone

    async def _fetch(self, artifact: Artifact) -> None:
        name = describe(artifact)
        hexd = artifact.digest.removeprefix("sha256:")
        part = self.root / TMP / f"{hexd}.{secrets.token_hex(4)}.part"
        self.downloads += 1
        try:
            await self._download(artifact, part)
            size = await asyncio.to_thread(self._settle, artifact, part)
            # indexed here, on the loop: a cell's state reads the index there while the thread settles
            self._touch(artifact.digest, _Entry(size, 0.0))
            try:
                self._make_room(0, name, keep=artifact.digest)
            except ArtifactError:
                self.evict(artifact.digest)
                raise
        finally:
            part.unlink(missing_ok=True)

    async def _download(self, artifact: Artifact, part: Path) -> int:
        """Stream the bytes to `part`, hashing them; a transfer cut off resumes where it stopped (`Range`,
        when the server answers 206 from there; else from the start), up to RESUMES times, while each attempt
        brings bytes."""
        name = describe(artifact)
        if artifact.url is None:
            if self._bbs_client is None:
                raise ArtifactError(f"{name}: unreachable (no blob store configured)")
            client, url = self._bbs_client, f"{self._bbs_url}/v1/blobs/{artifact.digest}"
        else:
            if self._url_client is None:
                self._url_client = system_trust_client(ca_file=self._url_ca)
            client, url = self._url_client, artifact.url
        got = _Progress(hashlib.sha256())
        with open(part, "wb") as out:
            for attempt in range(RESUMES + 1):
                before = got.size
                try:
                    await self._transfer(client, url, artifact, out, got)
                    break
                except httpx.TransportError as exc:
                    # Cut off after some bytes: resume. Nothing this time (refused, timed out): give up.
                    if attempt == RESUMES or got.size == before:
                        raise ArtifactError(f"{name}: unreachable ({_why(exc, artifact)})") from exc
                except httpx.HTTPError as exc:
                    raise ArtifactError(f"{name}: unreachable ({_why(exc, artifact)})") from exc
            out.flush()
            await asyncio.to_thread(os.fsync, out.fileno())
        hexd = got.sha.hexdigest()
        if "sha256:" + hexd != artifact.digest:
            raise ArtifactError(f"{name}: digest mismatch (got sha256:{hexd[:12]}…)")
        return got.size

    async def _transfer(self, client: httpx.AsyncClient, url: str, artifact: Artifact, out: BinaryIO,
                        got: _Progress) -> None:
        """One GET (following redirects, each checked as a desire's URL is: never to a cloud metadata or
        link-local address), from byte `got.size` on when there are some. On a transport error, `out` and
        `got` are left as far as they got, for the next attempt to resume from (see `_download`)."""
        name = describe(artifact)
        headers = {"Range": f"bytes={got.size}-"} if got.size else {}
        for _ in range(MAX_REDIRECTS + 1):
            async with client.stream("GET", url, headers=headers) as response:
                if response.is_redirect and artifact.url is not None:
                    target = urljoin(url, response.headers.get("location", ""))
                    scheme = urlsplit(target).scheme
                    if scheme not in ("http", "https"):
                        raise ArtifactError(f"{name}: unreachable (a redirect to a {scheme!r} URL)")
                    refusal = await resolved_refusal(target)
                    if refusal is not None:
                        raise ArtifactError(f"{name}: unreachable (a redirect refused: {refusal})")
                    url = target
                    continue
                if got.size and response.status_code == 206 and response.headers.get(
                        "content-range", "").startswith(f"bytes {got.size}-"):
                    pass  # resumed where it stopped
                elif response.status_code == 200:
                    got.sha, got.size = hashlib.sha256(), 0  # the whole again
                    out.seek(0)
                    out.truncate()
                    announced = response.headers.get("content-length")
                    if announced is not None and announced.isdigit():
                        self._make_room(int(announced), name)
                else:
                    raise ArtifactError(f"{name}: unreachable (HTTP {response.status_code})")
                async for chunk in response.aiter_bytes(CHUNK):
                    got.sha.update(chunk)
                    got.size += len(chunk)
                    self.counters.downloaded_bytes += len(chunk)
                    if got.size > self.capacity:
                        raise ArtifactError(f"{name}: cache full (over {self.capacity} bytes)")
                    out.write(chunk)
                return
        raise ArtifactError(f"{name}: unreachable (more than {MAX_REDIRECTS} redirects)")

    def _settle(self, artifact: Artifact, part: Path) -> int:
        """The verified bytes into blobs/: an archive extracted (to tmp/, then renamed), else the file;
        returns their size there."""
        name = describe(artifact)
        final = self.path_of(artifact.digest)
        kind = archive_kind(part)
        if kind is None:
            os.chmod(part, READ_ONLY_FILE)
            os.replace(part, final)
        else:
            tree = part.with_suffix(".tree")
            try:
                extract(part, tree, kind)
            except (ArtifactError, tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
                shutil.rmtree(tree, ignore_errors=True)
                raise ArtifactError(f"{name}: refused archive ({exc})") from exc
            make_read_only(tree)
            os.chmod(tree, 0o755)  # moving a directory to another parent rewrites its '..': not as root
            os.replace(tree, final)
            os.chmod(final, READ_ONLY_DIR)
        fd = os.open(self.root / BLOBS, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return tree_size(final)

    def _make_room(self, wanted: int, name: str, keep: str | None = None) -> None:
        """Evict blobs no instance pins, least recently used first, until `wanted` more bytes fit."""
        while self.used_bytes() + wanted > self.capacity:
            victims = [(e.used, d) for d, e in self._entries.items() if not self._pins.get(d) and d != keep]
            if not victims:
                raise ArtifactError(f"{name}: cache full ({self.used_bytes() + wanted} bytes wanted, "
                                    f"{self.capacity} allowed, the rest held by running instances)")
            self.evict(min(victims)[1])

    def evict(self, digest: str) -> None:
        path = self.path_of(digest)
        if self._entries.pop(digest, None) is not None:
            self.counters.evictions += 1
        if not path.is_dir():
            path.unlink(missing_ok=True)
            return
        # Out of blobs/ in one rename first: a rep killed while removing it leaves it in tmp/, swept at
        # the next start, never half a tree that start would trust.
        os.chmod(path, 0o755)
        gone = self.root / TMP / f"{path.name}.{secrets.token_hex(4)}.evicted"
        os.replace(path, gone)
        for p in gone.rglob("*"):
            if p.is_dir() and not p.is_symlink():
                os.chmod(p, 0o755)
        shutil.rmtree(gone, ignore_errors=True)

    def _give(self, artifact: Artifact, directory: Path, owner: tuple[int, int] | None) -> None:
        """Hard links to the cached copy at dest when the instance runs as a uid of its own (`owner`): the
        files are read-only and root's, so it cannot change them. Without one it runs as the rep's own uid,
        which could write through a link: it gets a copy, as it does across filesystems."""
        copy = owner is None
        source = self.path_of(artifact.digest)
        target = directory / artifact.dest
        if not source.is_dir():
            if artifact.dest == ".":
                leaf = PurePosixPath(urlsplit(artifact.url).path).name if artifact.url else ""
                target = directory / (leaf or artifact.digest.removeprefix("sha256:"))
            _make_dirs(target.parent, directory, owner)
            _link_or_copy(source, target, copy)
            return
        _make_dirs(target, directory, owner)
        for dirpath, dirnames, filenames in os.walk(source):
            rel = Path(dirpath).relative_to(source)
            for d in dirnames:
                if (Path(dirpath) / d).is_symlink():  # inside the tree (the extraction checked): as is
                    (target / rel / d).unlink(missing_ok=True)
                    os.symlink(os.readlink(Path(dirpath) / d), target / rel / d)
                else:
                    _make_dirs(target / rel / d, directory, owner)
            for f in filenames:
                src, dst = Path(dirpath) / f, target / rel / f
                if src.is_symlink():
                    dst.unlink(missing_ok=True)
                    os.symlink(os.readlink(src), dst)
                else:
                    _link_or_copy(src, dst, copy)


    def _bind(self, artifact: Artifact, directory: Path, owner: tuple[int, int] | None) -> None:
        """A read-only bind mount of the cached copy: no bytes copied and none counted against the instance's
        own filesystem, where hard links cannot reach. A tree at dest `.` is mounted at
        `.artifacts/<hex>` with a relative symbolic link per top-level entry (one mount, not one per
        entry); elsewhere the tree, or the single file, is mounted at dest itself."""
        source = self.path_of(artifact.digest)
        target = directory / artifact.dest
        if not source.is_dir():
            if artifact.dest == ".":
                leaf = PurePosixPath(urlsplit(artifact.url).path).name if artifact.url else ""
                target = directory / (leaf or artifact.digest.removeprefix("sha256:"))
            _make_dirs(target.parent, directory, owner)
            target.unlink(missing_ok=True)
            target.touch(mode=0o444)
            bind_read_only(source, target)
            return
        if artifact.dest != ".":
            _make_dirs(target, directory, owner)
            bind_read_only(source, target)
            return
        mounted = directory / BOUND / source.name[:16]
        _make_dirs(mounted, directory, None)  # root's: the instance cannot swap what its links point at
        bind_read_only(source, mounted)
        for entry in os.listdir(source):
            link = directory / entry
            if link.is_dir() and not link.is_symlink():
                shutil.rmtree(link)
            else:
                link.unlink(missing_ok=True)
            os.symlink(f"{BOUND}/{mounted.name}/{entry}", link)
            if owner is not None:
                os.lchown(link, *owner)


def placed_paths(artifact: Artifact, cached: Path) -> list[str]:
    """Where `place` puts `artifact` (whose cached copy is `cached`), relative to the instance's directory:
    its dest, or at dest `.` each top-level entry of its tree (the file's own name for a single file). For
    whoever shows the placed artifacts elsewhere (a container's bind mounts, rep/container_executor.py)."""
    if artifact.dest != ".":
        return [artifact.dest]
    if not cached.is_dir():
        leaf = PurePosixPath(urlsplit(artifact.url).path).name if artifact.url else ""
        return [leaf or artifact.digest.removeprefix("sha256:")]
    return sorted(os.listdir(cached))


def _mount(source: str | None, target: Path, flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    src = source.encode() if source is not None else None
    if libc.mount(src, str(target).encode(), None, ctypes.c_ulong(flags), None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def bind_read_only(source: Path, target: Path) -> None:
    """Mount `source` on `target` read-only, nosuid, nodev (a bind, then its remount: a bind alone ignores
    the flags)."""
    _mount(str(source), target, MS_BIND)
    try:
        _mount(None, target, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    except OSError:
        unmount(target)
        raise


def unmount(target: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(str(target).encode(), 0) != 0 and libc.umount2(str(target).encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"umount {target}: {os.strerror(err)}")


def unbind(directory: Path) -> list[Path]:
    """Undo `_bind` for an instance's directory: every mount strictly below it, deepest first (its own
    filesystem, if any, is the directory itself and stays). What a killed rep left is swept at its next
    start with the rest (rep/disk_quota.py sweep_loop_disks)."""
    from .disk_quota import mounts_under  # here: disk_quota is the executor's, not the cache's

    found = mounts_under(directory)
    for point in found:
        unmount(point)
    return found


def _why(exc: httpx.HTTPError, artifact: Artifact) -> str:
    # An httpx error may quote the URL, whose query can be a presigned signature: never in a reason.
    why = str(exc).replace(artifact.url, "<url>") if artifact.url else str(exc)
    return f"{type(exc).__name__}: {why}"


def _make_dirs(path: Path, top: Path, owner: tuple[int, int] | None) -> None:
    missing = [p for p in [path, *path.parents] if p != top and top in p.parents and not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    if owner is not None:
        for p in missing:
            os.chown(p, *owner)


def _link_or_copy(src: Path, dst: Path, copy: bool) -> None:
    dst.unlink(missing_ok=True)
    if not copy:
        try:
            os.link(src, dst)
            return
        except OSError:  # another filesystem (an instance's own disk image): a copy
            pass
    shutil.copyfile(src, dst)
    os.chmod(dst, stat.S_IMODE(src.stat().st_mode) | 0o200)


# -- archives ---------------------------------------------------------------------------------------------


def archive_kind(path: Path) -> str | None:
    with open(path, "rb") as f:
        head = f.read(TAR_MAGIC_OFFSET + 8)
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if head[:2] == b"\x1f\x8b":
        try:
            with tarfile.open(path, "r:gz") as t:
                t.next()
            return "tar"
        except (tarfile.TarError, OSError, EOFError):
            return None
    if head[TAR_MAGIC_OFFSET:TAR_MAGIC_OFFSET + 5] == b"ustar":
        return "tar"
    return None


def _check_name(name: str) -> None:
    path = PurePosixPath(name)
    if path.is_absolute() or name.startswith("/"):
        raise ArtifactError(f"{name!r}: an absolute path")
    if ".." in path.parts:
        raise ArtifactError(f"{name!r}: holds '..'")


def _inside(tree: Path, link_dir: PurePosixPath, target: str) -> bool:
    if target.startswith("/"):
        return False
    parts: list[str] = []
    for part in (link_dir / target).parts:
        if part == "..":
            if not parts:
                return False
            parts.pop()
        elif part != ".":
            parts.append(part)
    return True


def extract(archive: Path, tree: Path, kind: str) -> None:
    tree.mkdir()
    if kind == "tar":
        with tarfile.open(archive, "r:*") as t:
            for member in t:
                _check_name(member.name)
            # The 'data' filter refuses device files, FIFOs and links that leave the tree.
            t.extractall(tree, filter="data")
        return
    with zipfile.ZipFile(archive) as z:
        for info in z.infolist():
            _check_name(info.filename)
            mode = info.external_attr >> 16
            if stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                raise ArtifactError(f"{info.filename!r}: a special file")
        for info in z.infolist():
            mode = info.external_attr >> 16
            dest = tree / info.filename
            if stat.S_ISLNK(mode):
                target = z.read(info).decode()
                if not _inside(tree, PurePosixPath(info.filename).parent, target):
                    raise ArtifactError(f"{info.filename!r}: a link out of the tree ({target!r})")
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(target, dest)
                continue
            z.extract(info, tree)
            if stat.S_ISREG(mode) and mode & 0o111:
                os.chmod(dest, 0o755)


def make_read_only(tree: Path) -> None:
    for dirpath, _dirs, filenames in os.walk(tree, topdown=False):
        for f in filenames:
            p = Path(dirpath) / f
            if p.is_symlink():
                continue
            mode = p.stat().st_mode
            os.chmod(p, READ_ONLY_EXEC if mode & 0o100 else READ_ONLY_FILE)
        os.chmod(dirpath, READ_ONLY_DIR)
