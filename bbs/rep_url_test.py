"""A rep_url the BBS and the auctioneer would call must be a rep's: no link-local or metadata address is
taken at the heartbeat (common/urls.py's filter), and an https rep must present that cell's rep
certificate (bbs/outbound.py)."""

from __future__ import annotations

import pytest

from .conftest import Harness


def presence(cell_id: str, rep_url: str) -> dict:
    return {"cell_id": cell_id, "zone": "z1", "rep_url": rep_url,
            "total": {"memory_mb": 4096, "disk_mb": 8192, "containers": 100}}


@pytest.mark.parametrize("rep_url", [
    "http://169.254.169.254/", "http://[fd00:ec2::254]/", "http://metadata.google.internal/",
    "https://169.254.10.1:1800", "http://2852039166/", "ftp://rep.example/",
])
async def test_a_heartbeat_naming_a_link_local_or_metadata_rep_url_is_422(h: Harness, rep_url: str) -> None:
    response = await h.http.put("/v1/cells", json={"cells": [presence("c1", "http://rep.example:1800"),
                                                             presence("c2", rep_url)]})
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"][-1] == "rep_url"
    assert (await h.http.get("/v1/cells")).json() == {"items": []}, "nothing of the heartbeat was taken"


async def test_a_heartbeat_with_an_ordinary_rep_url_is_taken(h: Harness) -> None:
    response = await h.http.put("/v1/cells", json={"cells": [presence("c1", "https://10.0.0.5:1800")]})
    assert response.status_code == 200, response.text
