"""/v1/blobs: the blob store (docs/artifacts.md). Bodies stream both ways: an upload is hashed and stored as
it arrives (the body cap of common/limits.py does not apply: `--blob-max-bytes` does, here), a download is
sent a chunk at a time, whole or one byte range (`Range: bytes=a-b`, 206)."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse

from common.models import DIGEST_PATTERN

from ..operations.blobs import Blobs
from ..store.blobs import BlobInfo, BlobTooLarge, DigestMismatch
from .wire import items, the_bbs


def _operations(request: Request) -> Blobs:
    return the_bbs(request).blobs


Operations = Annotated[Blobs, Depends(_operations)]
DigestPath = Annotated[str, Path(pattern=DIGEST_PATTERN, description="sha256:<64 lowercase hex digits>")]
router = APIRouter()
# What an upload's body is, for the OpenAPI document (FastAPI cannot see a body read as a stream).
BINARY_BODY = {"requestBody": {"required": True, "content": {
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}}
# One range of bytes, `first-last`, `first-` or `-suffix` (RFC 9110 14.1.2). A list of ranges is answered
# whole (allowed: a server may ignore Range); hand-written because Starlette only parses ranges for files.
SINGLE_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class Unsatisfiable(Exception):
    pass


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """[start, end) the Range header asks for, None for the whole blob; Unsatisfiable for a range that
    starts past its end."""
    if not header:
        return None
    match = SINGLE_RANGE.match(header.replace(" ", ""))
    if match is None or match.group(1) == match.group(2) == "":
        return None  # not one byte range: ignored
    first, last = match.groups()
    if first == "":
        suffix = int(last)
        if suffix == 0:
            raise Unsatisfiable()
        return max(0, size - suffix), size
    start = int(first)
    end = size if last == "" else min(size, int(last) + 1)
    if start >= size or (last != "" and int(last) < start):
        raise Unsatisfiable()
    return start, end


def _headers(info: BlobInfo) -> dict[str, str]:
    # Content never changes under a digest: any cache may keep it for ever.
    return {"accept-ranges": "bytes", "etag": f'"{info.digest}"', "cache-control": "private, immutable"}


def _too_large(exc: BlobTooLarge) -> JSONResponse:
    # Connection: close, so the rest of a refused body is not read.
    return JSONResponse({"detail": str(exc)}, status_code=413, headers={"connection": "close"})


@router.put("/v1/blobs/{digest}", status_code=201, openapi_extra=BINARY_BODY)
async def upload_blob(digest: DigestPath, request: Request, ops: Operations) -> Response:
    """Store the body as the blob `digest` (201; 200 when it was stored already). The body's SHA-256 must be
    the digest (else 422, nothing stored); past --blob-max-bytes, 413."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > ops.uow.settings.blob_max_bytes:
        return _too_large(BlobTooLarge(ops.uow.settings.blob_max_bytes))
    try:
        blob, stored = await ops.upload(digest, request.stream())
    except BlobTooLarge as exc:
        return _too_large(exc)
    except DigestMismatch as exc:
        raise RequestValidationError([{"type": "value_error", "loc": ("path", "digest"),
                                       "msg": str(exc), "input": digest}]) from None
    return JSONResponse(blob, status_code=201 if stored else 200)


@router.get("/v1/blobs")
async def list_blobs(ops: Operations) -> Response:
    return items(await ops.list_all())


@router.get("/v1/blobs/{digest}", response_class=StreamingResponse,
            responses={200: {"content": {"application/octet-stream": {}}}, 206: {"description": "A range"}})
async def download_blob(digest: DigestPath, request: Request, ops: Operations) -> Response:
    info = await ops.get(digest)
    headers = _headers(info)
    try:
        wanted = byte_range(request.headers.get("range"), info.size)
    except Unsatisfiable:
        return Response(status_code=416, headers={**headers, "content-range": f"bytes */{info.size}"})
    start, end = wanted if wanted is not None else (0, info.size)
    headers["content-length"] = str(end - start)
    status = 200
    if wanted is not None:
        status = 206
        headers["content-range"] = f"bytes {start}-{end - 1}/{info.size}"
    return StreamingResponse(ops.download(info, start, end), status_code=status, headers=headers,
                             media_type="application/octet-stream")


@router.head("/v1/blobs/{digest}")
async def blob_exists(digest: DigestPath, ops: Operations) -> Response:
    """200 with the blob's size in Content-Length, or 404."""
    info = await ops.get(digest)
    return Response(status_code=200, headers={**_headers(info), "content-length": str(info.size)},
                    media_type="application/octet-stream")


@router.delete("/v1/blobs/{digest}", status_code=204)
async def delete_blob(digest: DigestPath, ops: Operations) -> Response:
    """Remove a blob no desired LRP or task names (409 naming who does)."""
    await ops.delete(digest)
    return Response(status_code=204)
