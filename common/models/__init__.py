"""Wire models: the bodies of every API between client, BBS, auctioneer and rep (pydantic v2)."""

from .fields import *  # noqa: F403
