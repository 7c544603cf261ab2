"""GET /v1/usage: the BBS asks the reps that hold an app's instances, once per rep, and answers what they
measured; a rep that does not answer is named, never waited for beyond its timeout."""

from __future__ import annotations

from typing import Any

from tests.support.bbs_harness import Harness, desire, ref


def item(pg: str, index: int, guid: str, cell_id: str, memory: int = 200 << 20) -> dict[str, Any]:
    return {"process_guid": pg, "index": index, "instance_guid": guid, "cell_id": cell_id, "cpu": 0.03,
            "memory_bytes": memory, "memory_limit_bytes": 256 << 20, "disk_bytes": 1 << 20,
            "disk_limit_bytes": 1 << 30, "sampled_at": "2026-11-29T05:00:00.000Z"}


async def test_an_apps_usage_comes_from_the_reps_of_its_cells_one_request_each(h: Harness) -> None:
    for cell in ("c1", "c2", "c3"):
        await h.heartbeat(cell)
    await desire(h, 3)
    await h.lifecycle("c1", claimed=[ref(0, "a"), ref(1, "b")])
    await h.lifecycle("c2", claimed=[ref(2, "c")])
    h.rec.usage["http://c1.rep"] = [item("web", 1, "b", "c1"), item("web", 0, "a", "c1"),
                                    item("other", 0, "o", "c1"),  # another app's: not this answer's
                                    item("web", 5, "x", "c9")]  # a cell it was not asked about
    # c2's rep does not answer; c3 holds nothing of the app and is not asked
    answer = await h.http.get("/v1/usage", params={"process_guid": "web"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [(i["index"], i["instance_guid"], i["memory_bytes"]) for i in body["items"]] == [
        (0, "a", 200 << 20), (1, "b", 200 << 20)]
    assert body["unreachable"] == ["c2"]
    asked = [url for url, _ in h.rec.sent if "/usage" in url]
    assert sorted(url.split("?")[0] for url in asked) == ["http://c1.rep/usage", "http://c2.rep/usage"], asked

    everything = (await h.http.get("/v1/usage")).json()  # every present cell: c3 too, once
    assert {i["process_guid"] for i in everything["items"]} == {"web", "other"}
    assert everything["unreachable"] == ["c2", "c3"]


async def test_bad_or_unknown_names_are_refused(h: Harness) -> None:
    bad = await h.http.get("/v1/usage", params={"process_guid": "bad name!"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-1] == "process_guid", bad.text
    unknown = await h.http.get("/v1/usage", params={"process_guid": "nope"})
    assert unknown.status_code == 404, unknown.text
    assert not [url for url, _ in h.rec.sent if "/usage" in url]
