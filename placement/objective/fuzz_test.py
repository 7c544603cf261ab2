"""The objective language's evaluation fuzzed: any valid tree, on any facts (infinities, NaN,
negatives, the largest floats), is valued by the tree walker alone (eval, exec and compile fail; getattr
takes only the fields of `ai` and `r`), gives a float, and the vectorised engine gives the same bits; any
objective text at all in an auction fails only its own LRP, with the language's error.

Bounded examples, so CI runs them every time."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from common.objective import ObjectiveError, compile_objective, parse_objective
from placement.testing import lrp_start, same_bits
from tests.support.objective_fuzz import STREAMS, TYPED_TREES, render, sealed

from ..cell_offer import CellOffer, Resources
from ..scheduler import schedule
from ..types import SchedulerConfig
from .evaluate import BID_FIELDS, INSTANCE_FIELDS, BidFacts, InstanceFacts, score
from .vectorized import BidTable, compile_columns

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FIELDS = {*INSTANCE_FIELDS.values(), *BID_FIELDS.values()}  # all the tree walker may read of ai and r

anything = st.floats(allow_nan=True, allow_infinity=True)
strings = st.sampled_from(["b1", "b2", "cflinuxfs4", "", "__class__"])
instances = st.builds(
    InstanceFacts, instance_number=anything, app_id=anything, total_instances=anything, memory_mb=anything,
    disk_mb=anything, source_blob=st.one_of(st.none(), strings), stack=strings,
)
bids = st.builds(
    BidFacts, available_memory_mb=anything, available_disk_mb=anything, total_memory_mb=anything,
    total_disk_mb=anything, zone_number=anything, running_app_ids=st.lists(anything, max_size=4),
    cached_blobs=st.frozensets(strings, max_size=3), stacks=st.frozensets(strings, max_size=2),
)


@FUZZ
@given(tree=TYPED_TREES, ai=instances, cells=st.lists(bids, min_size=1, max_size=4), azs=anything)
def test_any_valid_tree_on_any_facts_is_a_float_from_the_tree_walker_alone(tree, ai, cells, azs) -> None:
    text = render(tree)
    try:
        objective = parse_objective(text)
    except ObjectiveError:
        assume(False)  # too long or too deep to print: common/objective/fuzz_test.py covers those
    with sealed(attributes=FIELDS) as escapes:
        scalars = [score(objective, ai, bid, azs) for bid in cells]
        columns = compile_columns(objective)(ai, BidTable(cells), azs)
    assert escapes == [], escapes
    assert all(isinstance(value, float) and not math.isnan(value) for value in scalars), scalars
    assert same_bits(scalars, columns), (text, scalars, columns.tolist())


def cells() -> list[CellOffer]:
    return [
        CellOffer(f"cell-{i}", f"z{i % 2}", Resources(4096, 8192, 10), Resources(4096, 8192, 10))
        for i in range(3)
    ]


@pytest.mark.parametrize("engine", ["fast", "reference"])
@FUZZ
@given(text=STREAMS)
def test_any_objective_text_in_an_auction_fails_only_its_own_lrp(engine: str, text: str) -> None:
    lrps = [lrp_start("fuzzed", 0, 256, 256, objective=text), lrp_start("plain", 0, 256, 256)]
    config = SchedulerConfig(strategy="objective", engine=engine)
    # Unsealed first, once the same way: the engine imports its strategies on first use (compile).
    schedule(cells(), [lrp_start("warm", 0, 256, 256, objective="?"), *lrps[1:]], (), config)
    with sealed() as escapes:
        result = schedule(cells(), lrps, (), config)
    assert escapes == [], escapes
    placed = {a.process_guid for a in result.lrp_assignments}
    assert "plain" in placed, result
    try:
        compile_objective(text)
    except ObjectiveError as exc:
        assert placed == {"plain"}, result
        [failure] = result.failures
        assert (failure.process_guid, failure.error) == ("fuzzed", str(exc)), failure
    else:
        assert placed == {"plain", "fuzzed"}, result
