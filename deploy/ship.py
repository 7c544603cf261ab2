"""`--path DIR` and `--artifact` of `vendue push` and `vendue task run`: the definition's artifacts, and
DIR's code packed (deploy/pack.py) and shipped to the cluster's blob store before the definition names it.

Shipping asks first (HEAD /v1/blobs/{digest}): the same tree packs to the same digest, so pushing unchanged
code again uploads nothing. Otherwise the archive is PUT streamed from its file, a chunk at a time, with a
progress bar when stderr is a terminal (deploy/upload_progress.py). Notes go to stderr: stdout is the
command's own output (`--json`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .artifact_args import ArtifactArgError, parse_artifacts
from .cli_style import USAGE_ERROR, fail
from .pack import READ_BYTES, Packed, PackError, pack
from .terminal_text import echo
from .upload_progress import upload_progress

if TYPE_CHECKING:
    from .bbs_client import BBSClient

PATH_DEST = "."  # --path DIR's code is the instance's directory itself: `./run.sh` runs DIR/run.sh


@dataclass(frozen=True, slots=True)
class Shipped:
    digest: str
    size: int
    uploaded: bool  # False: the store held the digest already


@dataclass(slots=True)
class CodeArtifacts:
    """The artifacts a definition will name; `packed`: DIR's archive, to ship before desiring."""

    artifacts: list[dict[str, Any]] = field(default_factory=list)
    packed: Packed | None = None
    source: Path | None = None

    def ship(self, client: BBSClient, say: Callable[[str], None] = lambda line: echo(line, err=True)) -> None:
        if self.packed is not None:
            shipped = ship(client, self.packed)
            size = _size(shipped.size)
            what = f"{self.source} ({self.packed.files} file(s), {size}) as {shipped.digest}"
            say(f"uploaded {what}" if shipped.uploaded else f"{what}: in the blob store already, not sent")


@contextlib.contextmanager
def code_artifacts(path: Path | None, artifact_texts: list[str] | None) -> Iterator[CodeArtifacts]:
    """The `--artifact` values parsed and `--path` packed (bad input: one line, exit 2, before any request);
    the archive removed when done."""
    try:
        artifacts = parse_artifacts(artifact_texts)
    except ArtifactArgError as exc:
        fail(str(exc), USAGE_ERROR)
    code = CodeArtifacts(artifacts)
    if path is not None:
        try:
            code.packed = pack(path)
        except PackError as exc:
            fail(f"--path: {exc}", USAGE_ERROR)
        code.source = path
        code.artifacts.insert(0, {"digest": code.packed.digest, "dest": PATH_DEST})  # the app's source_blob
    try:
        yield code
    finally:
        if code.packed is not None:
            code.packed.remove()


def ship(client: BBSClient, packed: Packed) -> Shipped:
    """The archive in the cluster's blob store: uploaded unless the store holds its digest already."""
    if client.blob_size(packed.digest) is not None:
        return Shipped(packed.digest, packed.size, uploaded=False)
    with upload_progress(packed.size, f"uploading {_size(packed.size)}") as advance:
        client.upload_blob(packed.digest, read_chunks(packed.path, advance), packed.size)
    return Shipped(packed.digest, packed.size, uploaded=True)


def read_chunks(path: Path, advance: Callable[[int], None] = lambda n: None) -> Iterator[bytes]:
    with path.open("rb") as source:
        while chunk := source.read(READ_BYTES):
            yield chunk
            advance(len(chunk))


def _size(size: int) -> str:
    for unit in ("B", "kB", "MB"):
        if size < 1000:
            return f"{size} {unit}"
        size //= 1000
    return f"{size} GB"
