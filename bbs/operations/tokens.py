"""Bearer tokens: created (the secret shown once, only its SHA-256 kept), listed, revoked, verified on
every request from the database (no cache: a revoked token fails at once on every replica), and the
dashboard's one-time login exchanged for a session token."""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from typing import Any

from common.models import MAX_NAME_CHARS, TokenCreate

from ..errors import NotFound
from ..records import BEARER_PURPOSES, LOGIN_TOKEN, SESSION_TOKEN, TokenRecord
from ..unit_of_work import UnitOfWork

log = logging.getLogger("bbs.tokens")

TOKEN_PREFIX = "vdt_"  # says what a leaked string is (secret scanners match on it)
TOKEN_BYTES = 32


def new_token(role: str, name: str, purpose: str, expires_in_s: float | None,
              now: float) -> tuple[TokenRecord, str]:
    """A token's record and its secret (which only its hash in the record stands for)."""
    secret = TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)
    record = TokenRecord(
        id=secrets.token_hex(8), name=name, role=role, secret_sha256=token_hash(secret), created_at=now,
        expires_at=None if expires_in_s is None else now + expires_in_s, purpose=purpose,
    )
    return record, secret


def token_hash(secret: str) -> str:
    """What is stored of a bearer token: the SHA-256 of the whole string (a 256-bit random secret needs
    no salt or slow hash: nothing can be guessed from it)."""
    return hashlib.sha256(secret.encode()).hexdigest()


class Tokens:
    def __init__(self, uow: UnitOfWork) -> None:
        self.uow = uow

    async def create(self, body: TokenCreate) -> dict[str, Any]:
        """A new token: its secret is in the answer (TokenCreated) and nowhere else, ever."""
        record, secret = new_token(body.role, body.name, body.purpose, body.expires_in_s, time.time())
        async with self.uow.write() as (tx, _):
            await tx.insert_token(record)
        log.info("token created", extra={"data": {"id": record.id, "role": record.role, "name": record.name,
                                                  "purpose": record.purpose}})
        return {**record.to_wire(), "token": secret}

    async def log_in(self, secret: str, session_s: float) -> str | None:
        """A dashboard login: the login token with this secret, when valid, is used up, and the secret of a
        reader session token of `session_s` made in its place is returned; None when there is no such login
        token (unknown, expired, revoked, used already, or a token of another purpose). Logins and sessions
        that can never be used again are deleted meanwhile: each login would otherwise leave two more rows."""
        now = time.time()
        async with self.uow.write() as (tx, _):
            login = await tx.token_by_hash(token_hash(secret))
            if login is None or login.purpose != LOGIN_TOKEN or not login.valid(now):
                return None
            if not await tx.consume_token(login.id, now):
                return None  # another request used it first
            await tx.prune_tokens((LOGIN_TOKEN, SESSION_TOKEN), now)
            name = f"dashboard session of {login.name or 'token ' + login.id}"[:MAX_NAME_CHARS]
            session, session_secret = new_token("reader", name, SESSION_TOKEN, session_s, now)
            await tx.insert_token(session)
        log.info("logged in", extra={"data": {"login_token": login.id, "session_token": session.id}})
        return session_secret

    async def list_all(self) -> list[dict[str, Any]]:
        async with self.uow.read() as tx:
            return [r.to_wire() for r in await tx.list_tokens()]

    async def revoke(self, token_id: str) -> None:
        async with self.uow.write() as (tx, _):
            if not await tx.revoke_token(token_id, time.time()):
                raise NotFound(f"no token with id {token_id!r}")
        log.info("token revoked", extra={"data": {"id": token_id}})

    async def verify(self, secret: str) -> TokenRecord | None:
        """The valid (unrevoked, unexpired) bearer token with this secret, read from the database each time.
        A login token is not one: it is good for one login at /ui/login (`log_in`), nothing else."""
        async with self.uow.read() as tx:
            record = await tx.token_by_hash(token_hash(secret))
        if record is None or record.purpose not in BEARER_PURPOSES or not record.valid(time.time()):
            return None
        return record
