"""Per-instance cgroups: cgroup v2 against a fake cgroupfs (files in a temp dir), cgroup v1 for real (as root,
where this machine mounts the memory, pids and cpu hierarchies)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.procutil import child_preexec

from . import cgroups as cgroups_module
from .cgroups import (
    CellCgroups,
    Cgroups,
    CgroupsUnavailable,
    _in_mount,
    cpu_shares,
    cpu_weight,
    detect,
    limits_for,
    parse_mountinfo,
    parse_proc_cgroup,
)

pytestmark = pytest.mark.timeout(60)

OWN = "/system.slice/vendue-rep.main"


def v2_mount(point: Path) -> str:
    return f"30 23 0:26 / {point} rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"


def v1_mount(point: Path, controllers: str, root: str = "/") -> str:
    return f"32 31 0:29 {root} {point} rw,relatime shared:9 - cgroup cgroup rw,{controllers}\n"


@pytest.fixture
def fake_v2(tmp_path: Path) -> Path:
    """A cgroup2 mount at <tmp>/cgroup whose rep cgroup (OWN) is offered memory, pids and cpu."""
    top = tmp_path / "cgroup" / OWN.lstrip("/")
    top.mkdir(parents=True)
    (top / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    return tmp_path / "cgroup"


def detect_fake_v2(root: Path, **kwargs: object) -> Cgroups:
    return detect("k123", fs_root=root, mountinfo=v2_mount(root), proc_cgroup=f"0::{OWN}\n", **kwargs)  # type: ignore[arg-type]


# --- parsing and finding ----------------------------------------------------------------------------


def test_mountinfo_gives_the_cgroup_mounts_with_their_controllers() -> None:
    text = (
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        + v1_mount(Path("/sys/fs/cgroup/cpu,cpuacct"), "cpu,cpuacct")
        + "40 31 0:37 / /sys/fs/cgroup/with\\040space rw - cgroup cgroup rw,pids\n"
        + v2_mount(Path("/sys/fs/cgroup/unified"))
    )
    mounts = parse_mountinfo(text)
    assert [(m.point, m.fstype) for m in mounts] == [
        (Path("/sys/fs/cgroup/cpu,cpuacct"), "cgroup"),
        (Path("/sys/fs/cgroup/with space"), "cgroup"),
        (Path("/sys/fs/cgroup/unified"), "cgroup2"),
    ]
    assert {"cpu", "cpuacct"} <= mounts[0].options


def test_proc_cgroup_maps_every_controller_to_its_path() -> None:
    paths = parse_proc_cgroup("4:memory:/process_api/x\n1:cpu,cpuacct:/\n0::/user.slice/a:b\n")
    assert paths == {"memory": "/process_api/x", "cpu": "/", "cpuacct": "/", "": "/user.slice/a:b"}


def test_a_container_mount_of_part_of_a_hierarchy_maps_paths_below_its_root() -> None:
    [mount] = parse_mountinfo(v1_mount(Path("/sys/fs/cgroup/memory"), "memory", root="/docker/abc"))
    assert _in_mount(mount, "/docker/abc/app") == Path("/sys/fs/cgroup/memory/app")
    assert _in_mount(mount, "/") == Path("/sys/fs/cgroup/memory")


def test_diego_cpu_shares_are_proportional_to_memory_up_to_8_gib() -> None:
    assert [cpu_shares(mb) for mb in (64, 1024, 4096, 8192, 16384)] == [2, 122, 512, 1024, 1024]
    assert [cpu_weight(shares) for shares in (2, 122, 1024, 262144)] == [1, 5, 39, 10000]
    assert limits_for(128, 64) == type(limits_for(128, 64))(128 * 2**20, 64, cpu_shares(128))


def test_v2_is_found_below_the_reps_own_cgroup(fake_v2: Path) -> None:
    cgroups = detect_fake_v2(fake_v2)
    assert cgroups.version == "cgroup-v2"
    [h] = cgroups.hierarchies
    assert h.top == fake_v2 / OWN.lstrip("/") and h.base == h.top / "vendue" / "k123"


def test_a_cgroup_parent_replaces_the_reps_own_cgroup(fake_v2: Path) -> None:
    (fake_v2 / "cgroup.controllers").write_text("cpu memory pids\n")
    [h] = detect_fake_v2(fake_v2, parent="/apps/vendue").hierarchies
    assert h.top == fake_v2 and h.base == fake_v2 / "apps" / "vendue" / "k123"


def test_v2_without_a_controller_names_it(fake_v2: Path) -> None:
    (fake_v2 / OWN.lstrip("/") / "cgroup.controllers").write_text("cpu io memory\n")
    with pytest.raises(
        CgroupsUnavailable, match=r"cgroup v2 at .* does not offer pids to .*offers: cpu io memory"
    ):
        detect_fake_v2(fake_v2)


def test_v1_hierarchies_are_found_with_cpu_shared_with_cpuacct(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    text = "".join(
        v1_mount(root / name, name) for name in ("memory", "pids", "cpu,cpuacct", "freezer", "blkio")
    )
    cgroups = detect(
        "k", fs_root=root, mountinfo=text, proc_cgroup="5:memory:/rep\n3:pids:/\n1:cpu,cpuacct:/\n"
    )
    assert cgroups.version == "cgroup-v1"
    assert {h.top: h.controllers for h in cgroups.hierarchies} == {
        root / "memory" / "rep": frozenset({"memory"}), root / "pids": frozenset({"pids"}),
        root / "cpu,cpuacct": frozenset({"cpu", "cpuacct"}), root / "freezer": frozenset({"freezer"}),
    }


def test_v1_without_a_controller_names_it_and_what_there_is(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    with pytest.raises(
        CgroupsUnavailable, match=r"no cgroup v1 pids, cpu hierarchy under .* \(found: memory\)"
    ):
        detect("k", fs_root=root, mountinfo=v1_mount(root / "memory", "memory"), proc_cgroup="")


def test_only_mounts_under_the_cgroup_filesystem_root_count(tmp_path: Path) -> None:
    elsewhere = "".join(v1_mount(tmp_path / "other" / n, n) for n in ("memory", "pids", "cpu"))
    with pytest.raises(CgroupsUnavailable, match="no cgroup filesystem mounted under"):
        detect("k", fs_root=tmp_path / "cg", mountinfo=elsewhere, proc_cgroup="")


def test_v2_wins_over_v1_where_it_offers_the_controllers(fake_v2: Path) -> None:
    text = v2_mount(fake_v2) + "".join(v1_mount(fake_v2 / n, n) for n in ("memory", "pids", "cpu"))
    assert detect("k", fs_root=fake_v2, mountinfo=text, proc_cgroup=f"0::{OWN}\n").version == "cgroup-v2"


# --- v2 on a fake cgroupfs ------------------------------------------------------------------------


def test_v2_cell_enables_the_controllers_on_every_level_down(fake_v2: Path) -> None:
    cell = detect_fake_v2(fake_v2).cell("cell-0")
    cell.open()
    top = fake_v2 / OWN.lstrip("/")
    for level in (top, top / "vendue", top / "vendue" / "k123", top / "vendue" / "k123" / "cell-0"):
        assert (level / "cgroup.subtree_control").read_text() == "+memory +pids +cpu", level


def test_v2_a_rep_in_its_own_busy_cgroup_moves_itself_into_a_leaf_first(
    fake_v2: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = fake_v2 / OWN.lstrip("/")
    real = cgroups_module._enable_controllers

    def kernel(directory: Path) -> None:  # refuses in the rep's cgroup while a process is in it
        if directory == top and not (top / "vendue" / "k123" / "rep" / "cgroup.procs").exists():
            raise cgroups_module._Busy("busy")
        real(directory)

    monkeypatch.setattr(cgroups_module, "_enable_controllers", kernel)
    cell = detect_fake_v2(fake_v2).cell("cell-0")
    cell.open()
    assert (top / "vendue" / "k123" / "rep" / "cgroup.procs").read_text() == str(os.getpid())
    assert (top / "vendue" / "k123" / "cell-0" / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert [c.dirs[0].name for c in cell.leftovers()] == [], "the rep's leaf is no instance"


def test_v2_with_a_cgroup_parent_a_busy_cgroup_is_refused(
    fake_v2: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (fake_v2 / "cgroup.controllers").write_text("cpu memory pids\n")

    def busy(directory: Path) -> None:
        raise cgroups_module._Busy(f"cannot enable in {directory}: busy")

    monkeypatch.setattr(cgroups_module, "_enable_controllers", busy)
    with pytest.raises(CgroupsUnavailable, match="busy"):
        detect_fake_v2(fake_v2, parent="/apps").cell("cell-0").open()
    assert not (fake_v2 / "apps").exists()


def test_v2_instance_limits_memory_without_swap_pids_and_cpu_weight(fake_v2: Path) -> None:
    cell = detect_fake_v2(fake_v2).cell("cell-0")
    cell.open()
    cgroup = cell.create("guid-1", limits_for(1024, 64))
    [path] = cgroup.dirs
    assert path == fake_v2 / OWN.lstrip("/") / "vendue" / "k123" / "cell-0" / "guid-1"
    written = {
        name: (path / name).read_text()
        for name in ("memory.max", "memory.swap.max", "pids.max", "cpu.weight")
    }
    assert written == {
        "memory.max": str(1024 * 2**20),
        "memory.swap.max": "0",
        "pids.max": "64",
        "cpu.weight": "5",
    }
    assert cgroup.procs_files == (str(path / "cgroup.procs"),)


def test_v2_cell_weighs_a_default_process_per_instance_it_holds(fake_v2: Path) -> None:
    cell = detect_fake_v2(fake_v2).cell("cell-0")
    cell.open()
    weight = fake_v2 / OWN.lstrip("/") / "vendue" / "k123" / "cell-0" / "cpu.weight"
    for guid in ("a", "b", "c"):
        cell.create(guid, limits_for(64, 64))
    assert weight.read_text() == "300"
    cell.released("a")
    assert weight.read_text() == "200"
    cell.released("b")
    cell.released("c")
    assert weight.read_text() == "100", "an empty cell still weighs one process"


def test_v2_oom_kills_come_from_memory_events(fake_v2: Path) -> None:
    cgroup = detect_fake_v2(fake_v2).cell("cell-0").create("g", limits_for(64, 8))
    assert cgroup.oom_kills() == 0
    (cgroup.memory / "memory.events").write_text(
        "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n"
    )
    assert cgroup.oom_kills() == 1


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait(timeout=10)


def test_v2_kill_uses_cgroup_kill_where_the_kernel_has_it(
    fake_v2: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    cgroup = detect_fake_v2(fake_v2).cell("cell-0").create("g", limits_for(64, 8))
    (cgroup.dirs[0] / "cgroup.procs").write_text(f"{sleeper.pid}\n")
    (cgroup.dirs[0] / "cgroup.kill").write_text("")
    cgroup.kill_now()
    assert (cgroup.dirs[0] / "cgroup.kill").read_text() == "1"
    assert sleeper.poll() is None, "the kernel kills (cgroup.kill), not the rep"


def test_v2_kill_without_cgroup_kill_freezes_signals_and_thaws(
    fake_v2: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    cgroup = detect_fake_v2(fake_v2).cell("cell-0").create("g", limits_for(64, 8))
    (cgroup.dirs[0] / "cgroup.procs").write_text(f"{sleeper.pid}\n")
    cgroup.kill_now()
    assert sleeper.wait(timeout=10) == -signal.SIGKILL
    assert (cgroup.dirs[0] / "cgroup.freeze").read_text() == "0", "thawed after the round"


def test_v2_leftovers_and_removal_of_the_levels(fake_v2: Path) -> None:
    cell = detect_fake_v2(fake_v2).cell("cell-0")
    cell.open()
    for guid in ("b", "a"):
        cell.create(guid, limits_for(64, 8))
    assert [c.dirs[0].name for c in cell.leftovers()] == ["a", "b"]
    for path in (fake_v2 / OWN.lstrip("/")).rglob("*"):  # what the kernel does at rmdir: its files go too
        if path.is_file() and path.parent != fake_v2 / OWN.lstrip("/"):
            path.unlink()
    for cgroup in cell.leftovers():
        assert cgroup.remove()
    cell.remove()
    assert not (fake_v2 / OWN.lstrip("/") / "vendue").exists(), "every empty level up to the rep's own cgroup"
    assert (fake_v2 / OWN.lstrip("/")).is_dir(), "not the rep's own"


# --- v1 for real ------------------------------------------------------------------------------------


@pytest.fixture
def v1_cell() -> Iterator[CellCgroups]:
    if os.geteuid() != 0:
        pytest.skip("cgroups need root")
    try:
        cgroups = detect(f"test-{uuid.uuid4().hex[:8]}")
    except CgroupsUnavailable as exc:
        pytest.skip(str(exc))
    if cgroups.version != "cgroup-v1":
        pytest.skip(f"this machine isolates with {cgroups.version}")
    cell = cgroups.cell("cell-t")
    cell.open()
    yield cell
    for cgroup in cell.leftovers():
        cgroup.kill_now()
        asyncio.run(cgroup.kill())
    cell.remove()
    assert not any(h.base.exists() for h in cgroups.hierarchies), "the test leaves no cgroup behind"


def test_v1_limits_are_set_in_each_hierarchy(v1_cell: CellCgroups) -> None:
    cgroup = v1_cell.create("g", limits_for(96, 33))
    by_name = {name: path for path in cgroup.dirs for name in os.listdir(path)}
    assert by_name["memory.limit_in_bytes"].joinpath("memory.limit_in_bytes").read_text().strip() == str(
        96 * 2**20
    )
    if "memory.memsw.limit_in_bytes" in by_name:
        assert (cgroup.memory / "memory.memsw.limit_in_bytes").read_text().strip() == str(96 * 2**20)
    assert by_name["pids.max"].joinpath("pids.max").read_text().strip() == "33"
    assert by_name["cpu.shares"].joinpath("cpu.shares").read_text().strip() == str(cpu_shares(96))
    assert cgroup.remove()


def test_v1_cell_shares_grow_with_its_instances_and_shrink_as_they_go(v1_cell: CellCgroups) -> None:
    cgroups = [v1_cell.create(f"g{i}", limits_for(32, 16)) for i in range(3)]
    [cpu_cell] = [path.parent for path in cgroups[0].dirs if (path / "cpu.shares").exists()]
    assert (cpu_cell / "cpu.shares").read_text().strip() == "3072", "1024 shares per instance, as 3 processes"
    for i, cgroup in enumerate(cgroups):
        assert cgroup.remove()
        v1_cell.released(f"g{i}")
    assert (cpu_cell / "cpu.shares").read_text().strip() == "1024"


def test_v1_a_child_joins_before_exec_and_stop_kills_what_ignores_sigterm(v1_cell: CellCgroups) -> None:
    cgroup = v1_cell.create("g", limits_for(64, 16))
    script = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
              "print('ready', flush=True); time.sleep(60)")
    proc = subprocess.Popen(["/usr/bin/python3", "-c", script], stdout=subprocess.PIPE,
                            preexec_fn=child_preexec(cgroup_procs=cgroup.procs_files, uid=65534, gid=65534))
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        assert cgroup.pids() == {proc.pid}
        assert Path(f"/proc/{proc.pid}/status").read_text().count("65534") >= 2, "runs as the user given"

        gone = asyncio.run(cgroup.stop(0.3))

        assert gone and proc.wait(timeout=10) == -signal.SIGKILL
        assert not any(path.exists() for path in cgroup.dirs)
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_v1_the_oom_killer_is_counted(v1_cell: CellCgroups) -> None:
    cgroup = v1_cell.create("g", limits_for(16, 16))
    proc = subprocess.run(["/usr/bin/python3", "-c", "x = b'x' * (64 * 2**20)"], timeout=30,
                          preexec_fn=child_preexec(cgroup_procs=cgroup.procs_files), check=False)
    assert proc.returncode == -signal.SIGKILL
    assert cgroup.oom_kills() >= 1
    assert cgroup.remove()

