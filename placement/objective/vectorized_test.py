import math
import struct

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from common.objective.errors import MAX_BYTES, ObjectiveError
from common.objective.parser import parse_objective
from placement.testing import same_bits
from tests.support.objective_texts import EXPRESSIONS

from .evaluate import BidFacts, InstanceFacts, divide, modulo, score
from .vectorized import BidTable, compile_columns, divide_columns, modulo_columns

SPECIAL = [0.0, -0.0, 1.0, -1.0, 3.0, -7.5, 1e308, -1e308, 5e-324, math.inf, -math.inf, math.nan]


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


def test_operators_match_python_bit_for_bit_on_special_values():
    column = np.array(SPECIAL)
    n = len(SPECIAL)
    with np.errstate(all="ignore"):
        for other in SPECIAL:
            got = np.broadcast_to(divide_columns(column, other, n), column.shape)
            assert same_bits([divide(a, other) for a in SPECIAL], got), other
            assert same_bits([divide(other, b) for b in SPECIAL], divide_columns(other, column, n)), other
            got = np.broadcast_to(modulo_columns(column, other), column.shape)
            assert same_bits([modulo(a, other) for a in SPECIAL], got), other


def test_division_by_a_column_with_zeros_is_zero_there():
    got = divide_columns(6.0, np.array([2.0, 0.0, -0.0, 3.0]), 4)
    assert got.tolist() == [3.0, 0.0, 0.0, 2.0]


HUGE = f"({'9' * 308} * 10)"  # overflows to inf (no exponents in the language; larger literals are refused)
FIXED_CELLS = [
    BidFacts(0.0, 0.0, 0.0, 0.0, 1.0),
    BidFacts(3.0, 5.0, 0.0, 0.0, 1.0),  # nothing in total: x / 0 with x > 0
    BidFacts(1000.0, 5.0, 4096.0, 10.0, 2.0, running_app_ids=(1.0, 2.0, 1.0), cached_blobs=frozenset({"b1"})),
    BidFacts(4096.0, 10.0, 4096.0, 10.0, 3.0, running_app_ids=(3.0,), stacks=frozenset({"s"})),
    BidFacts(2500.0, 7.0, 3000.0, 9.0, 4.0),
]
FIXED_AI = InstanceFacts(1.0, 1.0, 3.0, 256.0, 512.0, "b1", "s")


@pytest.mark.parametrize("text", [
    "(r.AvailableMemoryMB - 2000) mod 3",  # negative dividends: floor, not C, modulo
    "(r.AvailableMemoryMB - 2000) mod -3",
    "-r.AvailZoneNumber mod azs",
    "r.AvailableMemoryMB mod (azs - 4)",  # zero at run time: a constant zero is refused when parsed
    "r.AvailableMemoryMB / (r.AvailZoneNumber - 2)",  # a zero divisor in one cell only
    "(0 - r.AvailableDiskMB) / r.TotalDiskMB",  # -x / 0 must be 0, not -0
    "-(r.AvailableDiskMB / (r.TotalDiskMB - 10))",
    f"{HUGE} * r.AvailableMemoryMB - {HUGE}",  # inf - inf is NaN in some cells
    f"r.AvailZoneNumber / {HUGE}",
    f"({HUGE} * (r.AvailZoneNumber - 2)) mod 7",
    "count(r.AvailZoneNumber, r.RunningAppIDs) - count(ai.AppID, r.RunningAppIDs)",
    "count(ai.AppSourceBlobID, r.CachedBlobIDs) + count(ai.Stack, r.Stack) * 2",
    "ai.AppID mod azs + r.AvailableMemoryMB / r.TotalMemoryMB",
])
def test_hand_picked_edge_cases_match_the_scalar_scores(text):
    objective = parse_objective(text)
    expected = [score(objective, FIXED_AI, bid, 4.0) for bid in FIXED_CELLS]
    got = compile_columns(objective)(FIXED_AI, BidTable(FIXED_CELLS), 4.0)
    assert same_bits(expected, got), (expected, got.tolist())


numbers = st.sampled_from([0.0, 1.0, 2.0, 3.0, 256.0, 1000.0, 4096.0])
bids = st.builds(
    BidFacts,
    available_memory_mb=numbers, available_disk_mb=numbers, total_memory_mb=numbers, total_disk_mb=numbers,
    zone_number=st.integers(1, 4).map(float),
    running_app_ids=st.lists(st.integers(0, 3).map(float), max_size=4),
    cached_blobs=st.frozensets(st.sampled_from(["b1", "b2", "cflinuxfs4"]), max_size=2),
    stacks=st.frozensets(st.sampled_from(["cflinuxfs3", "cflinuxfs4"]), min_size=1),
)
instances = st.builds(
    InstanceFacts,
    instance_number=st.integers(0, 5).map(float), app_id=st.integers(0, 3).map(float),
    total_instances=st.integers(0, 6).map(float), memory_mb=numbers, disk_mb=numbers,
    source_blob=st.sampled_from([None, "b1", "b2"]), stack=st.sampled_from(["cflinuxfs3", "cflinuxfs4"]),
)


@settings(deadline=None, max_examples=100)
@given(text=EXPRESSIONS, ai=instances, cells=st.lists(bids, min_size=1, max_size=6))
def test_columns_equal_the_scalar_scores_bit_for_bit(text, ai, cells):
    assume(len(text) <= MAX_BYTES)  # a few huge literals make a text too long to parse
    try:
        objective = parse_objective(text)
    except ObjectiveError as exc:  # a divisor that is always 0 is refused: nothing to score
        assume("division by zero" not in exc.reason)
        raise
    expected = [score(objective, ai, bid, 4.0) for bid in cells]
    got = compile_columns(objective)(ai, BidTable(cells), 4.0)
    assert got.shape == (len(cells),)
    assert same_bits(expected, got), (text, expected, got.tolist())


def test_a_cell_independent_objective_still_gives_one_value_per_cell():
    cells = [BidFacts(1.0, 1.0, 1.0, 1.0, 1.0), BidFacts(2.0, 2.0, 2.0, 2.0, 2.0)]
    ai = InstanceFacts(1.0, 5.0, 1.0, 1.0, 1.0, None, "s")
    assert compile_columns(parse_objective("ai.AppID mod azs"))(ai, BidTable(cells), 4.0).tolist() == [
        1.0,
        1.0,
    ]
    assert compile_columns(parse_objective(f"{HUGE} * 0"))(ai, BidTable(cells), 4.0).tolist() == [
        -math.inf, -math.inf]  # inf * 0 is NaN, which ranks lowest


def test_a_per_cell_needle_counts_per_cell():
    cells = [BidFacts(0.0, 0.0, 0.0, 0.0, 1.0, running_app_ids=(1.0, 1.0)),
             BidFacts(0.0, 0.0, 0.0, 0.0, 2.0, running_app_ids=(1.0, 2.0))]
    ai = InstanceFacts(0.0, 0.0, 1.0, 1.0, 1.0, None, "s")
    got = compile_columns(parse_objective("count(r.AvailZoneNumber, r.RunningAppIDs)"))(
        ai, BidTable(cells), 2.0
    )
    assert got.tolist() == [2.0, 1.0]
