"""Reading what a deployment's stores hold, and waiting for its ingest stream to drain.

memstack has no public read of the ledger or of the vectors: the ledger is read with
its SQL model, the vectors with the raw chromadb client, into a :class:`Snapshot`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from redis.exceptions import RedisError, ResponseError
from sqlalchemy import select

from memstack.core.errors import MemstackError, StoreUnavailable
from memstack.memory import AsyncMemory
from memstack.stores.redis.queue import GROUP
from memstack.stores.sql.models import MessageRow

# --- what the stores hold ----------------------------------------------------------------


@dataclass(frozen=True)
class LedgerEntry:
    msg_id: str
    user_id: str
    session_id: str
    role: str
    content: str
    created_ms: int
    name: str | None


@dataclass(frozen=True)
class FactEntry:
    user_id: str
    key: str
    value: str  # canonical JSON
    msg_id: str
    current: bool


@dataclass(frozen=True)
class VectorEntry:
    collection: str
    id: str
    document: str
    metadata: Mapping[str, Any]

    @property
    def layer(self) -> str:
        return str(self.metadata.get("source_layer", ""))

    @property
    def msg_ids(self) -> tuple[str, ...]:
        raw = self.metadata.get("msg_ids")
        if isinstance(raw, str):
            return tuple(x for x in raw.split(",") if x)
        if isinstance(raw, list | tuple):
            return tuple(str(x) for x in raw)
        head = self.metadata.get("msg_id")
        return (str(head),) if head else ()

    @property
    def head(self) -> str:
        return str(self.metadata.get("msg_id") or self.id.rsplit("#", 1)[0])


def chroma_client(vector_url: str | None, path: Path | None = None) -> Any:
    """A raw chromadb client on a server URL or an embedded folder."""
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    settings = ChromaSettings(anonymized_telemetry=False)
    if vector_url:
        parts = urlsplit(vector_url)
        return chromadb.HttpClient(
            host=parts.hostname or "127.0.0.1", port=parts.port or 8000, settings=settings
        )
    if path is None:
        raise ValueError("a vector_url or a path is needed")
    return chromadb.PersistentClient(path=str(path), settings=settings)


def read_vectors_sync(client: Any, prefix: str, page: int = 2000) -> list[VectorEntry]:
    """Every vector of every collection whose name starts with ``prefix``."""
    out: list[VectorEntry] = []
    names = sorted(c.name for c in client.list_collections() if c.name.startswith(prefix))
    for name in names:
        collection = client.get_collection(name, embedding_function=None)
        offset = 0
        while True:
            got = collection.get(include=["metadatas", "documents"], limit=page, offset=offset)
            ids = got["ids"]
            for i, vid in enumerate(ids):
                meta = (got["metadatas"] or [None] * len(ids))[i] or {}
                doc = (got["documents"] or [None] * len(ids))[i] or ""
                out.append(VectorEntry(name, vid, doc, dict(meta)))
            if len(ids) < page:
                break
            offset += page
    return out


async def read_vectors(
    vector_url: str | None, prefix: str, path: Path | None = None
) -> list[VectorEntry]:
    def work() -> list[VectorEntry]:
        return read_vectors_sync(chroma_client(vector_url, path), prefix)

    return await asyncio.to_thread(work)


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


@dataclass
class Snapshot:
    """What one deployment holds about a set of users (or all of them)."""

    ledger: dict[str, LedgerEntry]
    facts: list[FactEntry]
    vectors: list[VectorEntry]
    dead_letters: list[Any]

    @property
    def dialogue(self) -> list[VectorEntry]:
        return [v for v in self.vectors if v.layer == "dialogue"]

    def only(self, users: Iterable[str]) -> Snapshot:
        """The part of this snapshot that belongs to ``users``."""
        keep = set(users)
        return Snapshot(
            {k: e for k, e in self.ledger.items() if e.user_id in keep},
            [f for f in self.facts if f.user_id in keep],
            [v for v in self.vectors if v.metadata.get("user_id") in keep],
            self.dead_letters,
        )

    def covered(self) -> dict[str, set[str]]:
        """Message id → heads (unit ids) of the dialogue vectors whose msg_ids name it."""
        out: dict[str, set[str]] = defaultdict(set)
        for v in self.dialogue:
            for m in v.msg_ids:
                out[m].add(v.head)
        return out


async def snapshot(
    mem: AsyncMemory, vector_url: str | None, users: Iterable[str], *,
    vector_path: Path | None = None,
) -> Snapshot:  # fmt: skip
    """The ledger rows, facts (current and past: ``fact_history``) and vectors of
    ``users`` in ``mem``'s deployment, and its dead letters.

    memstack has no public read of the ledger or of the vectors: the ledger is read
    with its SQL model, the vectors with the raw chromadb client, from every collection
    whose name starts with the key prefix."""
    wanted = sorted(set(users))
    async with mem.db_sessions() as s:
        rows = list(await s.scalars(select(MessageRow).where(MessageRow.user_id.in_(wanted))))
    ledger_entries = {
        r.msg_id: LedgerEntry(
            r.msg_id,
            r.user_id,
            r.session_id,
            r.role,
            r.content,
            int(r.created_at.timestamp() * 1000),
            r.name,
        )
        for r in rows
    }
    facts = [
        FactEntry(f.user_id, f.key, _json(f.value), f.msg_id, f.valid_until is None)
        for user in wanted
        for f in await mem.fact_history(user)
    ]
    vectors = await read_vectors(vector_url, mem.settings.key_prefix, vector_path)
    keep = set(wanted)
    vectors = [v for v in vectors if v.metadata.get("user_id") in keep]
    dead = await mem.dead_letters(100_000)
    return Snapshot(ledger_entries, facts, vectors, dead)


# --- the ingest stream ------------------------------------------------------------------


async def backlog(mem: AsyncMemory) -> int:
    """Jobs in the ingest stream not yet done (``queue.pending_count()``'s figure),
    read without side effects: ``pending_count()`` creates the consumer group when its
    object has not seen it, which would repair a lost group on the workers' behalf.
    Raises :class:`StoreUnavailable` when jobs wait and no consumer group exists."""
    r = mem.working.redis
    stream = mem.queue.stream
    try:
        length = int(await r.xlen(stream))
        try:
            info = await r.xpending(stream, GROUP)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            if length:
                raise StoreUnavailable(
                    f"{length} jobs wait, no consumer group: {exc}", layer="redis"
                ) from exc
            return 0
    except RedisError as exc:
        raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc
    return max(length, int(info["pending"]))


async def wait_drained(
    mem: AsyncMemory, timeout_s: float, *, poll_s: float = 0.25
) -> tuple[bool, str]:
    """Until the ingest stream holds nothing (:func:`backlog` is 0) twice in a row, or
    ``timeout_s``. Returns (drained, the last count or error seen)."""
    deadline = time.monotonic() + timeout_s
    last = ""
    zeros = 0
    while True:
        try:
            pending = await backlog(mem)
            last = f"{pending} jobs pending"
            zeros = zeros + 1 if pending == 0 else 0
            if zeros >= 2:
                return True, last
        except MemstackError as exc:
            last = f"{type(exc).__name__}: {exc}"[:300]
            zeros = 0
        if time.monotonic() > deadline:
            return False, last
        await asyncio.sleep(poll_s)
