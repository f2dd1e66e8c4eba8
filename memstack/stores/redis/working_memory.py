"""Working memory on Redis: the session window, task state, locks and idempotency marks.

Every key written here carries a TTL; :meth:`WorkingMemory.keys_without_ttl` is the
patrol that proves it.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from memstack.core.errors import (
    Conflict,
    LockNotAcquired,
    StoreUnavailable,
    ValidationError,
)
from memstack.core.ids import scoped_msg_id, text_hash
from memstack.core.messages import Message
from memstack.core.settings import Settings
from memstack.core.time import from_ms, to_ms
from memstack.stores.redis import scripts
from memstack.stores.redis.errors import REDIS_ERRORS
from memstack.stores.redis.keys import keys_for, session_tag
from memstack.types import SessionState as SessionState


def _entry(m: Message) -> str:
    """A window entry as the write script writes it (``ts_ms``: epoch milliseconds)."""
    d = {
        "msg_id": m.msg_id,
        "user_id": m.user_id,
        "role": m.role,
        "content": m.content,
        "ts_ms": str(to_ms(m.created_at)),
    }
    if m.name is not None:
        d["name"] = m.name
    return json.dumps(d, ensure_ascii=False)


def _message(raw: bytes | str, session_id: str) -> Message:
    d = json.loads(raw)
    # .get: entries written before names existed have no "name" key.
    return Message(
        d["msg_id"],
        d["user_id"],
        session_id,
        d["role"],
        d["content"],
        from_ms(int(float(d["ts_ms"]))),
        d.get("name") or None,
    )


@dataclass(frozen=True)
class WriteResult:
    msg_id: str
    duplicate: bool


@dataclass(frozen=True)
class WindowRead:
    """The window's last messages, and whether it is known to hold the session's recent
    history (False after a new session's first write, an expired window or a lost
    Redis: the ledger may know older messages, see ``REPAIR_WINDOW``)."""

    messages: list[Message]
    complete: bool


def _wrap(exc: Exception) -> Exception:
    if isinstance(exc, ResponseError) and str(exc).startswith("CONFLICT"):
        return Conflict(
            "this msg_id was already used in this session for another message; "
            "nothing was written (a retry must resend the same role, name and content)"
        )
    return StoreUnavailable(f"Redis: {exc}", layer="redis")


class WorkingMemory:
    def __init__(self, redis: Redis, settings: Settings) -> None:
        self.redis = redis
        self.settings = settings
        self.keys = keys_for(settings)
        self._write = redis.register_script(scripts.WRITE)
        self._set_state = redis.register_script(scripts.SET_STATE)
        self._repair = redis.register_script(scripts.REPAIR_WINDOW)
        self._release = redis.register_script(scripts.RELEASE_LOCK)
        self._remove = redis.register_script(scripts.REMOVE_FROM_WINDOW)

    async def append(
        self,
        *,
        user_id: str,
        session_id: str,
        role: str,
        content: str,
        ts_ms: int,
        caller_msg_id: str | None = None,
        name: str | None = None,
    ) -> WriteResult:
        """Push one validated message and enqueue its ingest job, atomically. A caller's
        ``caller_msg_id`` is its idempotency key within the session."""
        k = self.keys
        s = self.settings
        try:
            res = await self._write(
                keys=[
                    k.window(user_id, session_id),
                    k.state(user_id, session_id),
                    k.idempotency(user_id, session_id, caller_msg_id or "_"),
                    k.session_stream(user_id, session_id),
                ],
                args=[
                    user_id,
                    session_id,
                    role,
                    content,
                    str(ts_ms),
                    scoped_msg_id(user_id, session_id, caller_msg_id) if caller_msg_id else "",
                    s.window_max_messages,
                    s.window_ttl_s,
                    s.state_ttl_s,
                    s.idempotency_ttl_s,
                    name or "",
                    session_tag(user_id, session_id),
                    text_hash(f"{role}\x1f{name or ''}\x1f{content}"),
                ],
            )
        except REDIS_ERRORS as exc:
            raise _wrap(exc) from exc
        return WriteResult(_text(res[0]), bool(int(res[1])))

    async def window(self, user_id: str, session_id: str, n: int | None = None) -> WindowRead:
        """The last ``n`` messages of the session, oldest first, and whether the window
        is complete."""
        count = n or self.settings.recent_window_read
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.lrange(self.keys.window(user_id, session_id), -count, -1)
                pipe.hget(self.keys.state(user_id, session_id), "_complete")
                raw, complete = await pipe.execute()
        except REDIS_ERRORS as exc:
            raise _wrap(exc) from exc
        msgs = [_message(r, session_id) for r in raw]
        return WindowRead([m for m in msgs if m.user_id == user_id], complete is not None)

    async def repair_window(self, user_id: str, session_id: str, recent: Sequence[Message]) -> int:
        """Merge the ledger's ``recent`` messages into the window and mark it complete;
        returns how many messages it holds."""
        s = self.settings
        try:
            held = await self._repair(
                keys=[self.keys.window(user_id, session_id), self.keys.state(user_id, session_id)],
                args=[
                    s.window_max_messages,
                    s.window_ttl_s,
                    s.state_ttl_s,
                    *(_entry(m) for m in recent),
                ],
            )
        except REDIS_ERRORS as exc:
            raise _wrap(exc) from exc
        return int(held)

    async def window_length(self, user_id: str, session_id: str) -> int:
        try:
            return int(await self.redis.llen(self.keys.window(user_id, session_id)))
        except REDIS_ERRORS as exc:
            raise _wrap(exc) from exc

    async def set_state(self, user_id: str, session_id: str, values: Mapping[str, Any]) -> None:
        """HSET the given fields (JSON-encoded), delete those whose value is None, and
        refresh the state TTL."""
        if not values:
            raise ValidationError("set_state needs at least one field")
        flat: list[str] = []
        deleted: list[str] = []
        for field, value in values.items():
            if not isinstance(field, str) or not field or field.startswith("_"):
                raise ValidationError(
                    f"state field {field!r} must be a non-empty name not starting with '_'"
                )
            if value is None:
                deleted.append(field)
            else:
                flat += [field, json.dumps(value, ensure_ascii=False)]
        try:
            await self._set_state(
                keys=[self.keys.state(user_id, session_id)],
                args=[self.settings.state_ttl_s, len(flat) // 2, *flat, *deleted],
            )
        except REDIS_ERRORS as exc:
            raise _wrap(exc) from exc

    async def get_state(self, user_id: str, session_id: str) -> SessionState:
        try:
            raw = await self.redis.hgetall(self.keys.state(user_id, session_id))
        except REDIS_ERRORS as exc:
            raise _wrap(exc) from exc
        data = {_text(k): _text(v) for k, v in raw.items()}
        fields = {k: json.loads(v) for k, v in data.items() if not k.startswith("_")}
        last_at = data.get("_last_msg_at_ms")
        return SessionState(
            fields=fields,
            turns=int(data.get("_turns", 0)),
            last_msg_id=data.get("_last_msg_id"),
            last_msg_at=from_ms(int(last_at)) if last_at else None,
        )

    async def acquire_lock(
        self, user_id: str, session_id: str, *, ttl_s: int | None = None
    ) -> str | None:
        """SET NX EX: a token when acquired, None when another holder has it."""
        token = secrets.token_hex(12)
        try:
            ok = await self.redis.set(
                self.keys.lock(user_id, session_id),
                token,
                nx=True,
                ex=ttl_s or self.settings.lock_ttl_s,
            )
        except REDIS_ERRORS as exc:
            raise _wrap(exc) from exc
        return token if ok else None

    async def release_lock(self, user_id: str, session_id: str, token: str) -> bool:
        """Release only if ``token`` still owns the lock (it may have expired and moved on)."""
        try:
            return bool(
                await self._release(keys=[self.keys.lock(user_id, session_id)], args=[token])
            )
        except REDIS_ERRORS as exc:
            raise _wrap(exc) from exc

    @asynccontextmanager
    async def lock(
        self, user_id: str, session_id: str, *, ttl_s: int | None = None, wait_s: float = 0.0
    ) -> AsyncIterator[str]:
        """Hold the session lock for a block, waiting up to ``wait_s`` for it."""
        deadline = time.monotonic() + wait_s
        while (token := await self.acquire_lock(user_id, session_id, ttl_s=ttl_s)) is None:
            if time.monotonic() >= deadline:
                raise LockNotAcquired(f"session {session_id!r} is locked by another holder")
            await asyncio.sleep(0.01)
        try:
            yield token
        finally:
            await self.release_lock(user_id, session_id, token)

    async def server_time(self) -> datetime:
        """Redis's clock: the one that stamps accepted jobs (``accepted_us``)."""
        try:
            seconds, micros = await self.redis.time()
        except REDIS_ERRORS as exc:
            raise _wrap(exc) from exc
        return datetime.fromtimestamp(int(seconds) + int(micros) / 1_000_000, tz=UTC)

    async def remove_message(self, user_id: str, session_id: str, msg_id: str) -> int:
        """Take the message out of the session's window; returns how many entries went."""
        try:
            return int(
                await self._remove(
                    keys=[self.keys.window(user_id, session_id)], args=[msg_id, user_id]
                )
            )
        except REDIS_ERRORS as exc:
            raise _wrap(exc) from exc

    async def forget_user(self, user_id: str) -> int:
        """Delete every Redis key of ``user_id``'s sessions; returns how many."""
        return await self._delete_matching(self.keys.user_sessions_pattern(user_id))

    async def forget_session(self, user_id: str, session_id: str) -> int:
        """Delete every Redis key of one session; returns how many."""
        return await self._delete_matching(self.keys.session_pattern(user_id, session_id))

    async def _delete_matching(self, pattern: str) -> int:
        deleted = 0
        try:
            batch: list[str] = []
            async for key in self.redis.scan_iter(match=pattern, count=500):
                batch.append(_text(key))
                if len(batch) >= 500:
                    deleted += int(await self.redis.delete(*batch))
                    batch = []
            if batch:
                deleted += int(await self.redis.delete(*batch))
        except REDIS_ERRORS as exc:
            raise _wrap(exc) from exc
        return deleted

    async def keys_without_ttl(self) -> list[str]:
        """Keys under our prefix that would live forever (the queue and the layout mark
        are exempt: they are meant to)."""
        exempt = self.keys.durable()
        found: list[str] = []
        try:
            async for key in self.redis.scan_iter(match=self.keys.pattern(), count=500):
                name = _text(key)
                if name not in exempt and await self.redis.ttl(name) == -1:
                    found.append(name)
        except REDIS_ERRORS as exc:
            raise _wrap(exc) from exc
        return sorted(found)


def _text(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v
