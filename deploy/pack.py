"""`vendue push --path DIR`: DIR packed into one gzip-compressed tar, the same bytes (so the same digest) for
the same tree wherever and whenever it is packed, so that pushing unchanged code again uploads nothing.

Deterministic: entries sorted by path, every mtime 0, owner 0:0 with no names, modes reduced to 0755 (a
directory, or a file with any execute bit) or 0644, and a gzip header without a time or a file name. What
`.vendueignore` at DIR's top names (gitignore syntax, as `cf push` reads `.cfignore`) is left out, after
DEFAULT_IGNORES. Symbolic links are kept as links when they stay inside DIR; one that leaves it, and any
file that is neither a regular file, a directory nor a link, is refused (the cells' cache would refuse the
archive whole: rep/artifact_cache.py).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

IGNORE_FILE = ".vendueignore"
# As `cf push` leaves out (its defaults, less manifest.yml), plus our own files: the ignore file itself and
# a local cluster's data dir (`vendue up` in the app's directory keeps certificates and logs there).
DEFAULT_IGNORES = (".git/", ".hg/", ".svn/", "_darcs/", ".DS_Store", f"/{IGNORE_FILE}", "/.cfignore",
                   "/.vendue/")
READ_BYTES = 1 << 20


class PackError(ValueError):
    """DIR cannot be packed: the message names the path and why."""


@dataclass(frozen=True, slots=True)
class Packed:
    path: Path  # the archive, in a temporary directory of its own: the caller removes it (`remove`)
    digest: str  # sha256:<hex> of the archive's bytes
    size: int
    files: int  # regular files and links packed

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        self.path.parent.rmdir()


def ignore_spec(root: Path) -> object:
    """The pathspec.GitIgnoreSpec of DEFAULT_IGNORES then DIR/.vendueignore (a later line overrides an
    earlier one, as in git: `!.git/hooks` would not bring back a file of an ignored directory)."""
    from pathspec import GitIgnoreSpec  # here: only `--path` needs it

    lines = list(DEFAULT_IGNORES)
    ignore_file = root / IGNORE_FILE
    if ignore_file.is_file():
        lines += ignore_file.read_text(encoding="utf-8", errors="replace").splitlines()
    try:
        return GitIgnoreSpec.from_lines(lines)
    except (ValueError, TypeError) as exc:  # pathspec's GitWildMatchPatternError is a ValueError
        raise PackError(f"{ignore_file}: {exc}") from None


def included(root: Path) -> Iterator[tuple[str, Path]]:
    """(archive name, path) of every entry to pack, sorted by name, directories before what they hold."""
    spec = ignore_spec(root)
    match = spec.match_file  # type: ignore[attr-defined]

    def walk(directory: Path, prefix: str) -> Iterator[tuple[str, Path]]:
        try:
            names = sorted(os.listdir(directory))
        except OSError as exc:
            raise PackError(f"cannot read {directory}: {exc.strerror}") from None
        for name in names:
            path = directory / name
            relative = f"{prefix}{name}"
            is_dir = path.is_dir() and not path.is_symlink()
            if match(relative + "/" if is_dir else relative):
                continue
            yield relative, path
            if is_dir:
                yield from walk(path, relative + "/")

    yield from walk(root, "")


def _member(root: Path, name: str, path: Path) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(path)
        resolved = os.path.normpath(os.path.join(os.path.dirname(name), target))
        if os.path.isabs(target) or resolved == ".." or resolved.startswith("../"):
            raise PackError(f"{path}: a link to {target!r}, outside {root} (the cells refuse it)")
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
    elif stat.S_ISDIR(st.st_mode):
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    elif stat.S_ISREG(st.st_mode):
        info.size = st.st_size
        info.mode = 0o755 if st.st_mode & 0o111 else 0o644
    else:
        raise PackError(f"{path}: not a regular file, directory or link (a device, FIFO or socket)")
    return info


def pack(directory: Path) -> Packed:
    """Pack `directory` into a temporary .tar.gz (written to disk as it goes, never whole in memory)."""
    root = directory.resolve()
    if not root.is_dir():
        raise PackError(f"{directory}: not a directory")
    out_dir = Path(tempfile.mkdtemp(prefix="vendue-pack-"))
    out = out_dir / "app.tar.gz"
    files = 0
    try:
        with out.open("wb") as raw, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as zipped, \
                tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name, path in included(root):
                info = _member(root, name, path)
                if info.isreg():
                    try:
                        with path.open("rb") as source:
                            tar.addfile(info, source)
                    except OSError as exc:
                        raise PackError(f"cannot read {path}: {exc.strerror}") from None
                else:
                    tar.addfile(info)
                files += not info.isdir()
        digest, size = file_digest(out)
    except BaseException:
        out.unlink(missing_ok=True)
        out_dir.rmdir()
        raise
    return Packed(out, digest, size, files)


def file_digest(path: Path) -> tuple[str, int]:
    """(sha256:<hex>, size) of a file, read a chunk at a time."""
    hasher = hashlib.sha256()
    size = 0
    with path.open("rb") as source:
        while chunk := source.read(READ_BYTES):
            hasher.update(chunk)
            size += len(chunk)
    return "sha256:" + hasher.hexdigest(), size
