import pytest

from common.objective import compile_objective
from common.objective.presets import ALPHA, BETA, DEFAULT_PRESET, DELTA, DIEGO_BLOG, GAMMA, PRESETS, resolve

from .evaluate import BidFacts, InstanceFacts, score


def test_the_weights_sum_to_one():
    assert ALPHA + BETA + GAMMA + DELTA == 1.0


def test_resolve_maps_names_and_the_default_and_leaves_expressions_alone():
    assert resolve("diego-blog") == DIEGO_BLOG
    assert resolve("  diego-blog ") == DIEGO_BLOG
    assert resolve(None) == PRESETS[DEFAULT_PRESET] == DIEGO_BLOG
    assert resolve("") == DIEGO_BLOG
    assert resolve("azs - 1") == "azs - 1"


def bid(zone, **kw):
    return BidFacts(available_memory_mb=kw.get("mem", 1024.0), available_disk_mb=1024.0,
                    total_memory_mb=2048.0, total_disk_mb=2048.0, zone_number=float(zone),
                    running_app_ids=kw.get("running", ()), cached_blobs=kw.get("blobs", frozenset()))


def instance(number=0, app_id=0, total=4, blob=None):
    return InstanceFacts(float(number), float(app_id), float(total), 256.0, 256.0, blob, "cflinuxfs4")


def test_four_zones_app_zero_instance_zero_ranks_zones_3_2_1_4():
    objective = compile_objective("diego-blog")
    values = {zone: score(objective, instance(), bid(zone), 4.0) for zone in (1, 2, 3, 4)}
    assert sorted(values, key=values.get, reverse=True) == [3, 2, 1, 4]


@pytest.mark.parametrize("number, best", [(0, 3), (1, 2), (2, 1), (3, 4), (4, 3)])
def test_successive_instances_go_round_the_zones(number, best):
    objective = compile_objective("diego-blog")
    values = {zone: score(objective, instance(number=number), bid(zone), 4.0) for zone in (1, 2, 3, 4)}
    assert max(values, key=values.get) == best


def test_the_preset_value_term_by_term():
    # zone term: (1 + 5 + 2) mod 4 + 1 = 1; blob cached: 0.25; memory 512/2048 * 0.25; disk 1024/2048 * 0.25;
    # running: 1 of the app's 4 instances here -> 0.25 * (1 - 1/4).
    r = bid(2, mem=512.0, running=(5.0, 9.0), blobs=frozenset({"src"}))
    got = score(compile_objective(None), instance(number=1, app_id=5, total=4, blob="src"), r, 4.0)
    assert got == pytest.approx(1 + 0.25 + 0.25 * 0.25 + 0.25 * 0.5 + 0.25 * 0.75)


def test_the_extra_preferences_break_ties_within_a_zone_step_but_never_reorder_zones():
    objective = compile_objective("diego-blog")
    empty_worse_zone = score(objective, instance(), bid(4, mem=2048.0, blobs=frozenset({"x"})), 4.0)
    full_better_zone = score(objective, instance(blob="x"), bid(1, mem=0.0, running=(0.0,) * 4), 4.0)
    assert full_better_zone > empty_worse_zone
