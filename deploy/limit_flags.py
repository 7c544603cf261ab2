"""The request-limit flags every server command takes (`vendue bbs|auctioneer|rep`): common/limits.py."""

from __future__ import annotations

from typing import Any

import typer

MAX_BODY_BYTES = typer.Option(
    None, "--max-body-bytes", help="Largest request body, bytes; more is 413 [VENDUE_MAX_BODY_BYTES; 1 MiB]."
)
MAX_BULK_BODY_BYTES = typer.Option(
    None, "--max-bulk-body-bytes",
    help="Largest batch between components, bytes [VENDUE_MAX_BULK_BODY_BYTES; 64 MiB].",
)
REQUEST_TIMEOUT = typer.Option(
    None,
    "--request-timeout",
    help="Seconds before an unanswered request is 504 [VENDUE_REQUEST_TIMEOUT; 60].",
)
MAX_CONCURRENT_REQUESTS = typer.Option(
    None, "--max-concurrent-requests",
    help="Requests answered at once; more are 503 [VENDUE_MAX_CONCURRENT_REQUESTS; 1024].",
)


def limit_settings(max_body_bytes: int | None, max_bulk_body_bytes: int | None, request_timeout: float | None,
                   max_concurrent_requests: int | None) -> dict[str, Any]:
    """The flags as settings (None where a flag was not given: the environment decides)."""
    return {"max_body_bytes": max_body_bytes, "max_bulk_body_bytes": max_bulk_body_bytes,
            "request_timeout": request_timeout, "max_concurrent_requests": max_concurrent_requests}
