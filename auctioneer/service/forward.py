"""A standby auctioneer's intake: start requests go on to the leader (the lease holder's URL).

When no leader is known, or it cannot be reached, the requests are queued here instead: they are auctioned
if this auctioneer becomes the leader (the BBS's convergence re-sends anything that is never auctioned).
"""

from __future__ import annotations

import logging
import ssl

import httpx

log = logging.getLogger("auctioneer.forward")

FORWARDED_HEADER = "x-vendue-forwarded"  # a forwarded request is never forwarded again (no loops)


class Forwarder:
    def __init__(self, timeout: float, *, verify: ssl.SSLContext | bool = True) -> None:
        """`verify`: the auctioneer's client context (its certificate, the cluster CA): the leader takes
        start requests only from the BBS and from other auctioneers (docs/security.md)."""
        # trust_env=False: the control plane talks to its peers directly, never through an HTTP proxy.
        self._client = httpx.AsyncClient(timeout=timeout, trust_env=False, verify=verify)
        self.forwarded = 0
        self.forward_failures = 0

    async def forward(self, leader_url: str, path: str, body: bytes) -> httpx.Response | None:
        """The leader's answer to the same POST, or None when it could not be had."""
        try:
            response = await self._client.post(
                leader_url.rstrip("/") + path, content=body, headers={"content-type": "application/json", FORWARDED_HEADER: "1"},
            )
        except httpx.HTTPError as exc:
            self.forward_failures += 1
            log.warning("forward to the leader failed", extra={"data": {"leader": leader_url, "error": repr(exc)}})
            return None
        if response.status_code != 202:
            self.forward_failures += 1
            log.warning("the leader refused a forwarded request", extra={"data": {
                "leader": leader_url, "status": response.status_code,
            }})
            return None
        self.forwarded += 1
        return response

    async def aclose(self) -> None:
        await self._client.aclose()
