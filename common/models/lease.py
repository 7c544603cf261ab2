"""Leases: who holds the auctioneer's lease, and its fencing token."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from ..urls import MAX_URL_CHARS
from .fields import MAX_NAME_CHARS, Open, StoreInt, Strict, no_nul


class LeaseRequest(Strict):
    """Take or renew a lease (`POST /v1/leases/{name}`): the same owner renews and keeps its token."""

    owner: Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS), AfterValidator(no_nul)]
    # Where the holder answers: peers forward to it.
    url: Annotated[str, Field(max_length=MAX_URL_CHARS), AfterValidator(no_nul)] = ""
    ttl_s: float = Field(gt=0, le=3600)


class Lease(Open):
    """A lease as it stands: `held` says whether the requester holds it (GET: whether it is unexpired).
    `token` is the fencing token; it grows with every change of holder."""

    held: bool
    owner: str
    url: str = ""
    token: StoreInt
    expires_at: float  # epoch seconds
