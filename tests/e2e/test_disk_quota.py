"""disk_mb enforced by the filesystem, as a tenant meets it: real clusters (LocalCluster, TLS on), real app
processes, as root on a machine that can isolate and loop-mount; skipped, with the reason, elsewhere.

Each instance's directory is an ext4 filesystem of disk_mb of its own (rep/disk_quota.py): a write past it
fails with ENOSPC, the instance runs on, its neighbours write as before; a rep killed with -9 leaves its
filesystems mounted, and unmounts them at its next start; where the host has no mkfs.ext4 the rep
measures instead, and `vendue cells` says so.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from common.procutil import app_python
from rep.disk_quota import probe
from rep.isolation import isolation_leftovers, isolation_problem
from rep.settings import RepSettings

from .conftest import E2ECluster, Unmet, all_running, brief, expect, hold_for, wait_all_running, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

KIB = 1024
MIB = 1024 * KIB
PROBLEM = isolation_problem(RepSettings(executor="process", isolation="cgroups"))
with tempfile.TemporaryDirectory(prefix="vendue-probe-") as _probe_dir:
    NO_LOOP = probe(Path(_probe_dir))[1] if PROBLEM is None else PROBLEM
filesystems = pytest.mark.skipif(bool(NO_LOOP), reason=f"no filesystem per instance here: {NO_LOOP}")

# Serves $PORT; GET /fill/NAME/MB appends MB MiB to the file NAME in its directory and answers how many
# bytes it wrote and the errno that stopped it (null: none did).
FILLER = r"""
import http.server, json, os
def fill(name, mb):
    written, errno = 0, None
    try:
        with open(name, "ab", buffering=0) as f:
            for _ in range(mb * 16):  # 64 KiB at a time: a write that does not fit may fail whole
                written += f.write(b"\xff" * (1 << 16))
    except OSError as exc:
        errno = exc.errno
    return {"written": written, "errno": errno}
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        parts = self.path.split("/")
        body = json.dumps(fill(parts[2], int(parts[3])) if parts[1] == "fill" else "ok").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""
FILLER_COMMAND = [app_python(), "-c", FILLER]


@pytest.fixture
def transport() -> str:
    """The filesystem is the rep's own business: one transport is enough."""
    return "http"


def fill(address: str, name: str, mb: int) -> dict:
    answer = httpx.get(f"http://{address}/fill/{name}/{mb}", timeout=120.0)
    assert answer.status_code == 200, f"expected the app to answer its fill, saw {answer.status_code}"
    return dict(answer.json())


def instance_dir(c: E2ECluster, actual: dict) -> Path:
    """The instance's directory: the working directory of the process its rep reports for it."""
    held = {lrp["instance_guid"]: lrp for lrp in c.rep_state(actual["cell_id"])["lrps"]}
    pid = held.get(actual["instance_guid"], {}).get("pid")
    assert pid, f"expected the rep to report the pid of {actual['instance_guid']}, saw {held}"
    return Path(os.readlink(f"/proc/{pid}/cwd"))


def isolation_of(c: E2ECluster) -> str:
    [cell] = json.loads(c.cli("cells", "--json").stdout)
    return str(cell["isolation"])


@filesystems
def test_a_write_past_disk_mb_fails_with_enospc_the_app_runs_on_and_its_neighbour_writes(
    make_cluster: Callable[..., E2ECluster],
) -> None:
    c = make_cluster(cells=1, zones=1)  # one cell: the neighbour shares the filler's machine and disk
    assert c.bbs is not None
    filler, neighbour = c.guid("filler"), c.guid("neighbour")
    for guid in (filler, neighbour):
        c.bbs.desire(guid, 1, command=FILLER_COMMAND, disk_mb=64)
    [before] = wait_all_running(c.bbs, filler, 1, timeout=60.0, answer=False).values()
    [beside] = wait_all_running(c.bbs, neighbour, 1, timeout=60.0, answer=False).values()

    wrote = fill(before["address"], "big", 200)

    assert wrote["errno"] == 28, f"expected the 200 MB write to fail with ENOSPC, saw {wrote}"
    # Its files' metadata counts against it too, as `du` counts it; and the write that failed was 64 KiB.
    assert 64 * MIB - 256 * KIB <= wrote["written"] <= 64 * MIB, (
        f"expected ENOSPC at its 64 MB disk_mb, saw {wrote['written'] / MIB:.3f} MB")
    assert fill(beside["address"], "own", 32) == {"written": 32 * MIB, "errno": None}, (
        "the neighbour writes in a filesystem of its own")

    def still_running() -> bool:
        [now] = all_running(c.bbs, filler, 1, answer=False).values()
        same = (now["instance_guid"], now["crash_count"]) == (before["instance_guid"], 0)
        return expect(same, brief([now]))

    hold_for(still_running, 3.0, "the full app RUNNING, the same instance, never crashed (the poll: 2 s)")
    assert httpx.get(f"http://{before['address']}/", timeout=5.0).json() == "ok", "and it answers"
    assert isolation_of(c).endswith(" disk:ext4"), isolation_of(c)
    cells = c.cli("cells")
    assert cells.code == 0 and "disk:ext4" in cells.stdout, cells.output


@filesystems
def test_a_rep_killed_with_its_instances_filesystems_mounted_unmounts_them_at_its_next_start(
    make_cluster: Callable[..., E2ECluster],
) -> None:
    c = make_cluster(cells=1, zones=1)
    assert c.bbs is not None
    guid = c.guid("mounted")
    c.bbs.desire(guid, 1, command=FILLER_COMMAND, disk_mb=16)
    [actual] = wait_all_running(c.bbs, guid, 1, timeout=60.0, answer=False).values()
    directory = instance_dir(c, actual)
    [data_dir] = c.lc.rep_data_dirs()
    image = data_dir / "disks" / "cell-0" / f"{actual['instance_guid']}.img"
    assert os.path.ismount(directory) and image.is_file(), (directory, image)

    c.lc.kill("cell-0")
    left = isolation_leftovers(data_dir)
    assert str(directory) in left and str(image) in left, f"expected the mount and its image left, saw {left}"

    c.lc.restart("cell-0")
    wait_for(lambda: expect(not os.path.ismount(directory) and not image.exists(),
                            f"mounted: {os.path.ismount(directory)}, image: {image.exists()}"),
             30.0, "the restarted rep to unmount and delete what its previous run left")

    def running_anew() -> dict:
        [now] = all_running(c.bbs, guid, 1, answer=False).values()
        if now["instance_guid"] == actual["instance_guid"]:
            raise Unmet(f"still the old instance: {brief([now])}")
        return now

    again = wait_for(running_anew, 60.0, "the app running again, a new instance")
    assert os.path.ismount(instance_dir(c, again)), "the new instance has a filesystem of its own"


@pytest.mark.skipif(PROBLEM is not None, reason=f"this machine cannot isolate: {PROBLEM}")
def test_where_the_host_cannot_make_filesystems_the_rep_measures_and_cells_say_so(
    make_cluster: Callable[..., E2ECluster], tmp_path: Path,
) -> None:
    no_tools = tmp_path / "bin"  # a PATH without mkfs.ext4 (nor anything else)
    no_tools.mkdir()
    c = make_cluster(cells=1, zones=1, env={"PATH": str(no_tools)},
                     rep_args=["--disk-check-interval", "0.5"])
    assert c.bbs is not None

    assert isolation_of(c).endswith(" disk:poll"), isolation_of(c)
    cells = c.cli("cells")
    assert cells.code == 0 and "disk:poll" in cells.stdout, cells.output

    guid = c.guid("measured")
    c.bbs.desire(guid, 1, command=FILLER_COMMAND, disk_mb=16)
    [actual] = wait_all_running(c.bbs, guid, 1, timeout=60.0, answer=False).values()
    assert not os.path.ismount(instance_dir(c, actual))
    assert fill(actual["address"], "big", 40) == {"written": 40 * MIB, "errno": None}, "nothing stops a write"

    def crashed() -> dict:
        rows = [a for a in c.bbs.actuals(guid) if a["crash_count"] >= 1] if c.bbs else []
        return expect(rows and rows[0], brief(c.bbs.actuals(guid)) if c.bbs else "")

    row = wait_for(crashed, 30.0, f"{guid} stopped by the poll and CRASHED")
    assert row["crash_reason"].startswith("disk quota exceeded ("), row["crash_reason"]
