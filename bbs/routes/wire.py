"""What the routes share: path and query parameters, request bodies validated straight from their bytes,
list answers encoded once, a client gone cancelling its work, and the BBS an app serves."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.requests import ClientDisconnect

from common.interrupt import Interrupted, unless
from common.models import GUID_PATTERN

from ..core import BBS

GuidPath = Annotated[str, Path(pattern=GUID_PATTERN)]
# A filter names a guid: anything else matches nothing, and a NUL would reach the database (a 500 on
# PostgreSQL).
GuidQuery = Annotated[str | None, Query(pattern=GUID_PATTERN)]
Body = TypeVar("Body", bound=BaseModel)
Result = TypeVar("Result")
Ops = TypeVar("Ops")


def the_bbs(request: Request) -> BBS:
    """The BBS this app serves (create_app keeps it in the app's state)."""
    bbs: BBS = request.app.state.bbs
    return bbs


TheBBS = Annotated[BBS, Depends(the_bbs)]


def operations(pick: Callable[[BBS], Ops]) -> Callable[[Request], Ops]:
    """A route's dependency on the operations it works on: `Depends(operations(lambda bbs: bbs.tasks))`."""

    def the_operations(request: Request) -> Ops:
        return pick(the_bbs(request))

    return the_operations


async def unless_client_gone(request: Request, work: Awaitable[Result]) -> Result:
    """`work`, cancelled if the client disconnects first (ClientDisconnect). A rep whose report timed
    out sends it again; under load, the BBS must not also apply the copy nobody waits for: a
    cancelled report leaves its group commit before its batch starts."""

    async def client_gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    try:
        return await unless(work, client_gone())
    except Interrupted:
        raise ClientDisconnect() from None


def json_body(model: type[Body] | TypeAdapter[Any]) -> Any:
    """The request body as `model` (a model, or a TypeAdapter of plain data), validated straight from
    its bytes by pydantic's JSON parser: for the reps' reports (10,000 instances in one body) that is
    several times faster than FastAPI's json.loads-then-validate. Errors are FastAPI's 422, each
    located under "body" as usual, without the input: for a body that is not JSON that is the raw bytes,
    which need not be UTF-8 (and could be megabytes)."""
    validate = model.validate_json if isinstance(model, TypeAdapter) else model.model_validate_json

    async def parse(request: Request) -> Any:
        try:
            return validate(await request.body())
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False)
            raise RequestValidationError(
                [{**error, "loc": ("body", *error["loc"])} for error in errors]
            ) from None

    return Depends(parse)


def documented_body(model: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` for a route whose body json_body validates: the schema FastAPI cannot see, so that
    clients and the API fuzzer (tests/security/test_schemathesis.py) know it. Self-contained: its
    definitions are written in place (the models are not recursive)."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return inline(definitions[node["$ref"].rsplit("/", 1)[-1]])
            return {key: inline(value) for key, value in node.items()}
        return [inline(value) for value in node] if isinstance(node, list) else node

    return {"requestBody": {"required": True, "content": {"application/json": {"schema": inline(schema)}}}}


def items(rows: list[dict[str, Any]]) -> Response:
    """{"items": [...]} encoded directly: the rows are JSON data already, and FastAPI's generic
    encoder would spend seconds walking a 10,000-instance list."""
    return Response(json.dumps({"items": rows}, separators=(",", ":")), media_type="application/json")
