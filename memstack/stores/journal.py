"""The embedded default's journal of accepted ingest jobs.

Without ``MEMSTACK_REDIS_URL`` the Redis of working memory runs inside the process and
its ingest stream ends with it. Every job ``remember()`` accepts is therefore also
written here, in a small SQLite file of the home, and removed once ingested; jobs still
here when a process opens the home (it exited or was killed before ingesting them) are
queued again. SQLite in WAL mode with ``synchronous=NORMAL`` keeps a committed row
through the death of the process (not through a power cut), at a fraction of a
millisecond per write; a file of its own, so a write never waits behind the ledger's
transactions (docs/reliability.md).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path

from memstack.core.errors import StoreUnavailable

_SCHEMA = """
CREATE TABLE IF NOT EXISTS journal (
    msg_id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    fields TEXT NOT NULL
)
"""


class Journal:
    """Accepted jobs not yet ingested, keyed by message id. Calls block for a few tens
    of microseconds, so they run on the caller's thread."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=5000")
            self._db.execute(_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"ingest journal {path}: {exc}", layer="ingest journal") from exc
        self.path = path

    def _run(self, sql: str, params: Iterable[object] = ()) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, tuple(params))
        except sqlite3.Error as exc:
            raise StoreUnavailable(
                f"ingest journal {self.path}: {exc}", layer="ingest journal"
            ) from exc

    def add(self, fields: Mapping[str, str]) -> None:
        self._run(
            "INSERT OR IGNORE INTO journal (msg_id, user_id, fields) VALUES (?, ?, ?)",
            (fields["msg_id"], fields["user_id"], json.dumps(dict(fields), ensure_ascii=False)),
        )

    def remove(self, msg_ids: Iterable[str]) -> None:
        ids = list(msg_ids)
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            marks = ",".join("?" * len(part))
            self._run(f"DELETE FROM journal WHERE msg_id IN ({marks})", part)

    def remove_user(self, user_id: str) -> int:
        return self._run("DELETE FROM journal WHERE user_id = ?", (user_id,)).rowcount

    def pending(self) -> list[dict[str, str]]:
        rows = self._run("SELECT fields FROM journal ORDER BY rowid").fetchall()
        return [json.loads(r[0]) for r in rows]

    def close(self) -> None:
        self._db.close()
