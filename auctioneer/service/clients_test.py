from auctioneer.service.clients import CONNECTIONS_PER_SHARD, RepClients


async def test_each_cell_always_uses_the_same_small_pool():
    async with RepClients(max_connections=100) as clients:
        assert len(clients._shards) == -(-100 // CONNECTIONS_PER_SHARD)
        cells = [f"cell-{i}" for i in range(200)]
        first = [clients.for_cell(c) for c in cells]
        assert [clients.for_cell(c) for c in cells] == first
        assert len({id(c) for c in first}) == len(clients._shards)  # 200 cells reach every shard


async def test_a_small_limit_is_one_pool():
    async with RepClients(max_connections=4) as clients:
        assert len(clients._shards) == 1
