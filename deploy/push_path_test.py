"""`--path DIR` and `--artifact` (deploy/pack.py, artifact_args.py, ship.py, blobs_cmd.py), in-process: the
same tree packs to the same bytes, `.vendueignore` leaves out what it names, the artifact syntax and its
errors, shipping (a HEAD first, the upload skipped when the store holds the digest, else one streamed PUT),
and bad input as one line, exit 2, before any request. A real cluster: tests/cluster/test_push_path.py."""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import os
import tarfile
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from common.procutil import free_port
from rep.start_failure import ProgramNotStarted, program_not_started

from .artifact_args import ArtifactArgError, parse_artifact
from .bbs_client import BBSClient
from .blobs_cmd import blobs_table, human_size
from .cli import _register, app
from .pack import PackError, pack
from .ship import ship
from .upload_progress import upload_progress

_register()
HEX = "ab" * 32


def tree(root: Path, files: dict[str, str], executable: tuple[str, ...] = ()) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755 if name in executable else 0o644)
    return root


def members(archive: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(archive, "r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}


APP = {"run.sh": "#!/bin/sh\nexec python3 server.py\n", "server.py": "print('hi')\n",
       "lib/util.py": "x = 1\n"}


def test_the_same_tree_packs_to_the_same_bytes_whatever_its_times_owners_and_order(tmp_path: Path) -> None:
    first = tree(tmp_path / "a", APP, executable=("run.sh",))
    # The same files written in another order, at other times, with other (same-class) modes.
    second = tmp_path / "b"
    for name in reversed(list(APP)):
        tree(second, {name: APP[name]}, executable=("run.sh",))
    (second / "server.py").chmod(0o600)
    (second / "run.sh").chmod(0o700)
    os.utime(second / "server.py", (1_000_000, 1_000_000))
    a, b = pack(first), pack(second)
    try:
        assert a.digest == b.digest and a.path.read_bytes() == b.path.read_bytes()
        assert a.digest == "sha256:" + hashlib.sha256(a.path.read_bytes()).hexdigest()
        assert a.size == a.path.stat().st_size and a.files == 3
        listed = members(a.path)
        assert list(listed) == ["lib", "lib/util.py", "run.sh", "server.py"], "sorted, directories first"
        assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in listed.values()} == {(0, 0, 0, "", "")}
        assert listed["run.sh"].mode == 0o755 and listed["server.py"].mode == 0o644
        assert listed["lib"].mode == 0o755
        assert gzip.decompress(a.path.read_bytes())  # a plain gzip stream, no name or time in its header
        assert a.path.read_bytes()[4:8] == b"\0\0\0\0", "gzip mtime is 0"
        (second / "server.py").write_text("print('changed')\n")
        c = pack(second)
        assert c.digest != a.digest, "a changed file changes the digest"
        c.remove()
    finally:
        a.remove()
        b.remove()
    assert not a.path.exists() and not a.path.parent.exists()


def test_vendueignore_and_the_defaults_leave_out_what_they_name(tmp_path: Path) -> None:
    root = tree(tmp_path / "app", {
        **APP, ".git/config": "[core]\n", ".vendue/cluster.json": "{}", "sub/.vendue/kept.txt": "kept\n",
        "debug.log": "x", "keep.log": "x", "build/out.bin": "x", "sub/build/also.bin": "x",
        ".vendueignore": "# comments and blank lines are ignored\n\n*.log\n!keep.log\n/build/\n",
    })
    packed = pack(root)
    try:
        names = set(members(packed.path))
    finally:
        packed.remove()
    assert names == {"lib", "lib/util.py", "run.sh", "server.py", "keep.log", "sub", "sub/.vendue",
                     "sub/.vendue/kept.txt", "sub/build", "sub/build/also.bin"}, names


def test_a_link_inside_is_kept_and_one_that_leaves_the_tree_is_refused(tmp_path: Path) -> None:
    root = tree(tmp_path / "app", APP)
    (root / "start").symlink_to("run.sh")
    packed = pack(root)
    try:
        link = members(packed.path)["start"]
        assert link.issym() and link.linkname == "run.sh"
    finally:
        packed.remove()
    (root / "escape").symlink_to("../../etc/passwd")
    with pytest.raises(PackError, match="escape.*outside"):
        pack(root)
    with pytest.raises(PackError, match="not a directory"):
        pack(root / "run.sh")


@pytest.mark.parametrize(("text", "expected"), [
    (f"sha256:{HEX}", {"digest": f"sha256:{HEX}", "dest": "."}),
    (f"sha256:{HEX}:vendor/lib", {"digest": f"sha256:{HEX}", "dest": "vendor/lib"}),
    (f"https://files.example.com/m.tgz?sig=1#sha256={HEX}",
     {"digest": f"sha256:{HEX}", "url": "https://files.example.com/m.tgz?sig=1", "dest": "."}),
    (f"https://files.example.com/m.tgz#sha256={HEX}:data",
     {"digest": f"sha256:{HEX}", "url": "https://files.example.com/m.tgz", "dest": "data"}),
])
def test_artifact_syntax(text: str, expected: dict) -> None:
    assert parse_artifact(text) == expected


@pytest.mark.parametrize(("text", "says"), [
    ("sha256:XYZ", "digest: expected 64 lowercase hex digits"),
    (f"sha256:{HEX.upper()}", "digest"),
    ("https://files.example.com/m.tgz", "expected sha256:HEX[:DEST] or URL#sha256=HEX[:DEST]"),
    (f"https://files.example.com/m.tgz#md5={HEX}", "expected sha256:HEX"),
    (f"ftp://files.example.com/m.tgz#sha256={HEX}", "url:"),
    (f"http://169.254.169.254/latest#sha256={HEX}", "url:"),
    (f"sha256:{HEX}:../up", "dest: Value error, holds '..'"),
    (f"sha256:{HEX}:/abs", "dest: Value error, absolute"),
])
def test_bad_artifact_syntax_names_the_flag_the_value_and_why(text: str, says: str) -> None:
    with pytest.raises(ArtifactArgError) as caught:
        parse_artifact(text)
    message = str(caught.value)
    assert message.startswith(f"--artifact {text!r}: ") and says in message, message
    assert "\n" not in message


def unreachable() -> str:
    return f"http://127.0.0.1:{free_port()}"


@pytest.mark.parametrize(("args", "says"), [
    (["push", "web", "--artifact", "sha256:nope", "--", "x"], "--artifact 'sha256:nope': digest"),
    (["task", "run", "--artifact", "http://h/x", "--", "x"], "--artifact 'http://h/x': expected"),
    (["push", "web", "--path", "/no/such/dir", "--", "x"], "--path: /no/such/dir: not a directory"),
    (["task", "run", "--path", "/no/such/dir", "--", "x"], "--path: /no/such/dir: not a directory"),
    (["blobs", "delete", "not-hex"], "DIGEST: expected sha256:HEX"),
])
def test_bad_input_is_one_line_exit_2_before_any_request(args: list[str], says: str) -> None:
    # The BBS is a port nobody listens on: a request would be exit 1 "cannot reach the BBS".
    result = CliRunner().invoke(app, [*args[:2], "--bbs", unreachable(), *args[2:]])
    assert result.exit_code == 2, f"expected exit 2 for {args}, saw {result.exit_code}: {result.output}"
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines
    assert result.stdout == ""


class FakeStore(httpx.BaseTransport):
    """The blob routes of a BBS, as an httpx transport that reads a body piece by piece as a server would
    (httpx.MockTransport would read it whole first): what was asked, and the sizes of the body's pieces."""

    def __init__(self, held: set[str]) -> None:
        self.held = held
        self.calls: list[tuple[str, str]] = []
        self.pieces: list[int] = []
        self.headers: dict[str, str] = {}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        digest = request.url.path.rpartition("/")[2]
        self.calls.append((request.method, digest))
        if request.method == "HEAD":
            return httpx.Response(200 if digest in self.held else 404, headers={"content-length": "7"})
        assert request.method == "PUT"
        self.headers = dict(request.headers)
        hasher = hashlib.sha256()
        for piece in request.stream:  # type: ignore[union-attr]  # a sync transport's stream
            self.pieces.append(len(piece))
            hasher.update(piece)
        assert "sha256:" + hasher.hexdigest() == digest
        self.held.add(digest)
        return httpx.Response(201, json={"digest": digest, "size": sum(self.pieces)})


def test_shipping_asks_first_and_uploads_only_what_the_store_lacks_streamed(tmp_path: Path) -> None:
    root = tree(tmp_path / "app", {**APP, "blob.bin": os.urandom(3 * 1024 * 1024).hex()})
    packed = pack(root)
    store = FakeStore(held=set())
    client = BBSClient("http://bbs.test", transport=store)
    try:
        first = ship(client, packed)
        assert first.uploaded and store.calls == [("HEAD", packed.digest), ("PUT", packed.digest)]
        assert store.headers["content-length"] == str(packed.size), "the size up front: a 413 before any byte"
        assert "transfer-encoding" not in store.headers
        assert len(store.pieces) > 1 and max(store.pieces) <= 1 << 20, f"streamed in chunks: {store.pieces}"
        again = ship(client, packed)
        assert not again.uploaded and store.calls[2:] == [("HEAD", packed.digest)], store.calls
    finally:
        client.close()
        packed.remove()


@pytest.mark.parametrize(("argv", "code", "make", "says"), [
    (["./migrate.sh"], errno.ENOENT, None, "program './migrate.sh' not found in the instance's directory"),
    (["migrate"], errno.ENOENT, None, "program 'migrate' not found on the instance's PATH"),
    (["/opt/app/run"], errno.ENOENT, None, "program '/opt/app/run' not found on the cell"),
    (["./run.sh"], errno.ENOENT, "#!/usr/bin/python9\n",
     "program './run.sh''s interpreter '/usr/bin/python9' (its #! line) is not on the cell"),
    (["./run.sh"], errno.EACCES, "echo hi\n", "'./run.sh' in the instance's directory may not be run"),
    (["./run.sh"], errno.ENOEXEC, "echo hi\n", "a script needs a #! line"),
])
def test_a_program_that_cannot_start_is_named(tmp_path: Path, argv: list[str], code: int, make: str | None,
                                              says: str) -> None:
    if make is not None:
        (tmp_path / argv[0]).write_text(make)
    for filename in (argv[0], None):  # CPython names the program; uvloop's spawn names nothing
        exc = program_not_started(OSError(code, os.strerror(code), filename), argv, tmp_path)
        assert isinstance(exc, ProgramNotStarted) and exc.errno == code
        assert str(exc).startswith("program ") and says in str(exc), str(exc)


def test_other_start_failures_keep_the_os_words(tmp_path: Path) -> None:
    chdir = FileNotFoundError(errno.ENOENT, "No such file or directory", str(tmp_path))
    assert program_not_started(chdir, ["./x"], tmp_path) is chdir, "the chdir's failure, not the program's"
    gone = FileNotFoundError(errno.ENOENT, "No such file or directory")
    assert program_not_started(gone, ["./x"], tmp_path / "gone") is gone
    other = OSError(errno.E2BIG, "Argument list too long")
    assert program_not_started(other, ["./x"], tmp_path) is other


def test_the_blob_listing_fits_80_columns() -> None:
    from rich.console import Console

    now = datetime.now(UTC)
    listed = [{"digest": "sha256:" + f"{n:x}" * 64, "size": 10**n, "created_at": now.timestamp() - 3600 * n,
               "last_referenced_at": now.timestamp() - 60,
               "referenced_by": [f"desired LRP web-{k}" for k in range(n)] + ["task migrate-nightly"]}
              for n in range(1, 6)]
    out = Console(width=80, file=io.StringIO(), color_system=None, legacy_windows=False)
    out.print(blobs_table(listed, now))
    text = out.file.getvalue()  # type: ignore[attr-defined]
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "sha256:111111111111" in text and "desired LRP web-0" in text and "task migrate-nightly" in text
    assert "100.0 kB" in text, text


def test_no_progress_bar_unless_stderr_is_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    with upload_progress(100, "uploading") as advance:
        advance(50)
    assert capsys.readouterr() == ("", "")


def test_sizes_read_as_people_write_them() -> None:
    assert [human_size(n) for n in (0, 999, 1000, 1_234_567, 5 * 10**9)] == [
        "0 B", "999 B", "1.0 kB", "1.2 MB", "5.0 GB"]


def test_an_archive_of_a_tree_extracts_to_the_same_files(tmp_path: Path) -> None:
    root = tree(tmp_path / "app", APP, executable=("run.sh",))
    packed = pack(root)
    try:
        with tarfile.open(fileobj=io.BytesIO(packed.path.read_bytes()), mode="r:gz") as tar:
            tar.extractall(tmp_path / "out", filter="data")
    finally:
        packed.remove()
    for name, text in APP.items():
        assert (tmp_path / "out" / name).read_text() == text
    assert os.access(tmp_path / "out" / "run.sh", os.X_OK)
