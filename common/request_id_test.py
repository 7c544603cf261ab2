from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import httpx
import pytest
import structlog
from fastapi import FastAPI

from .logging import setup_logging
from .request_id import add_request_id


@pytest.fixture
def logged() -> Iterator[io.StringIO]:
    """JSON log lines into a buffer for the test; this process's logging as it was afterwards."""
    root = logging.getLogger()
    handlers, level, config = root.handlers[:], root.level, structlog.get_config()
    buffer = io.StringIO()
    setup_logging("bbs", "info", "json", stream=buffer)
    try:
        yield buffer
    finally:
        root.handlers[:], root.level = handlers, level
        structlog.configure(**config)


def app() -> FastAPI:
    served = FastAPI()

    @served.get("/work")
    async def work() -> dict[str, bool]:
        logging.getLogger("rep.main").info("work taken")
        return {"ok": True}

    add_request_id(served)
    return served


async def get(headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app()), base_url="http://rep") as client:
        return await client.get("/work", headers=headers)


async def test_the_callers_request_id_is_returned_and_on_every_line_logged_for_the_request(logged) -> None:
    response = await get({"X-Request-ID": "auction-7.cell-3"})
    assert response.headers["x-request-id"] == "auction-7.cell-3"
    lines = [json.loads(line) for line in logged.getvalue().splitlines()]
    [line] = [line for line in lines if line["msg"] == "work taken"]
    assert (line["request_id"], line["component"]) == ("auction-7.cell-3", "bbs"), lines


@pytest.mark.parametrize("sent", [None, "", "x" * 129, "a b", "rid\r\nSet-Cookie: x"])
async def test_without_a_usable_request_id_one_is_made(logged, sent: str | None) -> None:
    response = await get(None if sent is None else {"X-Request-ID": sent})
    made = response.headers["x-request-id"]
    assert made != sent and len(made) == 16 and int(made, 16) >= 0, made
    [line] = [json.loads(line) for line in logged.getvalue().splitlines()]
    assert line["request_id"] == made
    second = await get(None if sent is None else {"X-Request-ID": sent})
    assert second.headers["x-request-id"] != made  # one per request
