from __future__ import annotations

import os
from pathlib import Path

import pytest

from rep.container_executor import container_problem
from rep.settings import RepSettings


def test_a_host_without_cni_plugins_is_refused_in_one_line_naming_them(tmp_path: Path) -> None:
    problem = container_problem(tmp_path)
    assert problem is not None and "\n" not in problem
    assert problem.startswith("--executor container: missing")
    assert f"the CNI plugins bridge, host-local, portmap, loopback in {tmp_path}" in problem


def test_the_container_subnet_is_checked() -> None:
    assert RepSettings(container_subnet="198.19.4.0/24").container_subnet == "198.19.4.0/24"
    for bad in ("198.19.4.1/24", "fd00::/64", "10.0.0.0/30", "nonsense"):
        with pytest.raises(ValueError):
            RepSettings(container_subnet=bad)


def test_a_container_cell_adds_the_image_stack_and_keeps_its_own() -> None:
    from rep.main import stacks_of

    assert stacks_of(RepSettings(executor="container")) == ["cflinuxfs4", "docker"]
    assert stacks_of(RepSettings(executor="container", stacks=["docker", "x"])) == ["docker", "x"]
    assert stacks_of(RepSettings(executor="process")) == ["cflinuxfs4"]


def test_artifacts_are_bound_below_the_working_dir_and_image_links_refused(tmp_path: Path) -> None:
    from common.models.artifact import Artifact
    from rep.container_executor import artifact_binds

    cache, directory, rootfs = tmp_path / "cache", tmp_path / "instance", tmp_path / "rootfs"
    tree, single = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    (cache / tree / "sub").mkdir(parents=True)
    (cache / tree / "hello.txt").write_text("hi")
    (cache / tree / "link").symlink_to("hello.txt")
    (cache / single).write_text("conf")
    for placed in ("hello.txt", "sub", "conf/app.conf"):  # as the process executor placed them
        (directory / placed).parent.mkdir(parents=True, exist_ok=True)
        (directory / placed).mkdir() if placed == "sub" else (directory / placed).write_text("x")
    (directory / "link").symlink_to("hello.txt")
    (rootfs / "www").mkdir(parents=True)
    owner = (os.getuid(), os.getgid())
    artifacts = [Artifact(digest=tree, dest="."), Artifact(digest=single, dest="conf/app.conf")]

    binds = artifact_binds(artifacts, lambda d: cache / d, directory, rootfs, "/www", owner, False)

    assert [(b.source, b.destination, b.read_only) for b in binds] == [
        (str(directory / "hello.txt"), "/www/hello.txt", False), (str(directory / "sub"), "/www/sub", False),
        (str(directory / "conf/app.conf"), "/www/conf/app.conf", False)]
    assert (rootfs / "www/hello.txt").is_file() and (rootfs / "www/sub").is_dir()
    assert (rootfs / "www/conf/app.conf").is_file(), "the mount points are made in the root filesystem"
    assert os.readlink(rootfs / "www/link") == "hello.txt", "the tree's own link is copied, not bound"

    (rootfs / "www/conf").rename(rootfs / "elsewhere")
    (rootfs / "www/conf").symlink_to("/etc")  # an image's absolute link: the host's /etc to the rep
    with pytest.raises(OSError, match="/www/conf is a symbolic link in the image"):
        artifact_binds(artifacts[1:], lambda d: cache / d, directory, rootfs, "/www", owner, True)


def test_an_artifact_where_the_overlay_goes_is_refused_naming_it(tmp_path: Path) -> None:
    from common.models.artifact import Artifact
    from rep.container_executor import overlay_clash

    tree = "sha256:" + "c" * 64
    (tmp_path / tree / "upper").mkdir(parents=True)
    assert overlay_clash([Artifact(digest=tree, dest="app")], lambda d: tmp_path / d) is None
    why = overlay_clash([Artifact(digest=tree, dest=".")], lambda d: tmp_path / d)
    assert why is not None and why.startswith("artifact sha256:cccc…") and "'upper'" in why, why
    why = overlay_clash([Artifact(digest=tree, dest="rootfs/x")], lambda d: tmp_path / d)
    assert why is not None and "'rootfs'" in why, why


def test_the_container_init_must_be_a_static_executable_named_when_missing(tmp_path: Path) -> None:
    from rep.container_executor import init_problem

    missing = tmp_path / "tini-static"
    problem = container_problem(tmp_path, init=missing)
    assert problem is not None and "\n" not in problem
    assert f"the container init {missing} (Debian: apt install tini)" in problem, problem
    text = tmp_path / "script"
    text.write_text("#!/bin/sh\n")
    text.chmod(0o755)
    assert init_problem(text) == f"a static container init: {text} is not an executable ELF binary"
    dynamic = Path(os.path.realpath("/bin/sh"))  # every Debian's sh is dynamically linked
    assert init_problem(dynamic) == f"a static container init: {dynamic} is dynamically linked (Debian's " \
        "tini: /usr/bin/tini-static)"
    static = Path("/usr/bin/tini-static")
    if static.is_file():
        assert init_problem(static) is None
    assert RepSettings().container_init == static, "Debian's path by default"
