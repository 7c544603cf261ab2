import asyncio

import pytest

from common.group_commit import GroupCommit


async def test_items_queued_during_a_batch_form_the_next_batch() -> None:
    batches: list[list[int]] = []
    gate = asyncio.Event()

    async def handle(items: list[int]) -> list[int]:
        batches.append(items)
        if len(batches) == 1:
            await gate.wait()
        return [i * 10 for i in items]

    group: GroupCommit[int, int] = GroupCommit(handle)
    first = asyncio.create_task(group.submit(1))
    await asyncio.sleep(0)
    rest = [asyncio.create_task(group.submit(i)) for i in (2, 3, 4)]
    await asyncio.sleep(0)
    gate.set()
    assert await asyncio.wait_for(asyncio.gather(first, *rest), 5) == [10, 20, 30, 40]
    assert batches == [[1], [2, 3, 4]]


async def test_a_failing_item_fails_only_its_caller() -> None:
    async def handle(items: list[int]) -> list[int]:
        if 2 in items:
            raise ValueError("bad item")
        return items

    group: GroupCommit[int, int] = GroupCommit(handle)
    results = await asyncio.wait_for(
        asyncio.gather(*(group.submit(i) for i in (1, 2, 3)), return_exceptions=True), 5
    )
    assert results[0] == 1 and results[2] == 3
    assert isinstance(results[1], ValueError)


async def test_errors_reach_a_lone_caller() -> None:
    async def handle(items: list[int]) -> list[int]:
        raise RuntimeError("down")

    with pytest.raises(RuntimeError):
        await asyncio.wait_for(GroupCommit(handle).submit(1), 5)


async def test_without_splitting_every_caller_of_a_failed_batch_gets_the_error() -> None:
    calls: list[list[int]] = []

    async def handle(items: list[int]) -> list[int]:
        calls.append(items)
        raise ConnectionError("unreachable")

    group: GroupCommit[int, int] = GroupCommit(handle, split_on_failure=False)
    results = await asyncio.wait_for(
        asyncio.gather(*(group.submit(i) for i in (1, 2, 3)), return_exceptions=True), 5
    )
    assert all(isinstance(r, ConnectionError) for r in results), results
    assert calls == [[1, 2, 3]], f"expected one call for the whole batch, saw {calls}"
