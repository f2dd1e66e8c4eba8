"""When to summarise a session, and where summaries go.

A session is summarised once its window holds more than ``summary_trigger_messages``
messages and it has been quiet for ``summary_quiet_s``. The input is always the raw
messages from the ledger, never an older summary, so numbers and names cannot drift
through a chain of summaries. The result is stored in SQL and as a ``summary`` chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memstack.core.settings import Settings
from memstack.ingest.summarisers import Summariser
from memstack.ml.embedders import Embedder
from memstack.stores.redis.working_memory import WorkingMemory
from memstack.stores.sql import erasure, ledger
from memstack.stores.sql import identity as identities
from memstack.stores.sql import summaries as summary_rows
from memstack.stores.sql.db import guarded
from memstack.stores.vectors.base import VectorRecord, VectorStore


@dataclass(frozen=True)
class SummaryOutcome:
    done: bool  # nothing more to wait for in this session
    created: bool


@dataclass
class SessionSummaries:
    settings: Settings
    sessions: async_sessionmaker[AsyncSession]
    working: WorkingMemory
    summariser: Summariser
    embedder: Embedder
    vectors: VectorStore

    async def maybe_summarize(
        self, user_id: str, session_id: str, *, now: datetime | None = None
    ) -> SummaryOutcome:
        now = now or datetime.now(UTC)
        state = await self.working.get_state(user_id, session_id)
        window_len = await self.working.window_length(user_id, session_id)
        if state.last_msg_at is None:
            return SummaryOutcome(done=True, created=False)
        if (now - state.last_msg_at).total_seconds() < self.settings.summary_quiet_s:
            return SummaryOutcome(done=False, created=False)
        if window_len <= self.settings.summary_trigger_messages:
            return SummaryOutcome(done=True, created=False)
        async with guarded("summary"):
            created = await self.summarize(user_id, session_id)
        return SummaryOutcome(done=True, created=created)

    async def summarize(self, user_id: str, session_id: str) -> bool:
        """Summarise the session's last window of raw messages; False if already done."""
        async with self.sessions() as s:
            messages = await ledger.recent_messages(
                s, user_id, session_id, self.settings.window_max_messages
            )
            if not messages:
                return False
            last = messages[-1]
            done = await summary_rows.exists(s, session_id, last.msg_id)
            speaker = (await identities.read(s, [user_id])).get(user_id)
        if done:
            return False
        result = await self.summariser.summarise(messages, speaker=speaker)
        content = result.model_dump(mode="json")
        record = summary_record(
            user_id, session_id, last.msg_id, last.created_at, content, self.embedder.model_version
        )
        vectors = await self.embedder.embed([record.text]) if record is not None else []
        async with self.sessions.begin() as s:
            # Under the erasure guard: a user forgotten while the summary was being made
            # has no ledger rows left, and gets no summary.
            await erasure.hold_users(s, [user_id])
            if not await summary_rows.insert(s, messages, content):
                return False
            if record is not None:
                await self.vectors.upsert(
                    [VectorRecord(record.id, record.text, vectors[0], record.metadata)]
                )
        return True


def summary_vector_id(last_msg_id: str) -> str:
    """The id of a summary's chunk: it is keyed, like its row, by its last message."""
    return f"summary:{last_msg_id}#0"


def summary_record(
    user_id: str,
    session_id: str,
    last_msg_id: str,
    last_at: datetime,
    content: dict[str, Any],
    model_version: str,
) -> VectorRecord | None:
    """The ``summary`` chunk of a stored summary (no vector yet); None if it has no text."""
    text = str(content.get("summary", "")).strip()
    if not text:
        return None
    summary_id = f"summary:{last_msg_id}"
    return VectorRecord(
        summary_vector_id(last_msg_id),
        text,
        (),
        {
            "user_id": user_id,
            "session_id": session_id,
            "msg_id": summary_id,
            # A summary is not evidence of any one turn.
            "msg_ids": "",
            "role": "summary",
            "chunk_idx": 0,
            "created_at": int(last_at.timestamp()),
            "topic": str(content.get("topic", "")),
            "source_layer": "summary",
            "model_version": model_version,
        },
    )


async def all_summary_records(
    sessions: async_sessionmaker[AsyncSession], model_version: str
) -> list[VectorRecord]:
    """Every stored summary as a chunk to embed (``memstack reindex``)."""
    async with sessions() as s:
        rows = await summary_rows.stored(s)
    records = (
        summary_record(r.user_id, r.session_id, r.last_msg_id, r.last_at, r.content, model_version)
        for r in rows
    )
    return [r for r in records if r is not None]


async def summaries_of(
    sessions: async_sessionmaker[AsyncSession], user_id: str, session_id: str | None = None
) -> list[dict[str, Any]]:
    async with sessions() as s:
        rows = await summary_rows.stored(s, user_id, session_id)
    return [
        {
            "session_id": r.session_id,
            "first_msg_id": r.first_msg_id,
            "last_msg_id": r.last_msg_id,
            "message_count": r.message_count,
            "created_at": r.created_at,
            **r.content,
        }
        for r in rows
    ]
