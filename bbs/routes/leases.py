"""/v1/leases: the auctioneer has no database; it is elected through any BBS replica."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response

from common.models import INT32_MAX, Lease, LeaseRequest

from ..errors import Conflict, NotFound
from ..operations.leases import Leases
from ..policy import require_lease_holder
from .wire import GuidPath, operations

Operations = Annotated[Leases, Depends(operations(lambda bbs: bbs.leases))]
router = APIRouter()


@router.post("/v1/leases/{name}", response_model=Lease)
async def acquire_lease(
    request: Request, name: GuidPath, body: LeaseRequest, ops: Operations
) -> dict[str, Any]:
    require_lease_holder(request, name)
    held, lease = await ops.take(name, body.owner, url=body.url, ttl=body.ttl_s)
    return {"held": held, "owner": lease.owner, "url": lease.url, "token": lease.token,
            "expires_at": lease.expires_at}


@router.delete("/v1/leases/{name}", status_code=204)
async def release_lease(request: Request, name: GuidPath,
                        owner: Annotated[str, Query(pattern=r"^[^\x00]{1,128}$")],
                        token: Annotated[int, Query(ge=0, le=INT32_MAX)], ops: Operations) -> Response:
    """Give the lease up on a graceful stop, so a standby takes it at once: only its holder may, and
    only for its own term (owner and fencing token); released twice is still 204."""
    require_lease_holder(request, name)
    released = await ops.release(name, owner, token)
    if released is None:
        raise NotFound(f"nobody ever took the lease {name!r}")
    if not released:
        raise Conflict(f"the lease {name!r} is not held by {owner!r} under token {token}")
    return Response(status_code=204)


@router.get("/v1/leases/{name}", response_model=Lease)
async def get_lease(name: GuidPath, ops: Operations) -> dict[str, Any]:
    lease = await ops.held(name)  # unexpired by the database's clock, not this replica's
    if lease is None:
        raise NotFound(f"nobody holds the lease {name!r}")
    return {"held": True, "owner": lease.owner, "url": lease.url, "token": lease.token,
            "expires_at": lease.expires_at}
