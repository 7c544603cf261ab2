"""Who sees the values of a desired LRP's or a task's `env` (docs/security.md, "Secrets").

`env` carries an app's secrets (database passwords, API keys). Its values go to an admin's GETs and,
inside start requests and work, to the auctioneer and the reps that run the app; nowhere else. Events
(SSE and NATS), completion callbacks and every other caller's answers show the names only, each value
`***`. `command` is shown as it is, as Diego shows it: secrets belong in `env`.

An artifact's `url` may carry a credential too: an S3 presigned URL's signature is in its query, and a
URL may hold a user and password. Where env values are masked, so are these (`https://***@host/path?***`);
the host and path stay, to say where it comes from.

An image's registry `credentials` (common/models/image.py) go nowhere but to the auctioneer and the reps, in
start requests and work: every answer (an admin's too: the BBS's own reads never need them back), every
event and every callback drops them (`without_credentials`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from fastapi import Request

from common.auth import identity_of

MASK = "***"
SEES_ENV = "admin"  # the one role whose answers carry env values (insecure mode: every caller is one)


def masked_url(url: str) -> str:
    """`url` without what may be a credential: its query and its user information, each `***`."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rsplit('@', 1)[1]}"
    return urlunsplit((parts.scheme, netloc, parts.path, MASK if parts.query else "", ""))


def without_credentials(row: dict[str, Any]) -> dict[str, Any]:
    """`row` (a DesiredLRP, a Task, an event's data) without its image's registry credentials; a copy when
    it had any."""
    image = row.get("image")
    if isinstance(image, dict) and image.get("credentials") is not None:
        return {**row, "image": {k: v for k, v in image.items() if k != "credentials"}}
    return row


def masked_env(row: dict[str, Any]) -> dict[str, Any]:
    """`row` (a DesiredLRP, a Task, an event's data) with every env value `***` and its artifacts' URLs
    masked (masked_url); as it is without either. A copy: the row may be shared with what the auctioneer
    is sent. A `diego` message (bbs/diego) is masked whole: it holds the env too."""
    row = without_credentials(row)
    env = row.get("env")
    artifacts = row.get("artifacts")
    if row.get("diego"):  # the Diego message a definition was desired with holds its env too
        from .diego.mapping import masked_message  # protobuf: loaded only where Diego messages are

        row = {**row, "diego": masked_message(row["diego"], task="task_guid" in row)}
    if artifacts and any(isinstance(a, dict) and a.get("url") for a in artifacts):
        row = {**row, "artifacts": [{**a, "url": masked_url(a["url"])} if isinstance(a, dict) and a.get("url")
                                    else a for a in artifacts]}
    if not env:
        return row
    return {**row, "env": dict.fromkeys(env, MASK)}


def env_for_caller(request: Request, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`rows` as the caller may see them: whole for an admin (but for registry credentials, which nobody
    reads back), env values masked for everyone else."""
    identity = identity_of(request)
    if identity is not None and identity.role == SEES_ENV:
        return [without_credentials(row) for row in rows]
    return [masked_env(row) for row in rows]
