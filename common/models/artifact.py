"""Artifacts: what an instance's directory is given before its command runs (docs/artifacts.md).

An artifact is a content digest (`sha256:<64 hex>`) and where the bytes come from: the cluster's blob store
(no `url`: `GET /v1/blobs/{digest}` on the BBS) or the user's own http(s) server (`url`, checked against
the digest). `dest` is where it goes, relative to the instance's directory. A definition names at most
MAX_ARTIFACTS of them; they are part of it (stored with it, and what the blob store's garbage collection
keeps).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated

from pydantic import AfterValidator, Field

from ..urls import callback_refusal, http_url
from .fields import Strict, no_nul

DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
# A blob's name everywhere: lowercase hex only, so one blob has one spelling (the store's key).
Digest = Annotated[str, Field(pattern=DIGEST_PATTERN, examples=["sha256:" + "0" * 64])]
MAX_ARTIFACTS = 16  # per desired LRP or task: an app's code, a buildpack's output, a few data files
MAX_DEST_CHARS = 1_024


def artifact_url(text: str) -> str:
    """An absolute http(s) URL the cluster may fetch: never a cloud metadata service or a link-local
    address (the filter of completion callbacks, common/urls.py), in any spelling."""
    http_url(text)
    if (why := callback_refusal(text)) is not None:
        raise ValueError(f"refused artifact URL: {why}")
    return text


def relative_dest(text: str) -> str:
    """A path inside the instance's directory: relative, no `..` part, no NUL or backslash (a backslash is
    a separator to some archive tools and a character to others)."""
    no_nul(text)
    if not text:
        raise ValueError("empty: give a path relative to the instance's directory ('.' for the directory)")
    if "\\" in text:
        raise ValueError("holds a backslash: use '/' between parts")
    path = PurePosixPath(text)
    if path.is_absolute():
        raise ValueError("absolute: give a path relative to the instance's directory")
    if ".." in path.parts:
        raise ValueError("holds '..': the artifact must stay inside the instance's directory")
    return text


def _url_or_none(text: str | None) -> str | None:
    return None if text is None else artifact_url(text)


class Artifact(Strict):
    digest: Digest
    # None: the cluster's blob store holds it. Otherwise the bytes are fetched from here and must hash to
    # `digest`.
    url: Annotated[str | None, AfterValidator(_url_or_none)] = None
    dest: Annotated[str, Field(max_length=MAX_DEST_CHARS), AfterValidator(relative_dest)] = "."


Artifacts = Annotated[list[Artifact], Field(max_length=MAX_ARTIFACTS)]
