"""One module per resource of Diego's API; each handler takes the call's context and its decoded request
and returns its response message (raising DiegoError, or Vendue's own errors, for a domain error)."""

from __future__ import annotations

from dataclasses import dataclass

from ...core import BBS


@dataclass(frozen=True, slots=True)
class Call:
    bbs: BBS
    sees_env: bool  # env values in answers (admin and cf); a reader sees `***`
