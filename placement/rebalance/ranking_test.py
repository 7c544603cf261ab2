from tests.support.engine_workloads import make_cell

from ..state import AuctionState
from ..types import SchedulerConfig
from .ranking import PATIENCE, Ranking


def ranked(n: int) -> tuple[Ranking, dict[int, float], list]:
    slots = AuctionState([make_cell(f"c{i}") for i in range(n)], SchedulerConfig()).slots
    scores = {s.pos: float(s.pos) for s in slots}
    return Ranking(lambda s: scores[s.pos], slots), scores, slots


def anything(slot) -> bool:
    return True


def test_the_lowest_score_below_the_bar_and_scores_changed_since_are_seen():
    ranking, scores, slots = ranked(4)
    assert ranking.best(10.0, anything, anything) == (0.0, slots[0])
    assert ranking.best(0.0, anything, anything) is None  # nothing below the bar
    scores[0] = 5.0  # a move filled c0: found stale when met
    assert ranking.best(10.0, anything, anything) == (1.0, slots[1])
    scores[3] = -1.0  # a move emptied c3: pushed again, as the rules do
    ranking.changed(slots[3])
    assert ranking.best(10.0, anything, anything) == (-1.0, slots[3])


def test_a_cell_that_does_not_suit_stays_and_one_that_does_not_fit_leaves_until_changed():
    ranking, scores, slots = ranked(3)
    assert ranking.best(10.0, anything, lambda s: s is not slots[0]) == (1.0, slots[1])
    assert ranking.best(10.0, anything, anything) == (0.0, slots[0])  # passed over, not dropped
    full = {slots[0].pos}
    assert ranking.best(10.0, lambda s: s.pos not in full, anything) == (1.0, slots[1])
    full.clear()
    assert ranking.best(10.0, anything, anything) == (1.0, slots[1])  # dropped: nothing told it changed
    ranking.changed(slots[0])
    assert ranking.best(10.0, anything, anything) == (0.0, slots[0])


def test_a_search_gives_up_after_passing_over_patience_cells():
    ranking, scores, slots = ranked(PATIENCE + 2)
    last = slots[-1]
    assert ranking.best(1e9, anything, lambda s: s is last) is None
    assert ranking.best(1e9, anything, lambda s: s.pos >= PATIENCE - 1) == (PATIENCE - 1, slots[PATIENCE - 1])
