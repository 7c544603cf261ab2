"""Why an instance's program did not start, in words that name it: `failed to start: program './migrate.sh'
not found in the instance's directory` rather than the bare `[Errno 2] No such file or directory` the OS
gives (uvloop's spawn names neither the program nor where it was looked for)."""

from __future__ import annotations

import errno
from collections.abc import Sequence
from pathlib import Path

SHEBANG_BYTES = 256


class ProgramNotStarted(OSError):
    """The exec of an instance's program failed; str() says which program and why."""

    def __init__(self, code: int | None, description: str) -> None:
        super().__init__(code, description)
        self.description = description

    def __str__(self) -> str:
        return self.description


def program_not_started(exc: OSError, argv: Sequence[str], directory: Path) -> OSError:
    """`exc`, raised by starting `argv` in `directory`, as a ProgramNotStarted that names the program when
    the errno says what the exec found wrong with it; otherwise `exc` itself. A directory that is gone makes
    no such claim (its ENOENT would be the chdir's)."""
    program = argv[0] if argv else ""
    if not program or (exc.filename not in (None, program)) or not directory.is_dir():
        return exc
    why = _exec_failure(exc.errno, program, directory)
    return exc if why is None else ProgramNotStarted(exc.errno, why)


def _exec_failure(code: int | None, program: str, directory: Path) -> str | None:
    shown = repr(program)
    where = _where(program)
    if code == errno.ENOENT:
        interpreter = _interpreter(program, directory)
        if interpreter is not None:
            return f"program {shown}'s interpreter {interpreter!r} (its #! line) is not on the cell"
        return f"program {shown} not found {where}"
    if code == errno.EACCES:
        return f"program {shown} {where} may not be run: permission denied (is it executable? `chmod +x`)"
    if code == errno.ENOEXEC:
        return f"program {shown} {where} is not a program the cell can run (a script needs a #! line)"
    if code == errno.ENOTDIR:
        return f"program {shown} not found {where}: a part of its path is not a directory"
    return None


def _where(program: str) -> str:
    if program.startswith("/"):
        return "on the cell"
    if "/" in program:
        return "in the instance's directory"
    return "on the instance's PATH"


def _interpreter(program: str, directory: Path) -> str | None:
    """The #! interpreter of the program, when the program itself exists: then it is the interpreter the
    OS did not find (ENOENT is all an exec says either way)."""
    path = Path(program) if program.startswith("/") else directory / program if "/" in program else None
    if path is None:
        return None
    try:
        with path.open("rb") as script:
            first = script.read(SHEBANG_BYTES).split(b"\n", 1)[0]
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    return first[2:].decode("utf-8", "replace").strip() or None
