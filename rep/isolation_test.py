"""Whether and how a rep isolates: its key, the one-line refusals, the directories it makes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.procutil import child_preexec

from .app_users import AppUser
from .cgroups import limits_for
from .isolation import (
    Isolation,
    disown_instance_dir,
    isolation_leftovers,
    isolation_problem,
    make_instance_dir,
    prepare_isolation,
    rep_key,
    sweep_rep,
)
from .settings import RepSettings

pytestmark = pytest.mark.timeout(60)


def test_the_rep_key_comes_from_the_resolved_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    key = rep_key(Path("cells/cell-0"))
    assert key == rep_key(tmp_path / "cells" / "cell-0") and len(key) == 12 and int(key, 16) >= 0
    assert key != rep_key(tmp_path / "cells" / "cell-1")


def test_nothing_to_check_for_the_sim_executor_or_isolation_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert isolation_problem(RepSettings(executor="sim")) is None
    assert isolation_problem(RepSettings(isolation="none")) is None
    assert prepare_isolation(RepSettings(isolation="none")) is None


def test_not_root_is_one_line_naming_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert isolation_problem(RepSettings()) == (
        "cannot isolate instances: not running as root (uid 1000); run as root, or pass --isolation none to "
        "run apps as the rep's own user, unisolated")


def test_no_cgroup_filesystem_is_one_line_naming_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    problem = isolation_problem(RepSettings(cgroup_fs=tmp_path))
    assert problem is not None and "\n" not in problem
    assert problem.startswith(f"cannot isolate instances: no cgroup filesystem mounted under {tmp_path}; ")
    assert problem.endswith("or pass --isolation none to run apps as the rep's own user, unisolated")


def skip_unless_isolating(settings: RepSettings) -> None:
    if os.geteuid() != 0:
        pytest.skip("isolation needs root")
    problem = isolation_problem(settings.model_copy(update={"instances_dir": None}))
    if problem is not None:
        pytest.skip(problem)


def test_an_instances_dir_out_of_the_apps_reach_is_refused(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir(mode=0o700)
    settings = RepSettings(data_dir=tmp_path / "data", instances_dir=hidden / "instances")
    skip_unless_isolating(settings)
    problem = isolation_problem(settings)
    assert problem is not None and problem.startswith(f"instances_dir: {hidden}/instances is out of reach")
    assert "is mode 700" in problem and "--instances-dir" in problem


@pytest.fixture
def isolation(tmp_path: Path) -> Iterator[Isolation]:
    settings = RepSettings(data_dir=tmp_path / "data")
    skip_unless_isolating(settings)
    (tmp_path / "data").mkdir(mode=0o755)
    made = prepare_isolation(settings)
    assert made is not None
    yield made
    made.cgroups.cell("cell-i").remove()
    shutil.rmtree(made.instances_root, ignore_errors=True)


def test_an_isolating_rep_keeps_its_data_dir_to_itself(tmp_path: Path, isolation: Isolation) -> None:
    assert (tmp_path / "data").stat().st_mode & 0o777 == 0o700
    assert isolation.name.split(" ")[0] in ("cgroup-v1", "cgroup-v2")
    assert isolation.name.split(" ")[1] in ("disk:ext4", "disk:poll")
    assert isolation.instances_root.name == rep_key(tmp_path / "data")


def test_a_cell_s_instances_live_where_every_user_can_reach_them(isolation: Isolation) -> None:
    isolation.open_cell("cell-i")
    cell = isolation.instances_dir("cell-i")
    for level in (cell, cell.parent):
        st = level.stat()
        assert (st.st_uid, st.st_mode & 0o777) == (0, 0o711), level
    for step in cell.parents:
        assert step.stat().st_mode & 0o001, f"{step} must be passable by others"


def test_an_instance_dir_is_its_users_and_a_kept_one_goes_back_to_root(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("chown needs root")
    directory = tmp_path / "guid"
    make_instance_dir(directory, AppUser(200123, 200123))
    for path in (directory, directory / "tmp"):
        st = path.stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (200123, 200123, 0o700)

    disown_instance_dir(directory)

    st = directory.stat()
    assert (st.st_uid, st.st_mode & 0o777) == (0, 0o700)


def test_sweeping_a_rep_stopped_for_good_leaves_nothing_of_it(tmp_path: Path, isolation: Isolation) -> None:
    isolation.open_cell("cell-i")
    cgroup = isolation.cgroups.cell("cell-i").create("left", limits_for(64, 8))
    (isolation.instances_dir("cell-i") / "left").mkdir()
    stray = subprocess.Popen(["sleep", "60"], preexec_fn=child_preexec(die_with_parent=False,
                                                                      cgroup_procs=cgroup.procs_files))
    try:
        assert sorted(isolation_leftovers(tmp_path / "data")) == sorted(
            [*(str(h.base) for h in isolation.cgroups.hierarchies), str(isolation.instances_root)])

        sweep_rep(tmp_path / "data")

        assert stray.wait(timeout=30) == -signal.SIGKILL
        assert not isolation.instances_root.exists()
        assert not any(h.base.exists() for h in isolation.cgroups.hierarchies)
        assert isolation_leftovers(tmp_path / "data") == []
    finally:
        stray.kill()
        stray.wait(timeout=30)


def test_sweeping_removes_the_level_of_a_rep_that_died_before_opening_a_cell(
    tmp_path: Path, isolation: Isolation,
) -> None:
    for h in isolation.cgroups.hierarchies:
        h.base.mkdir(parents=True, exist_ok=True)
    assert isolation_leftovers(tmp_path / "data") == [str(h.base) for h in isolation.cgroups.hierarchies]

    sweep_rep(tmp_path / "data")

    assert isolation_leftovers(tmp_path / "data") == []


@pytest.mark.parametrize("how", ["asked", "no mkfs.ext4"])
def test_a_rep_that_cannot_or_may_not_make_filesystems_measures_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    settings = RepSettings(data_dir=tmp_path / "data", disk_quota="poll" if how == "asked" else "auto")
    skip_unless_isolating(settings)
    if how == "no mkfs.ext4":
        monkeypatch.setenv("PATH", str(tmp_path))  # nothing there

    made = prepare_isolation(settings)

    assert made is not None and made.disks is None
    assert made.name in ("cgroup-v1 disk:poll", "cgroup-v2 disk:poll"), made.name
