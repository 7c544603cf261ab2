"""/v1/tokens: bearer tokens for people and scripts (the secret is shown once, only its hash is kept)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Response

from common.models import TokenCreate, TokenCreated, TokenIdentity, TokenVerify

from ..errors import NotFound
from ..operations.tokens import Tokens
from .wire import items, operations

Operations = Annotated[Tokens, Depends(operations(lambda bbs: bbs.tokens))]
router = APIRouter()


@router.post("/v1/tokens", status_code=201, response_model=TokenCreated)
async def create_token(body: TokenCreate, ops: Operations) -> dict[str, Any]:
    return await ops.create(body)


@router.get("/v1/tokens")
async def list_tokens(ops: Operations) -> Response:
    return items(await ops.list_all())


@router.post("/v1/tokens/verify", response_model=TokenIdentity)
async def verify_token(body: TokenVerify, ops: Operations) -> dict[str, Any]:
    record = await ops.verify(body.token)
    if record is None:
        raise NotFound("no valid token: unknown, expired or revoked")
    return {"role": record.role, "name": record.name, "id": record.id}


@router.delete("/v1/tokens/{token_id}", status_code=204)
async def revoke_token(
    token_id: Annotated[str, Path(pattern=r"^[0-9A-Za-z_-]{1,32}$")], ops: Operations
) -> Response:
    await ops.revoke(token_id)
    return Response(status_code=204)
