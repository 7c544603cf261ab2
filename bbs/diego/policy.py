"""The Diego API's authorization table (docs/security.md, docs/diego-api.md): one row per route. Cloud
Foundry's components call it with a certificate of the role `cf` (reads and writes, env values included,
as Diego's own clients see them); people as admin (the same) or reader (reads, env values `***`)."""

from __future__ import annotations

from common.auth import READ_ROLES, Policy, Rule, public, rule

from .events import EVENT_PATHS
from .routes import ROUTES

CF_ROLE = "cf"
READERS = (*READ_ROLES, CF_ROLE)
WRITERS = ("admin", CF_ROLE)
SEES_ENV = frozenset(WRITERS)


def _row(path: str, writes: bool) -> Rule:
    if path == "/v1/ping":
        return public()
    if writes:
        return rule(*WRITERS, why="Cloud Foundry's components and people change what runs")
    return rule(*READERS)


DIEGO_POLICY = Policy({
    **{("POST", r.path): _row(r.path, r.writes) for r in ROUTES},
    **{(method, path): rule(*READERS) for path in EVENT_PATHS for method in ("GET", "POST")},
})
