import pytest

from placement.cell_offer import CellOffer, Resources
from placement.filters import (
    CONTAINERS,
    DISK,
    MEMORY,
    PLACEMENT_TAGS,
    STACK,
    VOLUME_DRIVERS,
    placement_tag_error,
)
from placement.slot import CellSlot
from placement.testing import lrp_start
from placement.work import LRPStart


def slot(**kw) -> CellSlot:
    avail = kw.pop("available", Resources(100, 100, 10))
    return CellSlot(0, 0, CellOffer("c", "z", Resources(100, 100, 10), avail, **kw))


def lrp(**kw) -> LRPStart:
    return lrp_start("app", 0, kw.pop("memory_mb", 10), kw.pop("disk_mb", 10), **kw)


def test_stack():
    assert STACK.rejects(slot(stacks=("cflinuxfs3",)), lrp())
    assert not STACK.rejects(slot(stacks=("cflinuxfs3", "cflinuxfs4")), lrp())
    assert STACK.error(lrp()) == "found no compatible cell for required rootfs"


def test_volume_drivers_must_all_be_offered():
    assert VOLUME_DRIVERS.rejects(slot(volume_drivers=frozenset({"nfs"})), lrp(volume_drivers=("nfs", "smb")))
    assert not VOLUME_DRIVERS.rejects(
        slot(volume_drivers=frozenset({"nfs", "smb"})), lrp(volume_drivers=("nfs",))
    )
    assert not VOLUME_DRIVERS.rejects(slot(), lrp())


@pytest.mark.parametrize(
    "cell_tags, optional, wanted, rejected",
    [
        ((), (), (), False),
        ((), (), ("gpu",), True),            # asked for a tag the cell lacks
        (("gpu",), (), (), True),            # the cell requires a tag the request lacks
        (("gpu",), (), ("gpu",), False),
        ((), ("ssd",), ("ssd",), False),     # optional tags may be asked for...
        ((), ("ssd",), (), False),           # ...but need not be
        (("gpu",), ("ssd",), ("gpu", "ssd"), False),
        (("gpu",), ("ssd",), ("ssd",), True),
    ],
)
def test_placement_tags(cell_tags, optional, wanted, rejected):
    s = slot(placement_tags=frozenset(cell_tags), optional_placement_tags=frozenset(optional))
    assert PLACEMENT_TAGS.rejects(s, lrp(placement_tags=wanted)) is rejected


def test_placement_tag_errors_read_like_diegos():
    assert placement_tag_error(()) == "found no compatible cell with no placement tags"
    assert placement_tag_error(("x",)) == 'found no compatible cell with placement tag "x"'
    assert (
        placement_tag_error(("a", "b", "c"))
        == 'found no compatible cell with placement tags "a", "b" and "c"'
    )


def test_resources_and_their_summaries():
    tight = slot(available=Resources(8, 5, 0))
    assert MEMORY.rejects(tight, lrp(memory_mb=9)) and not MEMORY.rejects(tight, lrp(memory_mb=8))
    assert DISK.rejects(tight, lrp(disk_mb=6)) and not DISK.rejects(tight, lrp(disk_mb=5))
    assert CONTAINERS.rejects(tight, lrp())
    assert MEMORY.summary([tight, slot(available=Resources(3, 5, 1))], lrp(memory_mb=9)) == \
        "2 insufficient memory (largest free 8 MB, need 9)"
    assert DISK.summary([tight], lrp(disk_mb=6)) == "1 insufficient disk (largest free 5 MB, need 6)"
    assert CONTAINERS.summary([tight], lrp()) == "1 no free container slots"


def test_a_bad_label_expression_fails_its_own_item_only():
    from placement.ask import AffinityRule
    from placement.scheduler import schedule

    cells = [CellOffer("c", "z", Resources(100, 100, 10), Resources(100, 100, 10), labels={"disk": "ssd"})]
    result = schedule(cells, [
        lrp_start("bad", 0, 1, 1, labels_match="disk in (ssd"),
        lrp_start("bad-affinity", 0, 1, 1, affinity=(AffinityRule("=x"),)),
        lrp_start("good", 0, 1, 1, labels_match="disk=ssd"),
    ])
    assert [a.process_guid for a in result.lrp_assignments] == ["good"]
    errors = {f.process_guid: f.error for f in result.failures}
    assert errors["bad"].startswith("invalid placement request: labels_match: ")
    assert errors["bad-affinity"].startswith("invalid placement request: affinity[0].expression: ")
