"""Messages for the tests of the parts that group, summarise or print them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

from memstack import Message

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def said(
    rows: Iterable[Sequence[str | None]], *, user_id: str = "u", session_id: str = "s"
) -> list[Message]:
    """``(msg_id, role, content[, name])`` rows as one session's messages, a minute apart."""
    out = []
    for i, row in enumerate(rows):
        msg_id, role, content = (str(v) for v in row[:3])
        name = row[3] if len(row) > 3 else None
        out.append(
            Message(msg_id, user_id, session_id, role, content, T0 + timedelta(minutes=i), name)
        )
    return out


def turn(role: str, content: str, name: str | None = None) -> Message:
    """One message where only who said what matters (the recent window as printed)."""
    return said([("m", role, content, name)])[0]
