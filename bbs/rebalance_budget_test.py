from .rebalance_budget import MIN_MOVES_PER_MINUTE, moves_per_minute
from .settings import BBSSettings


def test_the_default_budget_scales_with_the_present_cells_and_a_setting_fixes_it():
    default = BBSSettings().rebalance_moves_per_minute
    assert moves_per_minute(default, 1000) == 1000  # one per cell a minute: 20,000 moves need 20 minutes
    assert moves_per_minute(default, 4) == MIN_MOVES_PER_MINUTE == 60  # a small cluster as fast as before
    assert moves_per_minute(10, 1000) == 10
