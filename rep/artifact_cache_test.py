"""The host's artifact cache against a real HTTP server in this process (rep/artifact_cache.py)."""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from common.models.artifact import Artifact
from rep.artifact_cache import ArtifactCache, ArtifactError
from tests.support.artifact_server import Files, digest, serve_files
from tests.support.polling import eventually


@pytest.fixture
def files() -> Iterator[tuple[Files, str]]:
    with serve_files() as state:
        yield state, state.base


@pytest.fixture
async def client() -> Iterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as c:
        yield c  # type: ignore[misc]


def tar_of(entries: list[tarfile.TarInfo], contents: dict[str, bytes] | None = None,
           gz: bool = False) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w") as t:
        for info in entries:
            data = (contents or {}).get(info.name)
            if data is not None:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
            else:
                t.addfile(info)
    return buf.getvalue()


def file_info(name: str, mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info


def app_tar(gz: bool = True) -> bytes:
    return tar_of([file_info("run.sh", 0o755), file_info("lib/data.txt")],
                  {"run.sh": b"#!/bin/sh\necho hi\n", "lib/data.txt": b"data"}, gz=gz)


async def test_twenty_concurrent_starts_download_once(tmp_path: Path, files: tuple[Files, str],
                                                      client: httpx.AsyncClient) -> None:
    state, base = files
    data = app_tar()
    art = Artifact(digest=digest(data), url=state.add("/app.tgz", data), dest="app")
    cache = ArtifactCache(tmp_path / "cache", 10 << 20, url_client=client)
    state.gate.clear()  # every start is waiting before the one download answers
    starts = [asyncio.create_task(cache.place(f"i{n}", [art], tmp_path / f"i{n}")) for n in range(20)]
    await asyncio.sleep(0)
    state.gate.set()
    await asyncio.wait_for(asyncio.gather(*starts), 30)
    assert state.gets == {"/app.tgz": 1}, f"expected one download, saw {state.gets}"
    assert cache.downloads == 1
    for n in range(20):
        assert (tmp_path / f"i{n}" / "app" / "run.sh").read_bytes() == b"#!/bin/sh\necho hi\n"
        assert os.access(tmp_path / f"i{n}" / "app" / "run.sh", os.X_OK)
        assert (tmp_path / f"i{n}" / "app" / "lib" / "data.txt").read_bytes() == b"data"
    assert cache.held() == [art.digest]


async def test_plain_tar_zip_and_single_file(tmp_path: Path, files: tuple[Files, str],
                                             client: httpx.AsyncClient) -> None:
    state, base = files
    zbuf = io.BytesIO()
    with zipfile.ZipFile(zbuf, "w") as z:
        z.writestr("pkg/a.txt", "A")
    blobs = {"/a.tar": app_tar(gz=False), "/b.zip": zbuf.getvalue(), "/model.bin": b"\x00weights"}
    arts = [Artifact(digest=digest(d), url=state.add(p, d), dest=d_)
            for (p, d), d_ in zip(blobs.items(), ["t", "z", "."], strict=True)]
    cache = ArtifactCache(tmp_path / "cache", 10 << 20, url_client=client)
    await cache.place("i", arts, tmp_path / "inst")
    assert (tmp_path / "inst" / "t" / "run.sh").exists()
    assert (tmp_path / "inst" / "z" / "pkg" / "a.txt").read_text() == "A"
    assert (tmp_path / "inst" / "model.bin").read_bytes() == b"\x00weights"


async def test_digest_mismatch_names_the_artifact(tmp_path: Path, files: tuple[Files, str],
                                                  client: httpx.AsyncClient) -> None:
    state, base = files
    art = Artifact(digest=digest(b"what was promised"), url=state.add("/x.bin", b"something else"))
    cache = ArtifactCache(tmp_path / "cache", 10 << 20, url_client=client)
    with pytest.raises(ArtifactError) as err:
        await cache.place("i", [art], tmp_path / "inst")
    assert str(err.value).startswith(f"artifact {art.digest[:11]}… from {base}/x.bin: digest mismatch")
    assert cache.held() == [] and list((tmp_path / "cache" / "tmp").iterdir()) == []
    assert not (tmp_path / "inst" / "x.bin").exists()


async def test_unreachable_url_names_the_artifact(tmp_path: Path, client: httpx.AsyncClient) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    art = Artifact(digest=digest(b"x"), url=f"http://127.0.0.1:{port}/app.tgz?sig=secret")
    cache = ArtifactCache(tmp_path / "cache", 10 << 20, url_client=client)
    with pytest.raises(ArtifactError) as err:
        await cache.place("i", [art], tmp_path / "inst")
    message = str(err.value)
    where = f"http://127.0.0.1:{port}/app.tgz"
    assert message.startswith(f"artifact {art.digest[:11]}… from {where}: unreachable (")
    assert "secret" not in message


def hostile_archives() -> dict[str, bytes]:
    link_out = file_info("evil")
    link_out.type, link_out.linkname = tarfile.SYMTYPE, "../../outside"
    abs_link = file_info("abs")
    abs_link.type, abs_link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    hard_out = file_info("hard")
    hard_out.type, hard_out.linkname = tarfile.LNKTYPE, "../outside"
    device = file_info("null")
    device.type, device.devmajor, device.devminor = tarfile.CHRTYPE, 1, 3
    fifo = file_info("pipe")
    fifo.type = tarfile.FIFOTYPE
    zdot, zabs, zlink = io.BytesIO(), io.BytesIO(), io.BytesIO()
    with zipfile.ZipFile(zdot, "w") as z:
        z.writestr("../x", "x")
    with zipfile.ZipFile(zabs, "w") as z:
        z.writestr("/etc/x", "x")
    with zipfile.ZipFile(zlink, "w") as z:
        info = zipfile.ZipInfo("evil")
        info.external_attr = (0o120777 << 16)
        z.writestr(info, "../../outside")
    zdev, zabslink = io.BytesIO(), io.BytesIO()
    with zipfile.ZipFile(zdev, "w") as z:
        info = zipfile.ZipInfo("null")
        info.external_attr = (0o020666 << 16)  # a character device
        z.writestr(info, "")
    with zipfile.ZipFile(zabslink, "w") as z:
        info = zipfile.ZipInfo("deep/evil")
        info.external_attr = (0o120777 << 16)
        z.writestr(info, "/etc/passwd")
    return {
        "tar-dotdot": tar_of([file_info("../x")], {"../x": b"x"}),
        "tar-nested-dotdot": tar_of([file_info("a/../../x")], {"a/../../x": b"x"}),
        "zip-device": zdev.getvalue(),
        "zip-absolute-symlink": zabslink.getvalue(),
        "tar-absolute": tar_of([file_info("/etc/x")], {"/etc/x": b"x"}, gz=True),
        "tar-symlink-out": tar_of([link_out]),
        "tar-absolute-symlink": tar_of([abs_link]),
        "tar-hardlink-out": tar_of([hard_out]),
        "tar-device": tar_of([device]),
        "tar-fifo": tar_of([fifo]),
        "zip-dotdot": zdot.getvalue(),
        "zip-absolute": zabs.getvalue(),
        "zip-symlink-out": zlink.getvalue(),
    }


@pytest.mark.parametrize("kind", sorted(hostile_archives()))
async def test_hostile_archives_are_refused(kind: str, tmp_path: Path, files: tuple[Files, str],
                                            client: httpx.AsyncClient) -> None:
    state, base = files
    data = hostile_archives()[kind]
    art = Artifact(digest=digest(data), url=state.add("/evil", data), dest="app")
    work = tmp_path / "a" / "b"
    cache = ArtifactCache(work / "cache", 10 << 20, url_client=client)
    with pytest.raises(ArtifactError, match="refused archive"):
        await cache.place("i", [art], work / "inst")
    assert cache.held() == []
    assert list((work / "cache" / "tmp").iterdir()) == [] and list((work / "cache" / "blobs").iterdir()) == []
    assert not (tmp_path / "x").exists() and not (tmp_path / "a" / "x").exists()
    assert not (tmp_path / "outside").exists() and not (tmp_path / "a" / "outside").exists()


async def test_leftovers_of_a_killed_download_are_never_used_and_swept(
        tmp_path: Path, files: tuple[Files, str], client: httpx.AsyncClient) -> None:
    state, base = files
    data = app_tar()
    art = Artifact(digest=digest(data), url=state.add("/app.tgz", data), dest="app")
    hexd = art.digest.removeprefix("sha256:")
    root = tmp_path / "cache"
    (root / "tmp").mkdir(parents=True)
    # What a rep killed mid-download leaves: a partial file, and half an extraction.
    (root / "tmp" / f"{hexd}.dead.part").write_bytes(data[: len(data) // 2])
    (root / "tmp" / f"{hexd}.dead.tree").mkdir()
    cache = ArtifactCache(root, 10 << 20, url_client=client)
    assert list((root / "tmp").iterdir()) == [], "the start sweeps tmp/"
    assert cache.held() == []
    await cache.place("i", [art], tmp_path / "inst")
    assert state.gets == {"/app.tgz": 1}, "the next start downloads again"
    assert (tmp_path / "inst" / "app" / "run.sh").exists()
    # And a verified blob survives a restart: nothing is downloaded again.
    again = ArtifactCache(root, 10 << 20, url_client=client)
    assert again.held() == [art.digest]
    await again.place("j", [art], tmp_path / "inst2")
    assert state.gets == {"/app.tgz": 1}


async def test_lru_eviction_skips_pinned_blobs(tmp_path: Path, files: tuple[Files, str],
                                               client: httpx.AsyncClient) -> None:
    state, base = files
    blobs = [os.urandom(400_000) for _ in range(4)]
    arts = [Artifact(digest=digest(b), url=state.add(f"/b{n}", b), dest=f"b{n}")
            for n, b in enumerate(blobs)]
    cache = ArtifactCache(tmp_path / "cache", 1_000_000, url_client=client)
    await cache.place("pinned", [arts[0]], tmp_path / "i0")  # oldest, but running
    await cache.place("gone", [arts[1]], tmp_path / "i1")
    cache.unpin("gone")
    await cache.place("new", [arts[2]], tmp_path / "i2")  # over the cap: evicts b1, not the older b0
    assert cache.held() == sorted([arts[0].digest, arts[2].digest])
    with pytest.raises(ArtifactError, match=r"b3: cache full"):
        await cache.place("more", [arts[3]], tmp_path / "i3")  # b0 and b2 are both pinned
    assert sorted(cache.held()) == sorted([arts[0].digest, arts[2].digest])
    assert list((tmp_path / "cache" / "tmp").iterdir()) == []


def test_an_instance_cannot_modify_the_cached_copy(request: pytest.FixtureRequest,
                                                   files: tuple[Files, str]) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to run a process as another uid")
    state, base = files
    data = app_tar()
    art = Artifact(digest=digest(data), url=state.add("/app.tgz", data), dest="app")
    # pytest's own directories are root's 0700: the instance's uid could not even reach its files there.
    top = Path(tempfile.mkdtemp(prefix="vendue-cache-"))
    request.addfinalizer(lambda: shutil.rmtree(top, ignore_errors=True))
    top.chmod(0o755)
    inst = top / "inst"

    async def place() -> ArtifactCache:
        async with httpx.AsyncClient(timeout=10) as c:
            cache = ArtifactCache(top / "cache", 10 << 20, url_client=c)
            inst.mkdir()
            os.chown(inst, nobody, nobody)  # the instance owns its directory, not the cached files
            await cache.place("i", [art], inst, owner=(nobody, nobody))
            return cache

    nobody = 65534
    cache = asyncio.run(place())
    cached = cache.path_of(art.digest) / "lib" / "data.txt"
    given = inst / "app" / "lib" / "data.txt"
    assert given.stat().st_ino == cached.stat().st_ino, "a hard link, not a copy"
    assert (inst / "app" / "lib").stat().st_uid == nobody, "the directories made are the instance's"
    attempts = [f"echo changed > {inst}/app/lib/data.txt", f"chmod u+w {inst}/app/lib/data.txt",
                f"echo changed > {cached}", f"rm -f {cached}", f"touch {cached.parent}/new"]
    attempts.append(f"echo new > {inst}/app/lib/mine")  # its own directory: allowed (checked below)
    for attempt in attempts[:-1]:
        done = subprocess.run(["sh", "-c", attempt], user=nobody, group=nobody, capture_output=True,
                              timeout=10, check=False)
        assert done.returncode != 0, f"{attempt!r} as the instance's uid succeeded"
    assert cached.read_bytes() == b"data"
    assert (inst / "app" / "lib" / "data.txt").read_bytes() == b"data"
    done = subprocess.run(["sh", "-c", attempts[-1]], user=nobody, group=nobody, capture_output=True,
                          timeout=10, check=False)
    assert done.returncode == 0, done.stderr


async def test_an_instance_of_the_reps_own_uid_gets_a_copy(tmp_path: Path, files: tuple[Files, str],
                                                            client: httpx.AsyncClient) -> None:
    state, _ = files
    data = app_tar()
    art = Artifact(digest=digest(data), url=state.add("/app.tgz", data), dest="app")
    cache = ArtifactCache(tmp_path / "cache", 10 << 20, url_client=client)
    await cache.place("i", [art], tmp_path / "inst")
    (tmp_path / "inst" / "app" / "lib" / "data.txt").write_bytes(b"changed")
    assert (cache.path_of(art.digest) / "lib" / "data.txt").read_bytes() == b"data"


async def test_a_start_stopped_mid_download_leaves_the_others_theirs(
        tmp_path: Path, files: tuple[Files, str], client: httpx.AsyncClient) -> None:
    state, _ = files
    data = app_tar()
    art = Artifact(digest=digest(data), url=state.add("/app.tgz", data), dest="app")
    cache = ArtifactCache(tmp_path / "cache", 10 << 20, url_client=client)
    state.gate.clear()
    first = asyncio.create_task(cache.place("first", [art], tmp_path / "first"))
    second = asyncio.create_task(cache.place("second", [art], tmp_path / "second"))
    await eventually(lambda: state.gets.get("/app.tgz") == 1, 10, "the download begun", lambda: state.gets)
    first.cancel()
    state.gate.set()
    await asyncio.wait_for(second, 30)
    assert first.cancelled()
    assert (tmp_path / "second" / "app" / "run.sh").exists()
    assert state.gets == {"/app.tgz": 1}


async def test_an_evicted_tree_leaves_nothing_and_a_restart_trusts_only_whole_blobs(
        tmp_path: Path, files: tuple[Files, str], client: httpx.AsyncClient) -> None:
    state, _ = files
    inner = file_info("lib")
    inner.type, inner.linkname = tarfile.SYMTYPE, "real"
    data = tar_of([file_info("real/a.txt"), inner], {"real/a.txt": b"a"}, gz=True)
    art = Artifact(digest=digest(data), url=state.add("/app.tgz", data), dest="app")
    root = tmp_path / "cache"
    cache = ArtifactCache(root, 10 << 20, url_client=client)
    await cache.place("i", [art], tmp_path / "inst")
    assert (tmp_path / "inst" / "app" / "lib").is_symlink()
    assert (tmp_path / "inst" / "app" / "lib" / "a.txt").read_bytes() == b"a"
    assert oct(cache.path_of(art.digest).stat().st_mode & 0o777) == "0o555"
    cache.unpin("i")
    cache.evict(art.digest)
    assert list((root / "blobs").iterdir()) == [] and list((root / "tmp").iterdir()) == []
    # An eviction cut short leaves its read-only tree in tmp/: the next start sweeps it.
    await cache.place("j", [art], tmp_path / "inst2")
    half = root / "tmp" / "x.evicted"
    shutil.copytree(cache.path_of(art.digest), half, symlinks=True)
    half.chmod(0o555)
    again = ArtifactCache(root, 10 << 20, url_client=client)
    assert list((root / "tmp").iterdir()) == [] and again.held() == [art.digest]


KILLED_FETCHER = """
import asyncio, sys
from pathlib import Path
from common.models.artifact import Artifact
from rep.artifact_cache import ArtifactCache
art = Artifact(digest=sys.argv[2], url=sys.argv[3], dest="app")
asyncio.run(ArtifactCache(Path(sys.argv[1]), 64 << 20).place("i", [art], Path(sys.argv[1]) / "inst"))
"""


async def test_a_fetcher_killed_mid_download_leaves_nothing_trusted(
        tmp_path: Path, files: tuple[Files, str], client: httpx.AsyncClient) -> None:
    state, _ = files
    data = os.urandom(2 << 20)
    art = Artifact(digest=digest(data), url=state.add("/big.bin", data), dest="app")
    root = tmp_path / "cache"
    state.stall_after, state.gate = 1 << 20, threading.Event()
    proc = subprocess.Popen([sys.executable, "-c", KILLED_FETCHER, str(root), art.digest, art.url or ""],
                            cwd=Path(__file__).resolve().parents[1])
    try:
        deadline = asyncio.get_running_loop().time() + 30
        parts: list[Path] = []
        while not parts or parts[0].stat().st_size < (1 << 20):  # half of it written under tmp/
            assert proc.poll() is None, f"the fetcher ended early ({proc.returncode})"
            assert asyncio.get_running_loop().time() < deadline, f"no partial download in {root}: {parts}"
            await asyncio.sleep(0.02)
            parts = list((root / "tmp").glob("*.part")) if (root / "tmp").exists() else []
        proc.kill()
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        state.stall_after = None
        state.gate.set()
    assert list((root / "blobs").iterdir()) == []
    cache = ArtifactCache(root, 64 << 20, url_client=client)
    assert cache.held() == [] and list((root / "tmp").iterdir()) == []
    await cache.place("j", [art], tmp_path / "inst")
    assert state.gets == {"/big.bin": 2}, "downloaded again, and verified"
    assert (tmp_path / "inst" / "app").read_bytes() == data


async def test_a_download_cut_off_resumes_where_it_stopped(tmp_path: Path, files: tuple[Files, str],
                                                           client: httpx.AsyncClient) -> None:
    state, _ = files
    data = os.urandom(3 << 20)
    art = Artifact(digest=digest(data), url=state.add("/model.bin", data), dest="m")
    cut = (1 << 20) + 5
    state.cut_after = cut
    cache = ArtifactCache(tmp_path / "cache", 10 << 20, url_client=client)
    await asyncio.wait_for(cache.place("i", [art], tmp_path / "inst"), 30)
    assert (tmp_path / "inst" / "m").read_bytes() == data
    assert state.gets == {"/model.bin": 2}, state.gets
    assert len(state.ranges) == 1 and state.ranges[0].startswith("bytes="), state.ranges
    resumed_at = int(state.ranges[0].removeprefix("bytes=").rstrip("-"))
    assert 0 < resumed_at <= cut, f"the second GET asks for the rest only, from byte {resumed_at}"
    assert cache.counters.downloaded_bytes == len(data), "the first part is not fetched again"


async def test_hits_misses_and_evictions_are_counted(tmp_path: Path, files: tuple[Files, str],
                                                     client: httpx.AsyncClient) -> None:
    state, _ = files
    one, two = os.urandom(600 << 10), os.urandom(600 << 10)
    a = Artifact(digest=digest(one), url=state.add("/one", one))
    b = Artifact(digest=digest(two), url=state.add("/two", two))
    cache = ArtifactCache(tmp_path / "cache", 1 << 20, url_client=client)  # room for one of them
    await cache.place("i", [a], tmp_path / "i")
    await cache.place("j", [a], tmp_path / "j")
    cache.unpin("i")
    cache.unpin("j")
    await cache.place("k", [b], tmp_path / "k")
    counted = cache.counters
    assert (counted.hits, counted.misses, counted.evictions) == (1, 2, 1), counted
    assert counted.downloaded_bytes == len(one) + len(two)
    assert cache.held() == [b.digest]


async def test_a_redirect_is_followed_unless_it_leads_to_a_metadata_address(
        tmp_path: Path, files: tuple[Files, str], client: httpx.AsyncClient) -> None:
    state, base = files
    data = b"weights"
    state.add("/real.bin", data)
    state.redirects["/moved.bin"] = "/real.bin"
    state.redirects["/evil.bin"] = "http://169.254.169.254/latest/meta-data/iam"
    state.redirects["/evil6.bin"] = "http://[::ffff:169.254.169.254]/latest"
    state.redirects["/file.bin"] = "file:///etc/passwd"
    cache = ArtifactCache(tmp_path / "cache", 1 << 20, url_client=client)
    moved = Artifact(digest=digest(data), url=f"{base}/moved.bin", dest="d")
    await cache.place("i", [moved], tmp_path / "i")
    assert (tmp_path / "i" / "d").read_bytes() == data
    for path, why in (("/evil.bin", "a redirect refused: 169.254.169.254 is a cloud metadata address"),
                      ("/evil6.bin", "a redirect refused: 169.254.169.254 is a cloud metadata address"),
                      ("/file.bin", "a redirect to a 'file' URL")):
        art = Artifact(digest=digest(b"never" + path.encode()), url=f"{base}{path}")
        with pytest.raises(ArtifactError) as err:
            await cache.place("j", [art], tmp_path / "j")
        expected = f"artifact {art.digest[:11]}… from {base}{path}: unreachable ({why}"
        assert str(err.value).startswith(expected), f"expected the refusal naming {why!r}, saw {err.value}"


async def test_a_bind_mounted_artifact_is_shared_read_only_and_unbound(
        tmp_path: Path, files: tuple[Files, str], client: httpx.AsyncClient) -> None:
    """An instance whose directory is a filesystem of its own gets read-only bind mounts of the cached copy
    (a hard link cannot reach it): nothing copied, not even root can write through them."""
    if os.geteuid() != 0:
        pytest.skip("bind mounts need root")
    from rep.artifact_cache import BOUND, unbind
    from rep.disk_quota import mounts_under

    state, _ = files
    data, model = app_tar(), os.urandom(4096)
    arts = [Artifact(digest=digest(data), url=state.add("/app.tgz", data), dest="."),
            Artifact(digest=digest(data), url=state.add("/app2.tgz", data), dest="lib2"),
            Artifact(digest=digest(model), url=state.add("/model.bin", model), dest="m")]
    cache = ArtifactCache(tmp_path / "cache", 10 << 20, url_client=client)
    inst = tmp_path / "inst"
    inst.mkdir()
    try:
        await cache.place("i", arts, inst, owner=(65534, 65534), bind=True)
        assert len(mounts_under(inst)) == 3, "one mount per artifact"
        cached = cache.path_of(arts[0].digest)
        assert (inst / "run.sh").is_symlink() and (inst / "run.sh").read_bytes() == b"#!/bin/sh\necho hi\n"
        assert os.access(inst / "run.sh", os.X_OK)
        assert (inst / "lib" / "data.txt").stat().st_ino == (cached / "lib" / "data.txt").stat().st_ino
        assert (inst / BOUND).stat().st_uid == 0, "the mount points' directory is root's"
        assert (inst / "lib2" / "lib" / "data.txt").read_bytes() == b"data"
        assert (inst / "m").read_bytes() == model
        for path in (inst / "lib2" / "lib" / "data.txt", inst / "m", inst / "lib" / "data.txt"):
            with pytest.raises(OSError) as err:
                path.open("ab")
            assert err.value.errno in (30, 13), f"{path}: expected EROFS, saw {err.value}"
        with pytest.raises(OSError):
            (inst / "lib2" / "new").write_text("x")
        (inst / "mine").write_text("the instance's own")  # beside them: its own directory
    finally:
        unbound = unbind(inst)
    assert len(unbound) == 3 and mounts_under(inst) == []
    assert (cache.path_of(arts[0].digest) / "lib" / "data.txt").read_bytes() == b"data"
