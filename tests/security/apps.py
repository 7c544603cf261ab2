"""The services' apps without their runtimes, to read their OpenAPI and their middleware: each factory only
keeps what it is given until a request comes."""

from __future__ import annotations

from types import SimpleNamespace

from fastapi import FastAPI


def bbs_app() -> FastAPI:
    from bbs.api import create_app
    from bbs.metrics import BBSMetrics
    from bbs.settings import BBSSettings

    standing_in = SimpleNamespace(settings=BBSSettings(insecure=True), metrics=BBSMetrics())  # all it reads
    return create_app(standing_in, insecure=True)  # type: ignore[arg-type]


def auctioneer_app() -> FastAPI:
    from auctioneer.app import create_app
    from auctioneer.settings import AuctioneerSettings

    return create_app(AuctioneerSettings(insecure=True))


def rep_app() -> FastAPI:
    from rep.api import create_app

    return create_app(None, None, insecure=True)  # type: ignore[arg-type]
