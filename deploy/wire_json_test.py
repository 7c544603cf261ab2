from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from .wire_json import wire_times


def test_every_time_becomes_rfc3339_utc_with_z_and_milliseconds() -> None:
    paris = timezone(timedelta(hours=1))
    given = {
        "since": "2026-11-29T05:30:00.123456+00:00",  # pydantic's dump
        "at": "2026-11-29T06:30:00.5+01:00",
        "naive": "2026-11-29T05:30:00",  # the BBS's times are UTC
        "printed": "2026-11-29 05:30:00.123000+00:00",  # str(datetime), json.dumps(default=str)
        "moment": datetime(2026, 11, 29, 6, 30, tzinfo=paris),
        "created_at": 1_795_930_200.123,  # epoch seconds under an `_at` key
        "nested": [{"expires_at": 1_795_930_200}],
    }
    assert wire_times(given) == {
        "since": "2026-11-29T05:30:00.123Z",
        "at": "2026-11-29T05:30:00.500Z",
        "naive": "2026-11-29T05:30:00.000Z",
        "printed": "2026-11-29T05:30:00.123Z",
        "moment": "2026-11-29T05:30:00.000Z",
        "created_at": "2026-11-29T05:30:00.123Z",
        "nested": [{"expires_at": "2026-11-29T05:30:00.000Z"}],
    }
    assert datetime.fromtimestamp(1_795_930_200, UTC).isoformat() == "2026-11-29T05:30:00+00:00"


def test_other_values_are_left_alone() -> None:
    given = {"duration_s": 0.25, "instances": 3, "revoked": False, "expires_at": None, "name": "2026-11-29",
             "command": ["echo", "2026-11-29T05:30:00 is not rewritten inside words"],
             "took": timedelta(seconds=90)}
    assert wire_times(given) == {**given, "took": 90.0}
