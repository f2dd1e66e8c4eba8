"""Time: aware datetimes inside memstack; epoch milliseconds only at the Redis edge.

A caller may pass a timezone-aware datetime or epoch seconds; a naive datetime is refused
because its zone is a guess.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

from memstack.core.errors import ValidationError
from memstack.core.inputs import check_moment

Timestamp = datetime | float | int


# How far ahead of the clock a message's ts may be: clock skew between the caller and
# memstack, not messages dated next year.
MAX_FUTURE_S = 86400


def to_ms(ts: Timestamp | None) -> int:
    """Epoch milliseconds of a datetime (aware), epoch seconds, or now."""
    if ts is None:
        return int(time.time() * 1000)
    if isinstance(ts, datetime):
        if ts.tzinfo is None:
            raise ValidationError("a time must be timezone-aware (a naive datetime is ambiguous)")
        return int(ts.timestamp() * 1000)
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        raise ValidationError(f"a time must be a datetime or epoch seconds, got {ts!r}")
    return int(float(ts) * 1000)


def message_time_ms(ts: Timestamp | None) -> int:
    """A message's time in epoch milliseconds: after 1970, at most a day ahead of now."""
    ms = to_ms(ts)
    if not 0 <= ms <= (time.time() + MAX_FUTURE_S) * 1000:
        raise ValidationError(
            f"ts {datetime.fromtimestamp(ms / 1000, tz=UTC) if ms >= 0 else ms} is out of range: "
            "a message's time lies between 1970 and a day from now"
        )
    return ms


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def moment(ts: Timestamp | None, kind: str = "now") -> datetime:
    """``ts`` as an aware UTC datetime, or the clock's time; refused as ``check_moment``
    refuses (a naive datetime, a value that is no time)."""
    return datetime.now(UTC) if ts is None else check_moment(kind, ts)
