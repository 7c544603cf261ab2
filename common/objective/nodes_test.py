from .nodes import Attr, Num, first_non_constant
from .parser import parse_objective


def test_first_non_constant_finds_the_leftmost_varying_part():
    assert first_non_constant(parse_objective("azs * 2 - -1").root) is None
    found = first_non_constant(parse_objective("1 + (azs - ai.AppID) * r.AvailZoneNumber").root)
    assert isinstance(found, Attr) and (found.name, found.column) == ("AppID", 12)
    assert first_non_constant(parse_objective("count(1, r.RunningAppIDs) + 1").root).column == 1
    assert first_non_constant(Num(1.0, 1)) is None
