"""The OCI runtime spec (config.json) of one container, as plain data (docs/containers.md, "Container
executor").

What a plain app needs and nothing more, as Garden gives an unprivileged container:
- namespaces: mount, PID, IPC, UTS and a network namespace made beforehand (by path: the CNI plugins
  attached it, rep/cni.py); a user namespace mapping the container's root to the instance's own
  unprivileged uid where the kernel allows one (`userns`), else none and the process runs as that uid;
- cgroups: `cgroupsPath` is relative, so runc puts the container in a cgroup below its own, and runc runs
  in the instance's cgroup (rep/cgroups.py): the limits the process executor sets (memory with swap, pids,
  CPU shares) bound the container and runc alike, and the OOM killer's count is read where it always is;
- capabilities: CAPS, a short list (Docker's default less what plain apps never need: raw sockets, mknod,
  audit, file capabilities); with a user namespace they act on the container's own files only;
- seccomp: rep/oci_spec.SECCOMP_DENY, the syscalls Docker's default profile (moby/profiles/seccomp/
  default.json) withholds from a container without CAP_SYS_ADMIN and the like, refused with EPERM; a
  denylist of those is easier to read than Docker's 300-line allowlist and blocks the same kernel surface
  for a container without those capabilities;
- masked and read-only /proc paths as runc's own `runc spec` default, no /sys (a sysfs mount needs a
  network namespace the container's user namespace owns; plain apps do without), no devices beyond the
  standard null, zero, full, random, urandom, tty;
- an init as pid 1 (`init`: the host's static tini, bound read-only at INIT_PATH) that starts the app as its
  child: the kernel gives a PID namespace's init no default signal actions, so an app as pid 1 that never
  installs a SIGTERM handler would ignore the stop's SIGTERM, and orphans reparented to it would stay zombies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CAPS = (
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID", "CAP_SETUID",
    "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT",
)

SECCOMP_DENY = (
    "acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module", "delete_module",
    "finit_module", "fsconfig", "fsmount", "fsopen", "fspick", "get_kernel_syms", "get_mempolicy",
    "init_module", "ioperm", "iopl", "kcmp", "kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie",
    "mbind", "mount", "mount_setattr", "move_mount", "move_pages", "name_to_handle_at", "nfsservctl",
    "open_by_handle_at", "open_tree", "perf_event_open", "pivot_root", "process_vm_readv",
    "process_vm_writev", "query_module", "quotactl", "quotactl_fd", "reboot", "request_key",
    "set_mempolicy", "setns", "settimeofday", "stime", "swapoff", "swapon", "syslog", "umount", "umount2",
    "unshare", "uselib", "userfaultfd", "ustat", "vm86", "vm86old",
)
# clone3 carries its flags in memory seccomp cannot read: ENOSYS makes libc fall back to clone (Docker's way).
SECCOMP_ENOSYS = ("clone3",)
EPERM, ENOSYS = 1, 38

MASKED_PATHS = (
    "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
    "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
)
READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")

# Where the container's init is bound, and its flags: tini as pid 1 reaps without `-s` (a subreaper is for an
# init that is not pid 1); `-g` forwards a signal to the app's process group, so that a shell waiting on its
# foreground command does not hold a SIGINT or SIGHUP back from it (the stop signals every process anyway).
INIT_PATH = "/.vendue/init"
INIT_ARGS = ("-g", "--")


@dataclass(frozen=True, slots=True)
class BindMount:
    source: str
    destination: str
    read_only: bool = True


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """What differs between containers; `runtime_spec` makes the rest."""

    rootfs: str  # the overlay's merged directory, mounted by the rep
    argv: list[str]
    env: dict[str, str]
    cwd: str
    hostname: str
    netns: str  # path of the network namespace the CNI plugins attached
    cgroup: str  # relative: below runc's own cgroup, which is the instance's
    host_uid: int  # the instance's uid on the host
    host_gid: int
    userns: bool  # map the container's root to host_uid; else run as host_uid without a user namespace
    binds: list[BindMount] = field(default_factory=list)
    seccomp: bool = True
    # The user namespace made with the network namespace (rep/cni.py `make_namespaces`), so that the
    # network namespace is the container's user namespace's: `runc exec` joins the user namespace first,
    # and could not enter a network namespace the host's owns.
    userns_path: str | None = None
    # The host's static init binary, run as pid 1 with the app as its child; None: the app is pid 1.
    init: str | None = None


def process_args(c: ContainerSpec) -> list[str]:
    """The container's argv: the init and its flags before the app's, when there is an init."""
    return [INIT_PATH, *INIT_ARGS, *c.argv] if c.init is not None else list(c.argv)


def _mounts(binds: list[BindMount], userns: bool) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [
        {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
         "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
         "options": ["nosuid", "noexec", "nodev"]},
    ]
    if not userns:  # devpts's gid=5 exists only where the container has its own ids
        mounts[2]["options"] = [*mounts[2]["options"], "gid=5"]
    for bind in binds:
        mounts.append({"destination": bind.destination, "type": "bind", "source": bind.source,
                       "options": ["rbind", "ro" if bind.read_only else "rw", "nosuid", "nodev"]})
    return mounts


def seccomp_profile() -> dict[str, Any]:
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64",
                          "SCMP_ARCH_ARM"],
        "syscalls": [
            {"names": list(SECCOMP_DENY), "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM},
            {"names": list(SECCOMP_ENOSYS), "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS},
        ],
    }


def runtime_spec(c: ContainerSpec) -> dict[str, Any]:
    """config.json for `runc run` (OCI runtime spec 1.0)."""
    uid, gid = (0, 0) if c.userns else (c.host_uid, c.host_gid)
    caps = list(CAPS) if c.userns else []  # without a user namespace its root would be the host's: none
    namespaces: list[dict[str, str]] = [
        {"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"},
        {"type": "network", "path": c.netns},
    ]
    linux: dict[str, Any] = {
        "namespaces": namespaces,
        "cgroupsPath": c.cgroup,
        "resources": {"devices": [{"allow": False, "access": "rwm"}]},
        "maskedPaths": list(MASKED_PATHS),
        "readonlyPaths": list(READONLY_PATHS),
    }
    if c.userns:
        namespaces.append({"type": "user", **({"path": c.userns_path} if c.userns_path else {})})
        linux["uidMappings"] = [{"containerID": 0, "hostID": c.host_uid, "size": 1}]
        linux["gidMappings"] = [{"containerID": 0, "hostID": c.host_gid, "size": 1}]
    if c.seccomp:
        linux["seccomp"] = seccomp_profile()
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": uid, "gid": gid, "additionalGids": []},
            "args": process_args(c),
            "env": [f"{k}={v}" for k, v in c.env.items()],
            "cwd": c.cwd,
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps, "inheritable": [],
                             "ambient": []},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 16384, "soft": 16384}],
            "noNewPrivileges": True,
        },
        "root": {"path": c.rootfs, "readonly": False},
        "hostname": c.hostname,
        "mounts": _mounts([*c.binds, *([BindMount(c.init, INIT_PATH)] if c.init is not None else [])],
                          c.userns),
        "linux": linux,
    }
