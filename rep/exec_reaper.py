"""The parent of a command `vendue exec` runs in a container (rep/container_exec.py), as Garden's dadoo is
for `cf ssh`: run as a script of its own (standard library only, `python -I -S`), never imported.

`runc exec --detach` starts the command and exits: the command, runc's child, is then reparented to the
nearest child subreaper above runc, which is this process. So it learns the command's exit status, which a
detached runc never reports, and the rep keeps the status a foreground `runc exec` would give, with the
console socket only a detached runc uses. Usage:

    exec_reaper.py STATUS_FD PID_FILE RUNC_ARGV...

It runs runc (its stdin, stdout and stderr inherited: the command's, without a terminal); once runc
started the command it writes the command's host pid and a newline to STATUS_FD and closes it (nothing
written: runc failed, its status is this process's), then waits for the command and exits with its status
as a shell says it (128 + N for signal N). Orphans reparented to it meanwhile are reaped on the way.
"""

import ctypes
import os
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36
LOST = 255  # the command was not reparented here: no status to give


def shell_status(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def main(argv: list[str]) -> int:
    status_fd, pid_file, runc = int(argv[1]), argv[2], argv[3:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(f"exec: cannot become a child subreaper: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return LOST
    code = subprocess.call(runc)
    if code != 0:
        return 128 - code if code < 0 else code
    with open(pid_file) as f:
        pid = int(f.read().strip())
    os.write(status_fd, f"{pid}\n".encode())
    os.close(status_fd)
    # The command holds its own copies of the pipes: ours go, so that their end is its end.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    while True:
        try:
            reaped, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return LOST
        except InterruptedError:
            continue
        if reaped == pid:
            return shell_status(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
