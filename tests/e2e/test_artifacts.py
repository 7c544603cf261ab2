"""An app's code as an artifact, end to end: a real cluster (BBS, auctioneer, reps as OS processes, TLS on),
its blob store, the reps' host caches, and artifact servers of the user's own (docs/artifacts.md).

- the same blob for 20 instances on 4 cells is downloaded 4 times, once per rep host (the BBS counts), and
  a warm cache downloads nothing;
- a corrupted blob, a wrong URL digest and an unreachable URL crash the instance with a reason that names
  the artifact;
- an https artifact server of the operator's own CA (`--artifact-ca`) and a plain http one both serve;
- a reader may not upload or delete; a rep may download only;
- a rep killed mid-download leaves nothing its next start trusts: it downloads again and verifies.
"""

from __future__ import annotations

import hashlib
import io
import os
import socket
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from common.procutil import app_python
from common.tls import TLSFiles, client_context, init_ca, issue
from tests.support.artifact_server import Files, digest, serve_files

from .conftest import (
    APP_SOURCE,
    BBS,
    E2ECluster,
    Unmet,
    all_running,
    brief,
    expect,
    wait_all_running,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

MIB = 1024 * 1024
APP_COMMAND = [app_python(), "app/app.py"]


@pytest.fixture
def transport() -> str:
    """Fetching and caching artifacts is the reps' own business: one transport is enough."""
    return "http"


@pytest.fixture
def files() -> Iterator[Files]:
    with serve_files() as state:
        yield state


def app_tar(padding: int = MIB) -> bytes:
    """The e2e app (answers its index on $PORT) as app.py in a tar.gz, with `padding` random bytes beside
    it so that a download is not over in one packet."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data, mode in (("app.py", APP_SOURCE.encode(), 0o644),
                                 ("padding.bin", os.urandom(padding), 0o644)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def upload(c: E2ECluster, data: bytes) -> str:
    with c.lc.http_client(base_url=c.lc.bbs_url, timeout=30) as admin:
        answer = admin.put(f"/v1/blobs/{digest(data)}", content=data)
    assert answer.status_code == 201, f"expected 201 storing it, saw {answer.status_code}: {answer.text}"
    return digest(data)


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    raise AssertionError(f"expected a {name} series, saw {[x for x in text.splitlines() if 'blob' in x]}")


def bbs_downloads(c: E2ECluster) -> float:
    with c.lc.http_client(base_url=c.lc.bbs_url, timeout=10) as admin:
        return metric(admin.get("/metrics").text, "vendue_blob_downloads_total")


def rep_metric(c: E2ECluster, cell_id: str, name: str) -> float:
    with c.lc.http_client(timeout=10) as admin:
        return metric(admin.get(f"{c.reps[cell_id].url}/metrics").text, name)


def crash_reason(c: E2ECluster, process_guid: str) -> str:
    """The instance's crash reason once it has crashed (any index: the app has one)."""
    assert c.bbs is not None

    def crashed() -> str:
        actuals = c.bbs.actuals(process_guid)
        reasons = [a.get("crash_reason", "") for a in actuals if a.get("crash_reason")]
        if not reasons:
            raise Unmet(f"no crash reason yet: {brief(actuals)}")
        return str(reasons[0])

    return wait_for(crashed, 60.0, f"{process_guid} crashed with a reason")


def test_twenty_instances_on_four_cells_download_the_blob_once_per_host_and_a_warm_cache_none(
    make_cluster: Callable[..., E2ECluster],
) -> None:
    c = make_cluster(cells=4, zones=2)
    assert c.bbs is not None
    data = app_tar()
    blob = upload(c, data)
    art = [{"digest": blob, "dest": "app"}]
    cold = c.guid("cold")
    c.bbs.desire(cold, 20, command=APP_COMMAND, memory_mb=64, disk_mb=64, artifacts=art)
    running = wait_all_running(c.bbs, cold, 20, timeout=120.0)
    cells = {a["cell_id"] for a in running.values()}
    assert cells == set(c.reps), f"expected the 20 instances spread over the 4 cells, saw {sorted(cells)}"
    assert bbs_downloads(c) == 4, "one download from the BBS per rep host, for 20 instances"
    for cell in c.reps:
        assert rep_metric(c, cell, "vendue_artifact_cache_downloaded_bytes_total") == len(data), cell
        assert rep_metric(c, cell, "vendue_artifact_cache_misses_total") >= 1, cell
        assert rep_metric(c, cell, "vendue_artifact_cache_blobs") == 1, cell

    warm = c.guid("warm")  # another app with the same code: every host holds it
    c.bbs.desire(warm, 8, command=APP_COMMAND, memory_mb=64, disk_mb=64, artifacts=art)
    wait_all_running(c.bbs, warm, 8, timeout=120.0)
    assert bbs_downloads(c) == 4, "a warm cache downloads nothing"
    hits = sum(rep_metric(c, cell, "vendue_artifact_cache_hits_total") for cell in c.reps)
    assert hits >= 8, f"expected at least the warm app's 8 starts served from the caches, saw {hits}"
    assert all(rep_metric(c, cell, "vendue_artifact_cache_downloaded_bytes_total") == len(data)
               for cell in c.reps), "no byte fetched again"


def test_a_corrupted_blob_a_wrong_url_digest_and_an_unreachable_url_crash_naming_the_artifact(
    make_cluster: Callable[..., E2ECluster], files: Files,
) -> None:
    c = make_cluster(cells=1, zones=1)
    assert c.bbs is not None
    # A blob whose bytes rotted on the BBS's disk after the upload was verified: the rep's check catches it.
    data = app_tar(padding=4096)
    blob = upload(c, data)
    stored = [p for p in (c.lc.data_dir / "bbs" / "blobs").iterdir()
              if p.is_file() and p.stat().st_size == len(data)]
    assert len(stored) == 1, f"expected the blob's one file in the BBS's data dir, saw {stored}"
    rotten = bytearray(stored[0].read_bytes())
    rotten[len(rotten) // 2] ^= 0xFF
    stored[0].write_bytes(bytes(rotten))
    corrupted = c.guid("corrupted")
    c.bbs.desire(corrupted, 1, command=APP_COMMAND, artifacts=[{"digest": blob, "dest": "app"}])
    reason = crash_reason(c, corrupted)
    got = "sha256:" + hashlib.sha256(bytes(rotten)).hexdigest()
    assert reason == f"artifact {blob[:11]}… from the blob store: digest mismatch (got {got[:19]}…)", reason

    promised = digest(b"what the user meant to ship")
    wrong = c.guid("wrong")
    url = files.add("/app.tgz", data)
    c.bbs.desire(wrong, 1, command=APP_COMMAND, artifacts=[{"digest": promised, "url": url, "dest": "app"}])
    reason = crash_reason(c, wrong)
    expected = f"artifact {promised[:11]}… from {url}: digest mismatch (got {digest(data)[:19]}…"
    assert reason.startswith(expected), reason

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gone = c.guid("unreachable")
    url = f"http://127.0.0.1:{port}/app.tgz?signature=secret"
    c.bbs.desire(gone, 1, command=APP_COMMAND, artifacts=[{"digest": blob, "url": url, "dest": "app"}])
    reason = crash_reason(c, gone)
    expected = f"artifact {blob[:11]}… from http://127.0.0.1:{port}/app.tgz: unreachable ("
    assert reason.startswith(expected), reason
    assert "secret" not in reason, "a URL's query is never in a reason"


def test_https_with_the_operators_own_ca_and_http_artifact_servers_serve_the_app(
    make_cluster: Callable[..., E2ECluster], tmp_path: Path,
) -> None:
    own = tmp_path / "own-ca"  # not the cluster's CA, nor in the system's trust store
    init_ca(own)
    issue(own, role="bbs", name="files")  # its certificate names 127.0.0.1
    server = TLSFiles.in_dir(own, "files")
    with serve_files(tls=(server.cert, server.key)) as secure, serve_files() as plain:
        c = make_cluster(cells=1, zones=1, rep_args=("--artifact-ca", str(server.ca)))
        assert c.bbs is not None
        assert secure.base.startswith("https://") and plain.base.startswith("http://")
        apps = []
        for name, state in (("https", secure), ("http", plain)):
            data = app_tar(padding=4096)  # each its own blob: one cache on the one host
            guid = c.guid(name)
            url = state.add("/app.tgz", data)
            c.bbs.desire(guid, 1, command=APP_COMMAND,
                         artifacts=[{"digest": digest(data), "url": url, "dest": "app"}])
            apps.append((guid, state))
        for guid, state in apps:
            wait_all_running(c.bbs, guid, 1, timeout=60.0)
            assert state.gets == {"/app.tgz": 1}, f"{guid}: expected one download, saw {state.gets}"


def test_a_reader_cannot_upload_or_delete_and_a_rep_can_only_download(
    make_cluster: Callable[..., E2ECluster],
) -> None:
    c = make_cluster(cells=1, zones=1)
    data = os.urandom(10_000)
    blob = upload(c, data)
    other = os.urandom(100)
    reader = client_context(c.lc.issue_certificate("reader", "reader-1"))
    rep = client_context(c.lc.issue_certificate("rep", "rep-9", cells=["cell-9"]))
    writes: list[tuple[str, str, bytes | None]] = [
        ("PUT", f"/v1/blobs/{digest(other)}", other), ("DELETE", f"/v1/blobs/{blob}", None),
        ("GET", "/v1/blobs", None)]
    with httpx.Client(base_url=c.lc.bbs_url, verify=reader, timeout=10) as http:
        for method, path, body in writes + [("GET", f"/v1/blobs/{blob}", None)]:
            answer = http.request(method, path, content=body)
            assert answer.status_code == 403, f"a reader's {method} {path}: saw {answer.status_code}"
    with httpx.Client(base_url=c.lc.bbs_url, verify=rep, timeout=10) as http:
        answer = http.get(f"/v1/blobs/{blob}", headers={"Range": "bytes=100-"})
        assert answer.status_code == 206 and answer.content == data[100:], answer.status_code
        assert http.get(f"/v1/blobs/{blob}").content == data
        for method, path, body in writes:
            answer = http.request(method, path, content=body)
            assert answer.status_code == 403, f"a rep's {method} {path}: saw {answer.status_code}"
    with c.lc.http_client(base_url=c.lc.bbs_url, timeout=10) as admin:
        listed = {b["digest"] for b in admin.get("/v1/blobs").json()["items"]}
    assert listed == {blob}, f"nothing uploaded nor deleted by them: {listed}"


def test_a_rep_killed_mid_download_downloads_again_at_its_next_start_and_verifies(
    make_cluster: Callable[..., E2ECluster], files: Files,
) -> None:
    c = make_cluster(cells=1, zones=1)
    assert c.bbs is not None
    data = app_tar(padding=4 * MIB)
    url = files.add("/app.tgz", data)
    files.stall_after = len(data) // 2  # half of it, then the server waits (for `gate`)
    files.stall_s = 120.0  # past the test's own deadlines: the rest is never sent before the kill
    files.gate.clear()
    guid = c.guid("killed")
    c.bbs.desire(guid, 1, command=APP_COMMAND,
                 artifacts=[{"digest": digest(data), "url": url, "dest": "app"}])
    [cell] = c.reps
    [data_dir] = c.lc.rep_data_dirs()
    cache = data_dir / "cache"

    def half_downloaded() -> list[Path]:
        parts = [p for p in (cache / "tmp").iterdir() if p.name.endswith(".part") and p.stat().st_size > 0]
        seen = f"gets {files.gets}, tmp {list((cache / 'tmp').iterdir())}"
        return parts if expect(bool(parts), seen) else []

    [part] = wait_for(half_downloaded, 60.0, "the rep half way through the download")
    c.lc.kill(cell)
    assert part.exists() and part.stat().st_size < len(data), "a partial file left behind"
    assert list((cache / "blobs").iterdir()) == [], "nothing partial was ever trusted"
    files.stall_after = None
    files.gate.set()

    c.lc.restart(cell)
    wait_all_running(c.bbs, guid, 1, timeout=90.0)
    assert files.gets["/app.tgz"] == 2, f"expected the download begun again, saw {files.gets}"
    assert not part.exists(), "the partial file swept at the start"
    [held] = list((cache / "blobs").iterdir())
    assert held.name == digest(data).removeprefix("sha256:")
    assert (held / "padding.bin").stat().st_size == 4 * MIB
    assert rep_metric(c, cell, "vendue_artifact_cache_downloaded_bytes_total") == len(data)


def test_a_rep_killed_with_artifacts_mounted_unmounts_them_at_its_next_start(
    make_cluster: Callable[..., E2ECluster],
) -> None:
    """Where an instance's directory is a filesystem of its own, its artifact is a read-only bind mount of
    the host's cache: a `kill -9` of the rep leaves it mounted; the next start unmounts it with the rest."""
    from rep.disk_quota import mounts_under

    c = make_cluster(cells=1, zones=1)
    assert c.bbs is not None
    blob = upload(c, app_tar(padding=4096))
    guid = c.guid("mounted")
    c.bbs.desire(guid, 1, command=APP_COMMAND, artifacts=[{"digest": blob, "dest": "app"}])
    [actual] = wait_all_running(c.bbs, guid, 1, timeout=60.0).values()
    [cell] = c.reps
    held = {lrp["instance_guid"]: lrp for lrp in c.rep_state(cell)["lrps"]}
    directory = Path(os.readlink(f"/proc/{held[actual['instance_guid']]['pid']}/cwd"))
    if not os.path.ismount(directory):
        pytest.skip("instances' directories are not filesystems of their own here: hard links, no mounts")
    assert mounts_under(directory) == [directory / "app"], mounts_under(directory)
    with pytest.raises(OSError):
        (directory / "app" / "app.py").write_text("changed")

    c.lc.kill(cell)
    assert mounts_under(directory) == [directory / "app"], "left mounted by the killed rep"
    c.lc.restart(cell)
    wait_for(lambda: expect(not os.path.ismount(directory) and not mounts_under(directory),
                            f"still mounted: {mounts_under(directory)}"),
             30.0, "the restarted rep to unmount what its previous run left")

    def running_anew() -> dict:
        assert c.bbs is not None
        [now] = all_running(c.bbs, guid, 1).values()
        if now["instance_guid"] == actual["instance_guid"]:
            raise Unmet(f"still the old instance: {brief([now])}")
        return now

    wait_for(running_anew, 60.0, "the app running again from the cached artifact, a new instance")
    assert rep_metric(c, cell, "vendue_artifact_cache_hits_total") >= 1, "the blob kept across the restart"
    assert rep_metric(c, cell, "vendue_artifact_cache_downloaded_bytes_total") == 0, "and not fetched again"


def test_ha_a_blob_uploaded_through_one_replica_is_fetched_by_the_reps_through_the_other(
    make_cluster: Callable[..., E2ECluster],
) -> None:
    """`--ha`: two BBS replicas on one PostgreSQL. A blob uploaded through the first, which is then killed,
    reaches the reps through the second (their BBS client moves to the replica that answers)."""
    c = make_cluster(cells=2, zones=1, ha=True)
    first, second = c.lc.bbs_urls
    data = app_tar(padding=2 * MIB)
    blob = upload(c, data)  # through the first: lc.bbs_url
    assert c.lc.bbs_url == first
    c.lc.kill("bbs")
    other = BBS(second, c.lc.verify)
    try:
        guid = c.guid("ha")
        other.desire(guid, 4, command=APP_COMMAND, memory_mb=64, disk_mb=64,
                     artifacts=[{"digest": blob, "dest": "app"}])
        running = wait_all_running(other, guid, 4, timeout=120.0)
        cells = {a["cell_id"] for a in running.values()}
        with c.lc.http_client(base_url=second, timeout=10) as admin:
            sent = metric(admin.get("/metrics").text, "vendue_blob_download_bytes_total")
        assert sent == len(data) * len(cells), (
            f"expected the second replica to send the blob once per host ({len(cells)}), saw {sent} bytes")
    finally:
        other.close()
