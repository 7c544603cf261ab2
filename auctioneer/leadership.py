"""The auctioneer's election: the "auctioneer" lease, taken and renewed through any BBS replica.

Only the holder runs auctions; every Work it sends carries the lease's fencing token, and a rep refuses a
token older than one it has seen, so a paused old leader cannot place work after a newer one has.

Renewal runs every TTL/3. Leadership is judged locally and conservatively: it lasts until the send time
of the last successful renewal plus the TTL (the BBS counts the TTL from later, when it wrote the row),
so a leader that cannot reach any BBS stops auctioneering before anyone else can take over. And it ends
sooner, as soon as the leader cannot renew (Diego's auctioneer stops when it loses its lock): a renewal
that fails, or has no answer within the request timeout (min(bbs_timeout, TTL/3); it may still be trying
another BBS replica), ends leadership at once, so the running auction is abandoned and nothing more is
dispatched (work already sent stays fenced by the token). It keeps trying, and leads again once a
renewal succeeds: with the same token if the BBS still has it as the owner (nobody took over meanwhile),
else it stands by. A standby tries again as soon as the holder's lease runs out, so it takes over within
one TTL of the leader dying.
A leader that stops gracefully releases the lease (DELETE /v1/leases/auctioneer with its owner and
token): a standby then takes it at its next attempt, within TTL/3, or at once when woken (a request it
could not forward to the old holder wakes it).

No lease, no leader (docs/security.md, Fencing): an auctioneer that cannot reach the lease endpoint, or
gets 404 from it (a BBS without the lease API), stands by and auctions nothing; it keeps trying, sooner
after a failure (common/retry.py's LEASE delays: from 0.2 s, doubling up to TTL/3, jittered). `problem`
says why it has no lease (GET /readyz).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable

import httpx
from pydantic import ValidationError

from common.models import Lease
from common.retry import LEASE as LEASE_RETRIES

log = logging.getLogger("auctioneer.leadership")

LEASE = "auctioneer"
TAKEOVER_SLACK_S = 0.05  # after the holder's expiry, so the BBS sees it expired too


class Leadership:
    def __init__(self, bbs: httpx.AsyncClient, url: str, ttl: float, *, timeout: float = 5.0) -> None:
        self._bbs = bbs
        self.url = url  # where peers forward requests to while this auctioneer leads
        self.ttl = ttl
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._timeout = min(timeout, ttl / 3)
        self.token = 0
        self.holder_url = ""  # the leader's URL as last read from the lease ("" when unknown)
        self.holder_owner = ""
        self._valid_until = 0.0  # monotonic: leadership ends here unless renewed
        self._holder_expires_at = 0.0  # epoch: when the other holder's lease runs out
        self._failures = 0  # attempts in a row without a lease (no answer, 404, or a refusal)
        self._retry_delays = LEASE_RETRIES.capped(ttl / 3).delays()  # after a failure: sooner than TTL/3
        self.attempts = 0  # lease requests sent (takes and renewals), shown in /v1/stats
        # Why the last attempt got no lease answer (None: it got one, held or not); for GET /readyz.
        self.problem: str | None = "the lease has not been asked for yet"
        self._leading = asyncio.Event()
        self._standing_by = asyncio.Event()
        self._standing_by.set()
        self._listeners: list[Callable[[bool], None]] = []
        self._poke = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.terms = 0  # times this auctioneer became leader

    @property
    def leader(self) -> bool:
        return self.token > 0 and time.monotonic() < self._valid_until

    def on_change(self, listener: Callable[[bool], None]) -> None:
        """Call `listener(leader)` whenever this auctioneer becomes leader or stops being it."""
        self._listeners.append(listener)

    async def until_leader(self) -> None:
        await self._leading.wait()

    async def until_standby(self) -> None:
        await self._standing_by.wait()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="auctioneer-lease")

    def wake(self) -> None:
        """Try for the lease now rather than at the next scheduled attempt (e.g. the holder is unreachable:
        it may have released the lease on its way out)."""
        self._poke.set()

    async def stop(self, *, release: bool = True) -> None:
        """Stop renewing; with `release`, give the lease up (DELETE, owner and token) so a standby takes it
        at its next attempt instead of waiting out the TTL. Leadership ends before the release is sent."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        held = self.leader
        self._valid_until = 0.0
        self._settle(False)
        if release and held:
            await self._release()

    async def _release(self) -> None:
        try:
            response = await self._bbs.delete(
                f"/v1/leases/{LEASE}",
                params={"owner": self.owner, "token": self.token},
                timeout=self._timeout,
            )
        except httpx.HTTPError as exc:
            log.warning("lease release failed; it expires instead", extra={"data": {"error": repr(exc)}})
            return
        if response.status_code == 204:
            log.info("lease released", extra={"data": {"token": self.token, "owner": self.owner}})
        else:
            log.warning("lease release refused", extra={"data": {"status": response.status_code,
                                                                  "body": response.text[:200]}})

    # --- the loop -------------------------------------------------------------------------------

    async def _run(self) -> None:
        renew_every = self.ttl / 3
        while True:
            await self._attempt_in_time()
            self._settle(self.leader)
            wait = renew_every
            if self._failures:
                wait = min(wait, next(self._retry_delays))
            if self.leader:  # wake by expiry too: leadership must end on time when renewals fail
                wait = min(wait, max(0.0, self._valid_until - time.monotonic()))
            elif self._holder_expires_at:
                wait = min(wait, max(0.0, self._holder_expires_at - time.time() + TAKEOVER_SLACK_S))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poke.wait(), wait)
            self._poke.clear()
            self._settle(self.leader)

    async def _attempt_in_time(self) -> None:
        """One attempt. A leader whose renewal has no answer within the request timeout steps down while
        the attempt goes on (the failover transport may be trying the next replica): a renewal that
        succeeds late makes it lead again."""
        attempt = asyncio.ensure_future(self._attempt())
        try:
            if self.leader:
                done, _ = await asyncio.wait({attempt}, timeout=self._timeout)
                if not done:
                    self._step_down("the lease renewal is overdue", timeout_s=self._timeout)
            await attempt
        finally:
            attempt.cancel()  # only when this task was cancelled (stop) while it waited

    async def _attempt(self) -> None:
        sent = time.monotonic()
        self.attempts += 1
        try:
            response = await self._bbs.post(
                f"/v1/leases/{LEASE}", json={"owner": self.owner, "url": self.url, "ttl_s": self.ttl},
                timeout=self._timeout,
            )
        except httpx.HTTPError as exc:
            self._failed("no BBS reachable for the lease", error=repr(exc))
            return
        if response.status_code == 404:  # no lease API, no leader: never lead unelected
            self._failed("the BBS has no lease API (404 from POST /v1/leases/auctioneer)")
            return
        try:
            response.raise_for_status()
            lease = Lease.model_validate_json(response.content)
        except (httpx.HTTPError, ValidationError) as exc:
            self._failed(f"the BBS refused the lease ({response.status_code})", error=repr(exc)[:300])
            return
        self._failures = 0
        self._retry_delays.reset()
        self.problem = None
        self.holder_url, self.holder_owner = lease.url, lease.owner
        if lease.held:
            self.token = lease.token
            self._valid_until = sent + self.ttl
            self._holder_expires_at = 0.0
        else:
            self._valid_until = 0.0  # someone else holds it: step down at once
            self._holder_expires_at = lease.expires_at

    def _failed(self, problem: str, **data: str) -> None:
        """An attempt without a lease answer: leadership ends now (it cannot renew); retried sooner; logged
        when the problem is new (not every retry)."""
        self._failures += 1
        if problem != self.problem:
            log.warning("no lease: " + problem, extra={"data": {**data, "leader": self.leader}})
        self.problem = problem
        self._step_down(problem)

    def _step_down(self, why: str, **data: float) -> None:
        """End leadership now (the token is kept: a renewal that succeeds may resume it)."""
        if self.leader:
            log.warning("stepping down: " + why, extra={"data": {**data, "token": self.token}})
        self._valid_until = 0.0
        self._settle(False)

    def _settle(self, leader: bool) -> None:
        """Fire the transition, if any, to `leader`."""
        if leader == self._leading.is_set():
            return
        if leader:
            self.terms += 1
            self._standing_by.clear()
            self._leading.set()
        else:
            self._leading.clear()
            self._standing_by.set()
        log.info(
            "leader" if leader else "standby",
            extra={
                "data": {
                    "token": self.token,
                    "owner": self.owner,
                    "holder": self.holder_owner,
                    "holder_url": self.holder_url,
                }
            },
        )
        for listener in self._listeners:
            listener(leader)
