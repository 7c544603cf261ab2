"""A manifest's `path:` (a directory of the app's code) as the artifact that carries it.

The directory is packed as `vendue push --path` packs it (deploy/pack.py: the same tree, the same digest)
and shipped to the cluster's blob store (deploy/ship.py: nothing is sent when the store holds the digest).
`--dry-run` packs without shipping, so that its plan compares the code's digest too.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from common.models import Artifact

from .pack import PackError, pack
from .ship import PATH_DEST, ship

if TYPE_CHECKING:
    from .bbs_client import BBSClient


class PathUnsupported(Exception):
    """`path:` cannot be turned into an artifact: str() says why."""


def artifact_for_path(client: BBSClient, directory: Path, *, upload: bool = True) -> Artifact:
    """Pack `directory` (and, with `upload`, ship it): the artifact to put first in the app's definition
    (its digest is the content's, so an unchanged directory makes the same artifact and no new version)."""
    if not directory.is_dir():
        raise PathUnsupported(f"no such directory {directory}")
    try:
        packed = pack(directory)
    except PackError as exc:
        raise PathUnsupported(str(exc)) from exc
    try:
        if upload:
            ship(client, packed)
        return Artifact(digest=packed.digest, dest=PATH_DEST)
    finally:
        packed.remove()
