"""Usage per instance: the cgroup readers against fake cgroup files (v1 and v2), the CPU delta between two
samples, and the book that keeps the last two samples of each instance."""

from __future__ import annotations

from pathlib import Path

import pytest

from .cgroups import CellCgroups, InstanceCgroup, detect
from .usage import Limits, Sample, UsageBook, Watched, cpu_fraction, rfc3339

pytestmark = pytest.mark.timeout(30)
MIB = 1024 * 1024


def v1_mount(point: Path, controllers: str) -> str:
    return f"32 31 0:29 / {point} rw,relatime shared:9 - cgroup cgroup rw,{controllers}\n"


def fake_v1(tmp_path: Path, cpu_mounts: tuple[str, ...]) -> CellCgroups:
    root = tmp_path / "cg"
    text = "".join(v1_mount(root / name, name) for name in ("memory", "pids", *cpu_mounts))
    cgroups = detect("k", fs_root=root, mountinfo=text, proc_cgroup="")
    return cgroups.cell("cell-0")


def test_v1_reads_memory_less_inactive_file_cache_and_cpuacct_usage(tmp_path: Path) -> None:
    cell = fake_v1(tmp_path, ("cpu", "cpuacct"))  # mounted apart, as on this machine
    cgroup = cell._instance("i-1")
    assert cgroup.cpuacct is not None and cgroup.cpuacct.parent.parent.parent.parent.name == "cpuacct"
    cgroup.memory.mkdir(parents=True)
    cgroup.cpuacct.mkdir(parents=True)
    (cgroup.memory / "memory.usage_in_bytes").write_text(f"{230 * MIB}\n")
    (cgroup.memory / "memory.stat").write_text(
        f"cache {40 * MIB}\nrss {190 * MIB}\ninactive_file 1\ntotal_inactive_file {30 * MIB}\n")
    (cgroup.cpuacct / "cpuacct.usage").write_text("123456789\n")
    assert cgroup.memory_bytes() == 200 * MIB
    assert cgroup.cpu_ns() == 123456789


def test_v1_cpu_and_cpuacct_mounted_together_are_one_hierarchy(tmp_path: Path) -> None:
    cell = fake_v1(tmp_path, ("cpu,cpuacct",))
    cgroup = cell._instance("i-1")
    assert cgroup.cpuacct is not None and "cpu,cpuacct" in str(cgroup.cpuacct)
    assert len(cgroup.dirs) == 3  # memory, pids, cpu+cpuacct: joined once each


def test_v1_without_cpuacct_has_no_cpu_figure_and_missing_files_read_zero(tmp_path: Path) -> None:
    cgroup = fake_v1(tmp_path, ("cpu",))._instance("i-1")
    assert cgroup.cpuacct is None and cgroup.cpu_ns() is None
    assert cgroup.memory_bytes() == 0  # gone (stopped meanwhile): nothing, not an error


def test_v2_reads_memory_current_less_inactive_file_and_cpu_stat(tmp_path: Path) -> None:
    d = tmp_path / "i-1"
    d.mkdir()
    (d / "memory.current").write_text(f"{210 * MIB}\n")
    (d / "memory.stat").write_text(f"anon {200 * MIB}\nfile {10 * MIB}\ninactive_file {10 * MIB}\n")
    (d / "cpu.stat").write_text("usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n")
    cgroup = InstanceCgroup("cgroup-v2", (d,), d, d, d)
    assert (cgroup.memory_bytes(), cgroup.cpu_ns()) == (200 * MIB, 2_500_000)


def sample(wall_s: float, cpu_s: float | None) -> Sample:
    return Sample(int(wall_s * 1e9), None if cpu_s is None else int(cpu_s * 1e9), 0, 0, 0.0)


def test_cpu_is_the_counter_delta_over_the_wall_delta() -> None:
    assert cpu_fraction(sample(10, 4.0), sample(12, 4.5)) == pytest.approx(0.25)
    assert cpu_fraction(sample(10, 4.0), sample(11, 6.0)) == pytest.approx(2.0)  # two cores busy
    assert cpu_fraction(None, sample(12, 4.5)) is None  # one sample says nothing yet
    assert cpu_fraction(sample(10, None), sample(12, 4.5)) is None
    assert cpu_fraction(sample(10, 9.0), sample(12, 1.0)) is None  # the counter went back: a new cgroup
    assert cpu_fraction(sample(10, 1.0), sample(10, 2.0)) is None


def test_the_book_keeps_the_previous_sample_and_forgets_unwatched_instances() -> None:
    now = [0]
    counters = {"cpu": 0, "mem": 100}

    def read() -> tuple[int | None, int, int]:
        return counters["cpu"], counters["mem"], 4096

    book = UsageBook(clock=lambda: now[0])
    book.watch("g1", Watched("web", 3, Limits(256 * MIB, 1024 * MIB), read))
    assert book.usage() == []  # not sampled yet
    book.sample_all()
    [first] = book.usage()
    assert (first.process_guid, first.index, first.instance_guid, first.cpu) == ("web", 3, "g1", None)
    now[0], counters["cpu"], counters["mem"] = 5_000_000_000, 500_000_000, 200 * MIB
    book.sample_all()
    [second] = book.usage()
    assert second.cpu == pytest.approx(0.1)
    assert (second.memory_bytes, second.memory_limit_bytes, second.disk_bytes, second.disk_limit_bytes) == (
        200 * MIB, 256 * MIB, 4096, 1024 * MIB)
    as_json = second.as_json("cell-1")
    assert as_json["cell_id"] == "cell-1" and str(as_json["sampled_at"]).endswith("Z")
    book.unwatch("g1")
    book.sample_all()
    assert book.usage() == []


def test_a_read_that_fails_skips_the_instance_for_the_round() -> None:
    def gone() -> tuple[int | None, int, int]:
        raise FileNotFoundError("its directory went")

    book = UsageBook()
    book.watch("g1", Watched("web", 0, Limits(1, 1), gone))
    book.sample_all()
    assert book.usage() == []


def test_sampled_at_is_rfc3339_utc() -> None:
    assert rfc3339(0.25) == "1970-01-01T00:00:00.250Z"
