"""One answer to a body that fails validation, for every service: 422 with each error's field (`loc`) and
reason (`msg`). The `input` echoed back is made JSON-safe first: a NaN or an Infinity in a body (which
Python's JSON reader accepts) would otherwise fail to serialise and turn the 422 into a 500 that drops
the connection."""

from __future__ import annotations

import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse


def json_safe(value: Any) -> Any:
    """`value` with every non-finite float written as a string ("nan", "inf", "-inf")."""
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


def validation_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    return [json_safe(jsonable_encoder(error)) for error in exc.errors()]


async def _invalid(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return JSONResponse({"detail": validation_errors(exc)}, status_code=422)


def add_validation_handler(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _invalid)
