"""Why an instance's command did not start, in words that name the program: `failed to start: program
'./migrate.sh' not found in the instance's directory` rather than the bare `[Errno 2] No such file or
directory` the OS gives (which names neither the program nor where it was looked for)."""

from __future__ import annotations

import errno
from collections.abc import Sequence
from pathlib import Path

PREFIX = "failed to start: "
SHEBANG_BYTES = 256


def describe_start_failure(exc: BaseException, argv: Sequence[str], directory: Path) -> str:
    """The crash reason (an LRP's) or failure reason (a task's) of a start that raised `exc`."""
    program = argv[0] if argv else ""
    if isinstance(exc, OSError) and program and exc.filename == program:
        # subprocess names the program it could not exec (the directory instead when it could not chdir).
        if (why := _exec_failure(exc.errno, program, directory)) is not None:
            return PREFIX + why
    return PREFIX + str(exc)


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
    OS did not find (ENOENT names the program either way)."""
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
