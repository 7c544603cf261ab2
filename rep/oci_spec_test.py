from __future__ import annotations

from rep.oci_spec import CAPS, INIT_PATH, SECCOMP_DENY, BindMount, ContainerSpec, runtime_spec


def spec(**changes: object) -> dict:
    fields: dict = {"rootfs": "/i/rootfs", "argv": ["/bin/sh", "-c", "exec httpd"], "env": {"PORT": "8080"},
                    "cwd": "/www", "hostname": "g1", "netns": "/var/run/netns/vd-1", "cgroup": "vd-1",
                    "host_uid": 100123, "host_gid": 100123, "userns": True,
                    "binds": [BindMount("/b/hosts", "/etc/hosts")]}
    fields.update(changes)
    return runtime_spec(ContainerSpec(**fields))


def test_a_user_namespace_maps_the_containers_root_to_the_instances_uid_alone() -> None:
    s = spec()
    assert s["process"]["user"] == {"uid": 0, "gid": 0, "additionalGids": []}
    assert s["linux"]["uidMappings"] == [{"containerID": 0, "hostID": 100123, "size": 1}]
    assert s["linux"]["gidMappings"] == [{"containerID": 0, "hostID": 100123, "size": 1}]
    assert {"type": "user"} in s["linux"]["namespaces"]
    assert s["process"]["capabilities"]["bounding"] == list(CAPS)
    assert "CAP_SYS_ADMIN" not in CAPS and "CAP_NET_RAW" not in CAPS and "CAP_NET_ADMIN" not in CAPS


def test_without_a_user_namespace_it_runs_as_the_instances_uid_with_no_capabilities() -> None:
    s = spec(userns=False)
    assert s["process"]["user"]["uid"] == 100123
    assert "uidMappings" not in s["linux"]
    assert all(not caps for caps in s["process"]["capabilities"].values())
    assert {"type": "user"} not in s["linux"]["namespaces"]


def test_namespaces_cgroup_and_network_by_path() -> None:
    s = spec()
    kinds = {n["type"]: n.get("path") for n in s["linux"]["namespaces"]}
    assert set(kinds) == {"pid", "ipc", "uts", "mount", "network", "user"}
    assert kinds["network"] == "/var/run/netns/vd-1"
    assert s["linux"]["cgroupsPath"] == "vd-1", "relative: below runc's own cgroup, the instance's"
    assert s["process"]["noNewPrivileges"] is True
    assert s["process"]["args"] == ["/bin/sh", "-c", "exec httpd"]
    assert s["process"]["env"] == ["PORT=8080"]
    assert s["process"]["cwd"] == "/www"


def test_seccomp_refuses_the_kernel_surface_docker_withholds() -> None:
    profile = spec()["linux"]["seccomp"]
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    denied = {name for rule in profile["syscalls"] for name in rule["names"]}
    for call in ("mount", "unshare", "setns", "bpf", "keyctl", "kexec_load", "init_module",
                 "open_by_handle_at", "clone3"):
        assert call in denied, call
    assert "read" not in denied and "clone" not in denied
    assert len(set(SECCOMP_DENY)) == len(SECCOMP_DENY)
    assert "seccomp" not in spec(seccomp=False)["linux"]


def test_mounts_bind_read_only_and_no_sysfs() -> None:
    mounts = spec()["mounts"]
    destinations = [m["destination"] for m in mounts]
    assert "/proc" in destinations and "/sys" not in destinations
    hosts = next(m for m in mounts if m["destination"] == "/etc/hosts")
    assert hosts["source"] == "/b/hosts" and "ro" in hosts["options"]
    app = spec(binds=[BindMount("/i/app", "/www/app", read_only=False)])["mounts"][-1]
    assert app["destination"] == "/www/app" and "rw" in app["options"] and "ro" not in app["options"], \
        "an artifact placed as links is bound read-write: its files are read-only by their owner"


def test_a_user_namespace_made_beforehand_is_joined_by_path() -> None:
    namespaces = spec(userns_path="/run/vendue-userns/k/vd-1")["linux"]["namespaces"]
    assert {"type": "user", "path": "/run/vendue-userns/k/vd-1"} in namespaces
    assert {"type": "user"} in spec()["linux"]["namespaces"], "else runc makes one"


def test_the_init_is_pid_1_bound_read_only_and_the_app_its_child() -> None:
    s = spec(init="/usr/bin/tini-static")
    assert s["process"]["args"] == [INIT_PATH, "-g", "--", "/bin/sh", "-c", "exec httpd"], \
        "tini, its process-group flag, then the app's argv as given"
    init = next(m for m in s["mounts"] if m["destination"] == INIT_PATH)
    assert init["source"] == "/usr/bin/tini-static" and init["type"] == "bind", init
    assert "ro" in init["options"] and "rw" not in init["options"] and "noexec" not in init["options"], init
    assert "-s" not in s["process"]["args"][:3], "pid 1 reaps without being a subreaper"
    assert spec()["process"]["args"] == ["/bin/sh", "-c", "exec httpd"], "without an init the app is pid 1"
    assert all(m["destination"] != INIT_PATH for m in spec()["mounts"])
