"""SQLite's planner gets statistics at open and after an import, so that reading a few
of a heavy user's messages by id takes the id's index, not a walk of their history."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy.dialects import sqlite

from memstack.core.messages import Message
from memstack.core.settings import Settings
from memstack.memory import AsyncMemory
from memstack.stores.sql import ledger
from memstack.stores.sql.exchange_rows import ROWS

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _plan(path: Path, ids: list[str]) -> str:
    statement = ROWS[False].params(user_id="heavy", ids=ids, heads=ids[:2])
    sql = str(statement.compile(dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True}))
    with sqlite3.connect(path) as conn:
        return " | ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))


async def test_a_heavy_users_rows_by_id_take_the_ids_index(embedded_settings: Settings) -> None:
    messages = [
        Message(
            f"heavy/s{i // 40}:{i}",
            "heavy",
            f"s{i // 40}",
            "user",
            f"turn {i}",
            T0 + timedelta(minutes=i),
        )
        for i in range(3000)
    ]
    async with await AsyncMemory.open(embedded_settings) as mem, mem.db_sessions.begin() as s:
        await ledger.insert_messages(s, messages)
    path = embedded_settings.home / "memstack.db"
    ids = [m.msg_id for m in messages[::500]]
    # Without statistics, ``user_id = ?`` looks as selective as the ids.
    assert "ix_message_user_time (user_id=?)" in _plan(path, ids)
    # The next open gathers them (an import does too).
    async with await AsyncMemory.open(embedded_settings):
        pass
    plan = _plan(path, ids)
    assert "sqlite_autoindex_memory_message_1 (msg_id=?)" in plan
    assert "ix_message_user_time (user_id=?)" not in plan
