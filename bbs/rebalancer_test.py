"""Rebalancing through the BBS's API in-process (the harness of api_test.py: the auctioneer and the reps
are a recording transport, so the test plays the reps' reports)."""

from __future__ import annotations

import time
from collections import Counter
from types import SimpleNamespace

from tests.support.bbs_harness import Harness, desire, ref, running
from tests.support.polling import eventually

from .rebalancer import AUTOMATIC_ROUNDS

DEADLINE_S = 10.0


async def rows(harness: Harness) -> list[tuple[int, str, str, str]]:
    return sorted((a["index"], a["presence"], a["state"], a["cell_id"]) for a in await harness.actuals())


async def four_on_one_zone(harness: Harness) -> None:
    await harness.heartbeat("c1", zone="z1")
    await harness.heartbeat("c2", zone="z2")
    await desire(harness, 4)
    guids = [f"g{i}" for i in range(4)]
    await harness.lifecycle(
        "c1",
        claimed=[ref(i, g) for i, g in enumerate(guids)],
        running=[running(i, g) for i, g in enumerate(guids)],
    )


async def test_dry_run_plans_with_reasons_and_gains_and_changes_nothing(h: Harness) -> None:  # noqa: F811 - the fixture
    await four_on_one_zone(h)
    before = await rows(h)
    answer = await h.http.post("/v1/rebalance", json={"dry_run": True})
    assert answer.status_code == 200, answer.text
    moves = answer.json()["moves"]
    assert [(m["index"], m["from_cell"], m["to_cell"], m["reason"], m["gain"]) for m in moves] == [
        (3, "c1", "c2", "zone_spread", 2),
        (2, "c1", "c2", "zone_spread", 2),
    ]
    assert await rows(h) == before
    assert (await h.http.get("/v1/rebalance")).json() == {"queued": [], "in_flight": [], "finished": []}


async def test_dry_run_names_an_instance_its_strategy_would_place_elsewhere(h: Harness) -> None:  # noqa: F811 - the fixture
    # one zone: two instances of web share c1 while c2 holds none; Diego's score puts the second elsewhere
    await h.heartbeat("c1")
    await h.heartbeat("c2")
    await desire(h, 2)
    await h.lifecycle(
        "c1", claimed=[ref(0, "g0"), ref(1, "g1")], running=[running(0, "g0"), running(1, "g1")]
    )
    moves = (await h.http.post("/v1/rebalance", json={"dry_run": True})).json()["moves"]
    assert [(m["index"], m["from_cell"], m["to_cell"], m["reason"]) for m in moves] == [
        (1, "c1", "c2", "strategy_margin")
    ]
    assert moves[0]["gain"] > 1000 and moves[0]["detail"].startswith("diego score 1000.")


async def test_loadmark_apps_are_judged_by_the_load_marks_the_heartbeats_report(h: Harness) -> None:  # noqa: F811 - the fixture
    # c1's host swaps (60 %): its load mark is far above c2's, which its heartbeat says is idle
    await h.heartbeat("c1", host={"swap_used_mb": 600, "swap_total_mb": 1000, "cores": 4})
    await h.heartbeat("c2", host={"swap_used_mb": 0, "swap_total_mb": 1000, "cores": 4})
    response = await h.http.post(
        "/v1/desired_lrps",
        json={"process_guid": "web", "instances": 1, "memory_mb": 128, "strategy": "loadmark",
              "command": ["true"]},
    )
    assert response.status_code == 201, response.text
    await h.lifecycle("c1", claimed=[ref(0, "g0")], running=[running(0, "g0")])
    moves = (await h.http.post("/v1/rebalance", json={"dry_run": True})).json()["moves"]
    assert [(m["index"], m["from_cell"], m["to_cell"], m["reason"]) for m in moves] == [
        (0, "c1", "c2", "load_mark")
    ]


BLOB = "https://blobs.example/web.tgz"


async def cached_blob_plan(harness: Harness, source_blob: str | None,
                           strategy: str = "objective") -> list[tuple[int, str, str, str]]:
    """web/0 runs on c1; of the two other cells only c2 caches its source blob; the dry run's moves."""
    await harness.heartbeat("c1")
    await harness.heartbeat("c2", cached_blobs=[BLOB])
    await harness.heartbeat("c3")
    body = {"process_guid": "web", "instances": 1, "memory_mb": 128, "strategy": strategy,
            "command": ["true"], "source_blob": source_blob}
    if strategy == "objective":
        body["objective"] = "count(ai.AppSourceBlobID, r.CachedBlobIDs)"
    response = await harness.http.post("/v1/desired_lrps", json=body)
    assert response.status_code == 201, response.text
    await harness.lifecycle("c1", claimed=[ref(0, "g0")], running=[running(0, "g0")])
    moves = (await harness.http.post("/v1/rebalance", json={"dry_run": True})).json()["moves"]
    return [(m["index"], m["from_cell"], m["to_cell"], m["reason"]) for m in moves]


async def test_objective_apps_are_scored_with_the_blobs_the_heartbeats_say_are_cached(h: Harness) -> None:  # noqa: F811 - the fixture
    # the planner carries the app's source blob and the cells' cached blobs, as the auction does
    assert await cached_blob_plan(h, BLOB) == [(0, "c1", "c2", "strategy_margin")]


async def test_an_objective_app_without_a_source_blob_has_no_cell_to_prefer(h: Harness) -> None:  # noqa: F811 - the fixture
    assert await cached_blob_plan(h, None) == []


async def test_with_a_cache_weight_diego_apps_move_to_a_cell_caching_their_blob(h: Harness) -> None:  # noqa: F811 - the fixture
    # the cells are alike but for c2's cache: a weight of 1 (five times the margin) makes it the better one
    h.bbs.settings.cache_weight = 1.0
    assert await cached_blob_plan(h, BLOB, strategy="diego") == [(0, "c1", "c2", "strategy_margin")]


async def test_without_a_cache_weight_diego_apps_stay_where_diego_put_them(h: Harness) -> None:  # noqa: F811 - the fixture
    assert h.bbs.settings.cache_weight == 0.0
    assert await cached_blob_plan(h, BLOB, strategy="diego") == []


async def test_moves_run_one_at_a_time_and_a_crashing_replacement_is_abandoned(h: Harness) -> None:  # noqa: F811 - the fixture
    await four_on_one_zone(h)
    assert len((await h.http.post("/v1/rebalance", json={})).json()["moves"]) == 2
    # The first move: the old instance keeps running, its replacement is auctioned; the second waits.
    await eventually(lambda: _has(h, (3, "EVACUATING", "RUNNING", "c1")), DEADLINE_S, "index 3 evacuating")
    assert (3, "ORDINARY", "UNCLAIMED", "") in await rows(h)
    assert not [r for r in await rows(h) if r[0] == 2 and r[1] == "EVACUATING"], "one move per app at a time"
    await h.lifecycle("c2", claimed=[ref(3, "n3")], running=[running(3, "n3")])
    await h.settle()
    assert h.rec.stopped() == [("c1", "g3")], "the old instance stops once the new one runs"
    # The second move's replacement crashes on start: abandoned, the old instance is the one again.
    await eventually(lambda: _has(h, (2, "EVACUATING", "RUNNING", "c1")), DEADLINE_S, "index 2 evacuating")
    await h.lifecycle("c2", claimed=[ref(2, "n2")])
    await h.lifecycle("c2", crashed=[{**ref(2, "n2"), "reason": "exited with status 1"}])
    await eventually(lambda: _has(h, (2, "ORDINARY", "RUNNING", "c1")), DEADLINE_S, "index 2 back as it was")
    assert [r for r in await rows(h) if r[0] == 2] == [(2, "ORDINARY", "RUNNING", "c1")]
    status = (await h.http.get("/v1/rebalance")).json()
    assert [(m["index"], m["outcome"]) for m in status["finished"]] == [(3, "completed"), (2, "abandoned")]
    assert status["finished"][1]["why"] == "the new instance crashed"
    metrics = (await h.http.get("/metrics")).text
    for name, value in (("Started", 2), ("Completed", 1), ("Abandoned", 1)):
        assert f"RebalanceMoves{name}_total {value}.0" in metrics, name


async def test_a_move_never_runs_once_the_apps_desired_count_changed(h: Harness) -> None:  # noqa: F811 - the fixture
    await four_on_one_zone(h)
    planned = await h.bbs.rebalancer.plan()
    response = await h.http.patch("/v1/desired_lrps/web", json={"instances": 5})
    assert response.status_code == 200, response.text
    h.bbs.rebalancer.enqueue(planned)
    status = await eventually(lambda: _finished(h, len(planned)), DEADLINE_S, "the moves skipped")
    assert {(m["outcome"], m["why"]) for m in status} == {("skipped", "the app's desired count changed")}
    assert not [r for r in await rows(h) if r[1] == "EVACUATING"]


async def test_an_unknown_app_is_404_and_bad_input_422_naming_the_field(h: Harness) -> None:  # noqa: F811 - the fixture
    assert (await h.http.post("/v1/rebalance", json={"app": "nope"})).status_code == 404
    bad = await h.http.post("/v1/rebalance", json={"max_moves": -1})
    assert bad.status_code == 422 and "max_moves" in bad.text, bad.text


async def _has(harness: Harness, row: tuple[int, str, str, str]) -> bool:
    return row in await rows(harness)


async def _finished(harness: Harness, n: int) -> list[dict] | None:
    finished = (await harness.http.get("/v1/rebalance")).json()["finished"]
    return finished if len(finished) >= n else None


async def _a_cell_joins_two_full_ones(h: Harness) -> float:  # noqa: F811 - the fixture's name
    """Automatic mode on; c1 and c2 hold 3 x 512 MB of web each (of 4 GB), then c3 joins: the time of the
    rebalancer's first look, which saw c1 and c2 only."""
    rebalancer = h.bbs.rebalancer
    rebalancer.settings = h.bbs.settings.model_copy(update={"rebalance_interval": 1.0})
    h.bbs.uow.converger = SimpleNamespace(token=1)  # this replica holds the convergence lease
    await h.heartbeat("c1")
    await h.heartbeat("c2")
    response = await h.http.post(
        "/v1/desired_lrps", json={"process_guid": "web", "instances": 6, "memory_mb": 512,
                                  "command": ["true"]}
    )
    assert response.status_code == 201, response.text
    for cell, indexes in (("c1", (0, 1, 2)), ("c2", (3, 4, 5))):
        await h.lifecycle(cell, claimed=[ref(i, f"g{i}") for i in indexes],
                          running=[running(i, f"g{i}") for i in indexes])
    now = time.time()
    await rebalancer.tick(now)  # the first look: the cluster as found is the start
    assert rebalancer.status() == {"queued": [], "in_flight": [], "finished": []}
    await h.heartbeat("c3")
    return now


async def test_the_automatic_mode_plans_again_after_its_moves_until_a_plan_is_empty(h: Harness) -> None:  # noqa: F811 - the fixture
    # The first move's replacement lands on the other full cell instead of c3 (as when c3 drops out of
    # that auction): a second round mends it.
    rebalancer = h.bbs.rebalancer
    now = await _a_cell_joins_two_full_ones(h)
    landings = 0
    for _ in range(40):
        now += 1.0
        await rebalancer.tick(now)
        for (pg, index), flight in list(rebalancer.progress.in_flight.items()):
            planned = flight.planned.move
            cell = planned.to_cell
            if landings == 0:  # the first lands on the cell neither its source nor its target
                cell = ({"c1", "c2", "c3"} - {planned.from_cell, planned.to_cell}).pop()
            landings += 1
            assert pg == "web", pg
            new = f"n{landings}"
            await h.lifecycle(cell, claimed=[ref(index, new)], running=[running(index, new)])
        if not (rebalancer.progress.queued or rebalancer.progress.in_flight or rebalancer._rounds_left):
            break
    finished = rebalancer.status()["finished"]
    assert finished and all(m["outcome"] == "completed" for m in finished), finished
    first = finished[0]
    assert first["landed_on"] != first["to_cell"], first
    assert first["why"].startswith(
        f"the new instance runs on {first['landed_on']}, not on {first['to_cell']}"
    ), first
    per_cell = Counter(a["cell_id"] for a in await h.actuals() if a["state"] == "RUNNING")
    assert sorted(per_cell.values()) == [2, 2, 2], (
        f"expected the three cells even after the follow-up round, saw {dict(per_cell)}; moves {finished}"
    )
    assert rebalancer._rounds_left == 0, "a plan found nothing to do: the rounds end"


async def test_the_automatic_rounds_end_when_every_move_keeps_failing(h: Harness) -> None:  # noqa: F811 - the fixture
    rebalancer = h.bbs.rebalancer
    now = await _a_cell_joins_two_full_ones(h)
    crashed: set[tuple[int, float]] = set()  # (index, started at): each move's replacement crashes once
    for _ in range(60):
        now += 1.0
        await rebalancer.tick(now)
        for (_pg, index), flight in list(rebalancer.progress.in_flight.items()):
            if (index, flight.started_at) not in crashed:
                crashed.add((index, flight.started_at))
                crashes = len(crashed)
                await h.lifecycle(flight.planned.move.to_cell, claimed=[ref(index, f"n{crashes}")])
                await h.lifecycle(flight.planned.move.to_cell,
                                  crashed=[{**ref(index, f"n{crashes}"), "reason": "exited with status 1"}])
    finished = rebalancer.status()["finished"]
    plans = {(m["index"], m["from_cell"]) for m in finished}
    assert finished and {m["outcome"] for m in finished} == {"abandoned"}, finished
    assert len(finished) == AUTOMATIC_ROUNDS * len(plans), (
        f"expected each of the {len(plans)} moves tried once a round for {AUTOMATIC_ROUNDS} rounds, then "
        f"no more; saw {len(finished)} finished: {[(m['index'], m['outcome']) for m in finished]}"
    )
    progress = rebalancer.progress
    assert rebalancer._rounds_left == 0 and not progress.queued and not progress.in_flight
