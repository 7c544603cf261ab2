import json

from bbs.explanations import Explanations
from common.models import PlacementExplanation


def placed(index: int, cell_id: str = "cell-1") -> PlacementExplanation:
    return PlacementExplanation(process_guid="web", index=index, placed=True, cell_id=cell_id)


def test_keeps_the_latest_per_instance_and_forgets_the_least_recently_reported_past_the_limit():
    kept = Explanations(limit=2)
    kept.record([placed(0), placed(1)], auctioned_at=1.0)
    kept.record([placed(0, "cell-2")], auctioned_at=2.0)  # web/0 again: now the most recent
    kept.record([placed(2)], auctioned_at=3.0)
    assert len(kept) == 2
    assert kept.latest("web", 1) is None
    latest = json.loads(kept.latest("web", 0) or "{}")
    assert (latest["cell_id"], latest["auctioned_at"]) == ("cell-2", 2.0)
    assert json.loads(kept.latest("web", 2) or "{}")["auctioned_at"] == 3.0


def test_a_limit_of_zero_keeps_nothing():
    kept = Explanations(limit=0)
    kept.record([placed(0)], auctioned_at=1.0)
    assert len(kept) == 0 and kept.latest("web", 0) is None
