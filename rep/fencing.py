"""Fencing on the rep: work is taken only under the auctioneer lease's current fencing token.

Every HostWork carries the token of the lease its auctioneer held when it ran the auction. The first time
the rep sees a token it has not seen, it asks the BBS for the lease (`GET /v1/leases/auctioneer`):
- a token older than the highest it accepted is refused (a deposed leader; no question asked);
- a token the BBS's current lease does not carry (or no lease at all: no lease, no leader) is refused,
  and the rep keeps serving the real leader, whose token it accepted or will check in turn;
- the token the lease carries is accepted, and becomes the highest.

The highest accepted token is kept in `<data_dir>/fencing-token` (written atomically), so a restarted
rep still refuses a leader older than one it served. Work under the highest accepted token costs one
comparison (the hot path); a refused token is remembered for REFUSAL_CACHE_S so a deposed leader's burst
costs one question to the BBS, not one per request.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

log = logging.getLogger("rep.fencing")

FENCING_FILE = "fencing-token"
LEASE_NAME = "auctioneer"
REFUSAL_CACHE_S = 1.0
REFUSALS_KEPT = 1024

# The token the auctioneer lease carries now (None: nobody holds it); raises when the BBS cannot tell.
CurrentToken = Callable[[], Awaitable[int | None]]


class Refused(Exception):
    """Work under this token is not taken. `status`: 409 (a stale or unknown token), 503 (not checkable)."""

    def __init__(self, reason: str, status: int = 409) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class Fencing:
    def __init__(self, path: Path, current_token: CurrentToken) -> None:
        self._path = path
        self._current_token = current_token
        self.highest = read_token(path)  # 0: none accepted yet (0 is never a lease's token)
        self._refused: dict[
            int, tuple[float, str, int]
        ] = {}  # token -> (until, reason, status): recent refusals
        self._checking = asyncio.Lock()
        self.lookups = 0  # questions asked of the BBS (tests check the hot path asks none)

    async def admit(self, token: int) -> None:
        """Return when work under `token` may be taken; raise Refused when it may not."""
        if self._settled(token):
            return
        async with self._checking:  # one question at a time: a burst under a new token asks once
            if self._settled(token):  # settled while this one waited: by the question it waited for
                return
            now = time.monotonic()
            cached = self._refused.get(token)
            if cached is not None and cached[0] > now:
                raise Refused(cached[1], cached[2])
            refusal = await self._check(token)
            if refusal is not None:
                if len(self._refused) >= REFUSALS_KEPT:
                    self._refused.clear()
                # Its reason and status, not the exception: one raised again would keep every raising
                # frame (and its request body) in its growing traceback.
                self._refused[token] = (now + REFUSAL_CACHE_S, refusal.reason, refusal.status)
                raise refusal
            try:
                await asyncio.to_thread(write_token, self._path, token)
            except OSError as exc:  # still the lease's token: taken, but a restart would not remember it
                log.error("fencing token not saved",
                          extra={"data": {"path": str(self._path), "error": repr(exc)}})
            self.highest = token
            self._refused = {t: r for t, r in self._refused.items() if t > token}
            log.info("fencing token accepted", extra={"data": {"token": token}})

    def _settled(self, token: int) -> bool:
        """True for the token accepted last (the hot path: one comparison); raises Refused for an older one
        (a deposed leader: no question asked). False: the BBS must be asked."""
        if token == self.highest and token:
            return True
        if token < self.highest:
            raise Refused(f"stale fencing token {token} < {self.highest}")
        return False

    async def _check(self, token: int) -> Refused | None:
        """Ask the BBS whether `token` is the current lease's: None when it is, else why not."""
        self.lookups += 1
        try:
            current = await self._current_token()
        except Exception as exc:  # noqa: BLE001 - the BBS cannot tell: nothing is taken on trust
            log.warning("fencing token not checkable", extra={"data": {"token": token, "error": repr(exc)}})
            return Refused(f"fencing token {token} could not be checked: the BBS did not answer", 503)
        if current == token:
            return None
        log.warning("work under an unknown fencing token refused",
                    extra={"data": {"token": token, "lease_token": current}})
        held = f"the lease's is {current}" if current is not None else "nobody holds the lease"
        return Refused(f"unknown fencing token {token} ({held})")


def lease_token_from(bbs: httpx.AsyncClient) -> CurrentToken:
    """The auctioneer lease's token as the BBS says (`bbs`: a client based on its URL, with the rep's
    certificate); None when nobody holds it (404)."""

    async def current() -> int | None:
        response = await bbs.get(f"/v1/leases/{LEASE_NAME}")
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return int(response.json()["token"])

    return current


def read_token(path: Path) -> int:
    """The highest token a previous run accepted (0 when none was, or the file is unreadable)."""
    try:
        return int(path.read_text().strip() or 0)
    except FileNotFoundError:
        return 0
    except (OSError, ValueError) as exc:
        log.warning("fencing token file unreadable; starting from none", extra={"data": {
            "path": str(path), "error": repr(exc)}})
        return 0


def write_token(path: Path, token: int) -> None:
    """Replace the file atomically: a crash leaves the old token or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as out:
        out.write(f"{token}\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
