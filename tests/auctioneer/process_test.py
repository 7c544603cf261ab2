"""`vendue auctioneer` as a real process, against fake reps and a fake BBS served by the test."""

import asyncio
import json
import signal
import sys

import httpx
import pytest

from tests.auctioneer.fakes import WAIT_S, desired, fake_reps, start_request
from tests.fake_bbs import fake_bbs
from tests.support.auctioneer_process import ROOT, auctioneer_process
from tests.support.polling import eventually, expect

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


async def test_50_instances_over_3_cells_cost_one_cell_list_3_state_fetches_and_at_most_3_work_posts(
    tmp_path,
):
    async with fake_reps() as reps, fake_bbs(reps) as bbs:
        for i in range(3):
            reps.add(f"cell-{i}", zone=f"z{i % 2}")
        async with auctioneer_process(tmp_path, "--bbs-url", bbs.url) as (url, proc), \
                httpx.AsyncClient(base_url=url, timeout=10) as client:
            assert (await client.get("/ping")).json() == {"ok": True, "insecure": True}

            async def leading() -> bool:
                stats = (await client.get("/v1/stats")).json()
                return expect(stats["leader"], stats)

            # Elected (the only auctioneer): before that a start request is handed back (503) for a retry.
            await eventually(leading, WAIT_S, "the auctioneer to lead")
            web = desired("web", 50, memory_mb=64)
            response = await client.post("/v1/lrps", json=[start_request(web).model_dump(mode="json")])
            assert response.status_code == 202 and response.json() == {"accepted": 1}

            await eventually(lambda: reps.lrps_received == 50, 30, "50 instances at the reps",
                             lambda: reps.lrps_received)
            stats = {}

            async def settle() -> bool:
                stats.update((await client.get("/v1/stats")).json())
                # Its report to the BBS (what each cell accepted) is sent in the background after the auction.
                return (stats["auctions"] == 1 and stats["pending"] == 0 and not stats["auction_running"]
                        and stats["requests_made"]["bbs"] == 2)

            await eventually(settle, WAIT_S, "one finished auction", lambda: stats)

            assert bbs.cells_calls == 1
            assert sum(reps.state_calls.values()) == 3 and set(reps.state_calls) == {
                "cell-0",
                "cell-1",
                "cell-2",
            }
            assert reps.work_post_count <= 3
            indices = sorted(
                i
                for posts in reps.work_posts.values()
                for w in posts
                for c in w.cells
                for _, i in w.instances(c)
            )
            assert indices == list(range(50))
            assert stats["requests_made"] == {"bbs": 2, "rep_state": 3, "rep_work": reps.work_post_count}
            assert (stats["lrps_placed"], stats["lrps_failed"]) == (50, 0)

            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 15) == 0
        log = (tmp_path / "auctioneer.log").read_text()
        lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
        assert any(entry["msg"] == "auction" and entry["lrps"] == 50 for entry in lines), log
        assert lines[-1]["component"] == "auctioneer"


async def test_bad_flags_exit_2_with_one_line(tmp_path):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from deploy.cli import main; main()", "auctioneer", "--strategy", "nope",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 2
    assert err.decode().strip().startswith("error: --strategy (strategy): unknown strategy 'nope'")
