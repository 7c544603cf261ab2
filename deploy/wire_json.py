"""One time format in every `--json`/`-o json|yaml` output: RFC 3339 in UTC with `Z` and milliseconds
(`2026-11-29T05:30:00.123Z`), and durations in seconds. Models dump datetimes as `+00:00` or naive,
and some records keep epoch seconds (`created_at` of a token or a blob): a number under a key ending in `_at`
is a moment too. Durations are floats named `..._s`; a timedelta is written as its seconds."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

# An ISO 8601 date-time as pydantic or str(datetime) writes it: a date, `T` or a space, a time.
_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$")


def rfc3339(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # the BBS keeps UTC throughout
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _is_epoch(key: Any, item: Any) -> bool:
    return isinstance(key, str) and key.endswith("_at") and isinstance(item, int | float) \
        and not isinstance(item, bool)


def _epoch(seconds: float) -> str:
    return rfc3339(datetime.fromtimestamp(seconds, UTC))


def wire_times(value: Any) -> Any:
    """`value` (JSON-able, or datetimes/timedeltas inside) with every time written the one way."""
    if isinstance(value, datetime):
        return rfc3339(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, str):
        if _DATETIME.match(value):
            try:
                return rfc3339(datetime.fromisoformat(value.replace("Z", "+00:00")))
            except ValueError:
                return value
        return value
    if isinstance(value, dict):
        return {key: _epoch(item) if _is_epoch(key, item) else wire_times(item)
                for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [wire_times(item) for item in value]
    return value
