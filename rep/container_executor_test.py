from __future__ import annotations

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
