import pytest
from pydantic import ValidationError

from auctioneer.settings import AuctioneerSettings


def test_defaults_follow_the_design():
    s = AuctioneerSettings(_env_file=None)
    assert (s.port, s.strategy, s.cell_state_timeout, s.max_attempts, s.max_inflight_starts) == (
        8890,
        "diego",
        5.0,
        3,
        0,
    )


def test_environment_is_read_and_flags_override_it(monkeypatch):
    monkeypatch.setenv("VENDUE_BBS_URL", "http://bbs:1")
    monkeypatch.setenv("VENDUE_PORT", "9001")
    monkeypatch.setenv("VENDUE_CELL_STATE_TIMEOUT", "2.5")
    s = AuctioneerSettings(port=0)
    assert (s.bbs_url, s.port, s.cell_state_timeout) == ("http://bbs:1", 0, 2.5)


def test_out_of_range_values_are_refused(monkeypatch):
    monkeypatch.setenv("VENDUE_MAX_ATTEMPTS", "0")
    with pytest.raises(ValidationError, match="max_attempts"):
        AuctioneerSettings()
