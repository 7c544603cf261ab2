"""`--artifact` on `vendue push` and `vendue task run`: an artifact (common/models/artifact.py) in one word.

    sha256:HEX[:DEST]              a blob the cluster's store holds (`vendue blobs list`)
    URL#sha256=HEX[:DEST]          fetched from URL by the cells, which check it hashes to HEX

DEST (default `.`, the instance's directory) is where it goes. The digest rides in the URL's fragment
because a fragment is never sent to the server: the URL the cells fetch is the one before `#`.
"""

from __future__ import annotations

from typing import Any

FLAG = "--artifact"
SYNTAX = "sha256:HEX[:DEST] or URL#sha256=HEX[:DEST]"


class ArtifactArgError(ValueError):
    """One readable line: the flag, the value given, and what is wrong with it."""


def parse_artifact(text: str) -> dict[str, Any]:
    """The wire form of one `--artifact` value ({"digest", "dest"[, "url"]}), checked with the wire model."""
    from pydantic import ValidationError

    from common.models.artifact import Artifact

    url: str | None = None
    if text.startswith("sha256:"):
        spec = text
    else:
        url, sep, fragment = text.rpartition("#")
        if not sep or not fragment.startswith("sha256="):
            raise ArtifactArgError(f"{FLAG} {text!r}: expected {SYNTAX}")
        spec = "sha256:" + fragment.removeprefix("sha256=")
    hex_digest, _, dest = spec.removeprefix("sha256:").partition(":")
    fields: dict[str, Any] = {"digest": f"sha256:{hex_digest}", "dest": dest or "."}
    if url is not None:
        fields["url"] = url
    try:
        return Artifact(**fields).model_dump(mode="json", exclude_none=True)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "artifact"
        why = error["msg"]
        if where == "digest":
            why = "expected 64 lowercase hex digits after sha256"
        raise ArtifactArgError(f"{FLAG} {text!r}: {where}: {why}") from None


def parse_artifacts(texts: list[str] | None) -> list[dict[str, Any]]:
    return [parse_artifact(text) for text in texts or ()]
