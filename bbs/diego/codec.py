"""Diego's wire: a request is a protobuf body; every answer is HTTP 200 with a protobuf body whose `error`
field carries a domain error (models.Error: its type and a message). Never JSON on a 2xx: Diego's client
decodes any 2xx as protobuf."""

from __future__ import annotations

from typing import Any

from fastapi.exceptions import RequestValidationError
from google.protobuf.message import DecodeError
from pydantic import ValidationError
from starlette.responses import Response

from ..errors import Conflict, NotFound
from ..quotas import QuotaExceeded
from .mapping import Unsupported
from .pb import diego_pb2 as pb

PROTOBUF = "application/x-protobuf"


class DiegoError(Exception):
    """A domain error, answered 200 with the response's `error` set."""

    def __init__(self, kind: int, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def decode(message_type: Any, body: bytes) -> Any:
    message = message_type()
    try:
        message.ParseFromString(body)
    except DecodeError as exc:
        raise DiegoError(pb.Error.InvalidProtobufMessage,
                         f"the body is not a {message_type.__name__}: {exc}") from exc
    return message


def answer(message: Any) -> Response:
    return Response(message.SerializeToString(), media_type=PROTOBUF)


def _located(errors: list[Any]) -> str:
    parts = []
    for error in errors[:3]:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
        parts.append(f"{where}: {error.get('msg', '')}" if where else str(error.get("msg", "")))
    return "; ".join(parts)


def as_diego_error(exc: Exception, *, exists_is: int = pb.Error.ResourceConflict) -> DiegoError | None:
    """Vendue's errors in Diego's terms (None: not a domain error). `exists_is`: what a Conflict means
    for this call (ResourceExists for a desire, InvalidStateTransition for a task's lifecycle)."""
    if isinstance(exc, DiegoError):
        return exc
    if isinstance(exc, NotFound):
        return DiegoError(pb.Error.ResourceNotFound, str(exc))
    if isinstance(exc, Conflict):
        return DiegoError(exists_is, str(exc))
    if isinstance(exc, Unsupported):
        return DiegoError(pb.Error.InvalidRequest, str(exc))
    if isinstance(exc, ValidationError | RequestValidationError):
        return DiegoError(pb.Error.InvalidRequest, _located(list(exc.errors())))
    if isinstance(exc, QuotaExceeded):
        return DiegoError(pb.Error.InvalidRequest, str(exc))
    return None


def error_answer(response_type: Any, error: DiegoError) -> Response:
    message = response_type()
    message.error.CopyFrom(pb.Error(type=error.kind, message=error.message))  # type: ignore[arg-type]
    return answer(message)
