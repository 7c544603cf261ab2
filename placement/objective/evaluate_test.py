import math

import pytest

from common.objective.errors import ObjectiveError
from common.objective.parser import parse_objective

from .evaluate import BidFacts, InstanceFacts, divide, evaluate, modulo, ranked, score

AI = InstanceFacts(instance_number=2.0, app_id=7.0, total_instances=4.0, memory_mb=256.0, disk_mb=1024.0,
                   source_blob="blob-a", stack="cflinuxfs4")
R = BidFacts(available_memory_mb=3072.0, available_disk_mb=0.0, total_memory_mb=4096.0, total_disk_mb=0.0,
             zone_number=3.0, running_app_ids=(7.0, 1.0, 7.0), cached_blobs=frozenset({"blob-a", "blob-b"}),
             stacks=frozenset({"cflinuxfs4"}))


def value(text, ai=AI, r=R, azs=4.0):
    return evaluate(parse_objective(text).root, ai, r, azs)


@pytest.mark.parametrize("text, expected", [
    ("1 + 2 * 3", 7.0),
    ("(1 + 2) * 3", 9.0),
    ("10 - 4 - 3", 3.0),
    ("-2 * 3", -6.0),
    ("7 mod 3", 1.0),
    ("-7 mod 3", 2.0),  # floor modulo: the sign of the modulus
    ("7 mod -3", -2.0),
    ("ai.InstanceNumber + ai.AppID", 9.0),
    ("ai.TotalInstances * ai.RequiredMemoryMB + ai.RequiredDiskMB", 2048.0),
    ("r.AvailableMemoryMB / r.TotalMemoryMB", 0.75),
    ("r.AvailZoneNumber mod azs + 1", 4.0),
    ("azs", 4.0),
    ("count(ai.AppID, r.RunningAppIDs)", 2.0),
    ("count(ai.AppID - 6, r.RunningAppIDs)", 1.0),
    ("count(r.AvailZoneNumber, r.RunningAppIDs)", 0.0),
    ("count(ai.AppSourceBlobID, r.CachedBlobIDs)", 1.0),
    ("count(ai.Stack, r.Stack)", 1.0),
    ("count(ai.Stack, r.CachedBlobIDs)", 0.0),
])
def test_values(text, expected):
    assert value(text) == expected


def test_division_and_modulo_by_zero_are_zero():
    """A divisor that is zero at run time gives 0 (a constant zero divisor is refused when parsed)."""
    assert value("r.AvailableDiskMB / r.TotalDiskMB") == 0.0
    assert value("5 mod (azs - 4)") == 0.0
    assert value("1 + 5 / (azs - 4)") == 1.0
    for constant in ("5 / 0", "5 mod 0", "1 + 5 / (2 - 2)"):
        with pytest.raises(ObjectiveError, match="division by zero"):
            parse_objective(constant)
    assert divide(-3.0, -0.0) == 0.0 and modulo(3.0, -0.0) == 0.0


def test_an_instance_without_a_source_blob_counts_zero():
    no_blob = InstanceFacts(0.0, 0.0, 1.0, 1.0, 1.0, None, "cflinuxfs4")
    assert value("count(ai.AppSourceBlobID, r.CachedBlobIDs)", ai=no_blob) == 0.0


def test_overflow_is_infinite_and_nan_ranks_below_everything():
    huge = f"({'9' * 308} * 10)"  # the largest literal times ten
    assert value(huge) == math.inf
    assert math.isnan(value(f"{huge} - {huge}"))
    assert score(parse_objective(f"{huge} - {huge}"), AI, R, 4.0) == -math.inf
    assert ranked(-math.inf) == -math.inf and ranked(2.5) == 2.5


def test_score_is_the_value_as_a_float():
    assert score(parse_objective("ai.AppID mod azs"), AI, R, 4.0) == 3.0
