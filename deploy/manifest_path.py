"""A manifest's `path:` (a directory of the app's code) as the artifact that carries it.

Packing a directory and uploading the blob is deploy/pack.py's work (with `vendue push --path`); when this
build has no deploy.pack, a manifest with a `path:` is refused with a clear error instead of ignoring it.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from common.models import Artifact


class PathUnsupported(Exception):
    """`path:` cannot be turned into an artifact here (no deploy.pack, or it failed): str() says why."""


def artifact_for_path(client: Any, directory: Path) -> Artifact:
    """Pack `directory` and upload it to the cluster's blob store through `client`: the artifact to put
    first in the app's definition (its digest is the content's, so an unchanged directory makes the same
    artifact and no new version)."""
    if not directory.is_dir():
        raise PathUnsupported(f"no such directory {directory}")
    try:
        pack: Any = importlib.import_module("deploy.pack")
    except ModuleNotFoundError as exc:
        if exc.name != "deploy.pack":
            raise
        raise PathUnsupported("this vendue cannot pack a directory (no deploy.pack); give `artifacts:` "
                              "with the digest of an uploaded blob instead") from exc
    made = pack.artifact_for_path(client, directory)
    return made if isinstance(made, Artifact) else Artifact.model_validate(made)
