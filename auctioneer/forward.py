"""A standby auctioneer's intake: start requests go on to the leader (the lease holder's URL), or back to
the BBS.

A standby never keeps a request. When it knows no leader, or cannot reach it, it hands the request back:
503 with a Retry-After, which the BBS takes as a failed send. The BBS then asks the lease for the leader
again and retries within its retry window (bbs/outbound.py), so the request reaches whoever leads within
moments of an election, rather than waiting here for a leadership that may never come until convergence
re-sent it (30 s later). That is Diego's way: the BBS asks the lock service for the auctioneer's address
for every request, and an auctioneer that does not hold the lock takes no work.
"""

from __future__ import annotations

import logging
import ssl

import httpx
from fastapi.responses import JSONResponse

log = logging.getLogger("auctioneer.forward")

FORWARDED_HEADER = "x-vendue-forwarded"  # a forwarded request is never forwarded again (no loops)
RETRY_AFTER_S = 1  # what a handed-back request's Retry-After says (the BBS retries sooner, with backoff)


class Forwarder:
    def __init__(self, timeout: float, *, verify: ssl.SSLContext | bool = True) -> None:
        """`verify`: the auctioneer's client context (its certificate, the cluster CA): the leader takes
        start requests only from the BBS and from other auctioneers (docs/security.md)."""
        # trust_env=False: the control plane talks to its peers directly, never through an HTTP proxy.
        self._client = httpx.AsyncClient(timeout=timeout, trust_env=False, verify=verify)
        self.forwarded = 0
        self.forward_failures = 0
        self.handed_back = 0

    async def forward(self, leader_url: str, path: str, body: bytes) -> httpx.Response | None:
        """The leader's answer to the same POST, or None when it could not be had."""
        try:
            response = await self._client.post(
                leader_url.rstrip("/") + path,
                content=body,
                headers={"content-type": "application/json", FORWARDED_HEADER: "1"},
            )
        except httpx.HTTPError as exc:
            self.forward_failures += 1
            log.warning(
                "forward to the leader failed", extra={"data": {"leader": leader_url, "error": repr(exc)}}
            )
            return None
        if response.status_code != 202:
            self.forward_failures += 1
            log.warning("the leader refused a forwarded request", extra={"data": {
                "leader": leader_url, "status": response.status_code,
            }})
            return None
        self.forwarded += 1
        return response

    def hand_back(self, leader_url: str) -> JSONResponse:
        """The answer to a request this standby can neither auction nor forward (`leader_url`: the holder
        it could not reach, "" when it knows none)."""
        self.handed_back += 1
        why = f"the leader {leader_url} cannot be reached" if leader_url else "no leader is known"
        return JSONResponse({"detail": f"not the leader, and {why}: ask the lease for the leader and retry"},
                            status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})

    async def aclose(self) -> None:
        await self._client.aclose()
