"""Bearer tokens, for people and scripts (components use their certificates)."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, Field

from .fields import MAX_NAME_CHARS, Open, Strict, no_nul

TokenRole = Literal["admin", "reader"]  # a bearer token never stands for a component
TOKEN_ROLES: tuple[str, ...] = get_args(TokenRole)


class TokenCreate(Strict):
    """`POST /v1/tokens` (admin): a new bearer token for a person or a script."""

    role: TokenRole
    # Who it is for, shown in lists and logs.
    name: Annotated[str, Field(max_length=MAX_NAME_CHARS), AfterValidator(no_nul)] = ""
    expires_in_s: float | None = Field(default=None, gt=0, le=10 * 365 * 86400)  # None: never expires
    # api: a bearer token; login: a dashboard login link's, good for one login at /ui/login and nothing else
    # (a browser session is made by that login: `session`, never asked for here).
    purpose: Literal["api", "login"] = "api"


class TokenInfo(Open):
    """A token as listed: never its secret (only its hash is stored)."""

    id: str
    role: str
    name: str
    created_at: float
    expires_at: float | None = None
    revoked: bool = False
    purpose: str = "api"  # api, login or session (TokenCreate)


class TokenCreated(TokenInfo):
    """The answer to a create: the secret, shown this once."""

    token: str


class TokenVerify(Strict):
    """`POST /v1/tokens/verify` (components): who a bearer token a caller presented stands for."""

    token: str = Field(min_length=1, max_length=256)


class TokenIdentity(Open):
    role: str
    name: str
    id: str = ""
