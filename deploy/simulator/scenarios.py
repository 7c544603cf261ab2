"""Built-in scenarios for `vendue simulate --scenario NAME`: small data modules, one function each.

Each scenario is cells (zones, sizes, what they already run), apps (instances, memory, disk) and tasks,
deterministic for its seed, plus the strategies it compares by default. The shapes follow Diego's auction
simulation (cloudfoundry/auction, simulation/): cold starts, an imbalanced deploy, AZ balance, a nearly
full cluster; then the DEA and load-mark strategy examples, a production-like cluster and the 250,000
instance scale run. `vendue simulate --scenario NAME --out FILE` writes one as a workload file.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from . import generate
from .sim_input import App, SimInput, app, cell, from_workload
from .workload import HostMetrics, parse_workload

GIB = 1024
# Diego's simulated cell: 100 MB memory, 100 MB disk, 100 containers (generate.diego_cells).
DIEGO_CELL = (100, 100, 100)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str  # one line, for --list-scenarios
    build: Callable[[int], SimInput]  # seed -> what to place
    strategies: tuple[str, ...] = ("diego",)  # compared when --strategy is not given


def _diego_cells(count: int, zones: int = 2, prefill: Callable[[int], list] | None = None) -> list:
    memory, disk, containers = DIEGO_CELL
    return [cell(f"cell-{i}", f"Z{i % zones}", memory, disk, containers, prefill(i) if prefill else ())
            for i in range(count)]


# --- Diego's simulation ----------------------------------------------------------------------------


def cold_start_small(seed: int) -> SimInput:
    """100 Diego cells; 1,000 instances: 600 unique 1 MB apps, 20 x 10 of 2 MB, 10 x 20 of 4 MB."""
    rng = random.Random(seed)
    apps = [app(f"app-{i}", 1, 1, 1) for i in range(600)]
    apps += [app(f"svc-2mb-{i}", 10, 2, 1) for i in range(20)]
    apps += [app(f"svc-4mb-{i}", 20, 4, 1) for i in range(10)]
    rng.shuffle(apps)
    return SimInput("cold-start-small", _diego_cells(100), apps)


def cold_start_large(seed: int) -> SimInput:
    """Diego's large cold start at 100 cells: per cell 72 x 1 MB, 8 x 2 MB, 2 x 4 MB (8,200 instances)."""
    sim = from_workload(parse_workload(generate.cold_start_large(cells=100, zones=2, seed=seed)))
    sim.name = "cold-start-large"
    return sim


def imbalanced(seed: int) -> SimInput:
    """Diego's imbalanced deploy: 95 of 100 cells run 50 unique 1 MB instances; 500 new unique apps."""
    def preloaded(i: int) -> list:
        return [(f"old-{i}-{j}", 0, 1, 1) for j in range(50)] if i < 95 else []

    apps = [app(f"app-{i}", 1, 1, 1) for i in range(500)]
    random.Random(seed).shuffle(apps)
    return SimInput("imbalanced", _diego_cells(100, prefill=preloaded), apps)


def az_distribution(seed: int) -> SimInput:
    """Three zones of 8, 4 and 2 cells (16 GiB); 30 apps of 3-12 instances: is each app spread evenly?"""
    rng = random.Random(seed)
    cells = [cell(f"cell-z{z}-{i}", f"z{z}", 16 * GIB, 32 * GIB, 100)
             for z, count in enumerate((8, 4, 2)) for i in range(count)]
    apps = [app(f"app-{i}", rng.randint(3, 12), rng.choice((128, 256, 512)), 512) for i in range(30)]
    return SimInput("az-distribution", cells, apps)


def low_memory(seed: int) -> SimInput:
    """20 cells of 4 GiB, each 88 % full; 40 apps of 1-3 instances (128 MB-1 GiB) want more than is left."""
    rng = random.Random(seed)
    cells = [cell(f"cell-{i}", f"z{i % 2}", 4 * GIB, 16 * GIB, 100,
                  [(f"old-{i}-{j}", 0, 256, 512) for j in range(14)]) for i in range(20)]
    apps = [app(f"app-{i}", rng.randint(1, 3), rng.choice((128, 256, 512, 1024)), 512) for i in range(40)]
    return SimInput("low-memory", cells, apps)


# --- strategy examples -----------------------------------------------------------------------------


def dea_example(seed: int) -> SimInput:
    """The DEA pool's choice: fewest-instance zone, then fewest-instance cells, then top half by free
    memory."""
    # (cell, zone, memory, instances already running of 256 MB each)
    layout = [("dea-a", "z0", 8 * GIB, 3), ("dea-b", "z0", 8 * GIB, 1), ("dea-c", "z0", 4 * GIB, 1),
              ("dea-d", "z1", 8 * GIB, 2), ("dea-e", "z1", 16 * GIB, 2), ("dea-f", "z1", 2 * GIB, 0)]
    cells = [cell(cid, zone, memory, 4 * memory, 50, [(f"old-{cid}-{j}", 0, 256, 256) for j in range(n)])
             for cid, zone, memory, n in layout]
    apps = [app("web", 4, 512, 512), app("worker", 2, 1024, 1024), app("cron", 1, 256, 256)]
    return SimInput("dea-example", cells, apps)


def loadmark_example(seed: int) -> SimInput:
    """Hosts by load mark: the worked example (83), an idle host, an overloaded one, one over 80 % memory."""
    worked = HostMetrics(
        swap_used_mb=12_000,
        swap_total_mb=32_000,
        mem_used_mb=38 * GIB,
        mem_total_mb=64 * GIB,
        disk_used_mb=1_700_000,
        disk_total_mb=2_500_000,
        load5=5,
        cores=8,
    )
    idle = worked.model_copy(update={"swap_used_mb": 0, "mem_used_mb": 8 * GIB, "disk_used_mb": 250_000,
                                     "load5": 0.5})
    overloaded = worked.model_copy(update={"load5": 40})  # load 40 / 16 = 2.5 > 1: mark 333 > 300
    memory_full = idle.model_copy(update={"mem_used_mb": 56 * GIB})  # 87.5 % > 80 %
    hosts = [("host-worked", "z0", worked), ("host-idle", "z0", idle), ("host-overloaded", "z1", overloaded),
             ("host-memfull", "z1", memory_full), ("host-idle-2", "z1", idle)]
    cells = [cell(cid, zone, 64 * GIB, 2_500_000, 250, host=host) for cid, zone, host in hosts]
    apps = [app("web", 4, 2 * GIB, 1024), app("api", 3, 1 * GIB, 1024), app("batch", 2, 4 * GIB, 2048)]
    return SimInput("loadmark-example", cells, apps)


# --- production-like and scale ---------------------------------------------------------------------


def mixed(seed: int) -> SimInput:
    """Production-like: 60 cells of 16/32/64 GiB in 3 zones, a quarter full, 3,000 long-tail instances."""
    sim = from_workload(parse_workload(generate.mixed(cells=60, zones=3, instances=3000, seed=seed)))
    sim.name = "mixed"
    return sim


SCALE_CELLS, SCALE_APPS, SCALE_INSTANCES = 1000, 5000, 250_000
SCALE_SIZES_MB, SCALE_SIZE_WEIGHTS = (64, 128, 256, 512), (20, 35, 30, 15)


def split_counts(rng: random.Random, apps: int, total: int, low: int = 1, high: int = 99) -> list[int]:
    """`apps` instance counts, each in low..high, drawn uniformly and then nudged to add up to `total`."""
    if not apps * low <= total <= apps * high:
        raise ValueError(f"cannot split {total} instances over {apps} apps of {low}..{high}")
    counts = [rng.randint(low, high) for _ in range(apps)]
    short = total - sum(counts)
    while short:
        k = rng.randrange(apps)
        step = 1 if short > 0 else -1
        if low <= counts[k] + step <= high:
            counts[k] += step
            short -= step
    return counts


def scale_250k(seed: int) -> SimInput:
    """1,000 cells (64 GiB, 400 containers) in 3 zones; 5,000 apps of 1-99 instances (64-512 MB), 250,000
    instances in all: the `benchmark` generator's shape, on cells big enough for all of it."""
    rng = random.Random(seed)
    cells = [cell(f"cell-{i}", f"z{i % 3}", 64 * GIB, 256 * GIB, 400) for i in range(SCALE_CELLS)]
    apps: list[App] = []
    for i, count in enumerate(split_counts(rng, SCALE_APPS, SCALE_INSTANCES)):
        memory = rng.choices(SCALE_SIZES_MB, SCALE_SIZE_WEIGHTS)[0]
        apps.append(app(f"app-{i}", count, memory, 2 * memory))
    return SimInput("scale-250k", cells, apps)


COMPARE = ("diego", "dea", "binpack", "random")

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("cold-start-small", "Diego's cold start: 100 empty 100 MB cells, 1,000 instances of 1-4 MB",
             cold_start_small, COMPARE),
    Scenario("cold-start-large", "Diego's large cold start: 100 cells filled to 96 % by 8,200 instances",
             cold_start_large, COMPARE),
    Scenario("imbalanced", "Diego's imbalanced deploy: 95 of 100 cells preloaded, 500 new apps",
             imbalanced, COMPARE),
    Scenario("az-distribution", "Zones of 8, 4 and 2 cells; 30 apps of 3-12 instances: even spread per app?",
             az_distribution, COMPARE),
    Scenario("low-memory", "A nearly full cluster (88 % used): what fits, what fails and why",
             low_memory, ("diego", "binpack", "dea")),
    Scenario("dea-example", "The DEA example: 6 cells with uneven load in 2 zones, 7 instances",
             dea_example, ("dea", "diego")),
    Scenario("loadmark-example", "The load-mark example: 5 hosts from idle to overloaded, 9 instances",
             loadmark_example, ("loadmark", "diego")),
    Scenario("mixed", "Production-like: 60 mixed cells in 3 zones, prefill, tags, 3,000 long-tail instances",
             mixed, ("diego", "dea", "loadmark", "binpack", "random")),
    Scenario("scale-250k", "Scale: 1,000 cells, 5,000 apps, 250,000 instances in one batch",
             scale_250k, ("diego",)),
)}


def scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r} (expected one of {', '.join(SCENARIOS)})") from None
