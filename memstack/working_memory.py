"""Working memory on Redis: the session window, task state, locks and idempotency marks.

Every key written here carries a TTL; :meth:`WorkingMemory.keys_without_ttl` is the
patrol that proves it (seed 002 §5.2).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import unicodedata
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from memstack import scripts
from memstack.errors import (
    InvalidContent,
    LockNotAcquired,
    SessionOwnershipError,
    StoreUnavailable,
    ValidationError,
)
from memstack.keys import Keys
from memstack.settings import Settings

ROLES = frozenset({"user", "assistant", "system", "tool"})


@dataclass(frozen=True)
class WindowMessage:
    msg_id: str
    user_id: str
    role: str
    content: str
    ts_ms: int
    # The author in a conversation of several people (OpenAI's ``name``); last, with a
    # default, so positional construction from before it existed keeps working.
    name: str | None = None

    def to_json(self) -> str:
        d = {
            "msg_id": self.msg_id,
            "user_id": self.user_id,
            "role": self.role,
            "content": self.content,
            "ts_ms": str(self.ts_ms),
        }
        if self.name is not None:
            d["name"] = self.name
        return json.dumps(d, ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: bytes | str) -> WindowMessage:
        d = json.loads(raw)
        # .get: entries written before names existed have no "name" key.
        return cls(
            d["msg_id"],
            d["user_id"],
            d["role"],
            d["content"],
            int(float(d["ts_ms"])),
            d.get("name") or None,
        )


@dataclass(frozen=True)
class WriteResult:
    msg_id: str
    duplicate: bool


@dataclass(frozen=True)
class SessionState:
    fields: dict[str, Any]
    turns: int
    last_msg_id: str | None
    last_msg_at_ms: int | None


def _wrap(exc: RedisError) -> Exception:
    if isinstance(exc, ResponseError) and "OWNER" in str(exc):
        return SessionOwnershipError("this session belongs to another user")
    return StoreUnavailable(f"Redis: {exc}")


class WorkingMemory:
    def __init__(self, redis: Redis, settings: Settings) -> None:
        self.redis = redis
        self.settings = settings
        self.keys = Keys(settings.key_prefix)
        self._write = redis.register_script(scripts.WRITE)
        self._set_state = redis.register_script(scripts.SET_STATE)
        self._rebuild = redis.register_script(scripts.REBUILD_WINDOW)
        self._release = redis.register_script(scripts.RELEASE_LOCK)

    async def append(
        self,
        *,
        user_id: str,
        session_id: str,
        role: str,
        content: str,
        ts_ms: int,
        msg_id: str | None = None,
        name: str | None = None,
    ) -> WriteResult:
        """Push one validated message and enqueue its ingest job, atomically."""
        k = self.keys
        s = self.settings
        try:
            res = await self._write(
                keys=[
                    k.window(session_id),
                    k.state(session_id),
                    k.idempotency(session_id, msg_id or "_"),
                    k.ingest_stream(),
                ],
                args=[
                    user_id,
                    session_id,
                    role,
                    content,
                    str(ts_ms),
                    msg_id or "",
                    s.window_max_messages,
                    s.window_ttl_s,
                    s.state_ttl_s,
                    s.idempotency_ttl_s,
                    name or "",
                ],
            )
        except RedisError as exc:
            raise _wrap(exc) from exc
        return WriteResult(_text(res[0]), bool(int(res[1])))

    async def window(
        self, user_id: str, session_id: str, n: int | None = None
    ) -> list[WindowMessage]:
        """The last ``n`` messages of the session, oldest first, only ``user_id``'s."""
        count = n or self.settings.recent_window_read
        try:
            raw = await self.redis.lrange(self.keys.window(session_id), -count, -1)
        except RedisError as exc:
            raise _wrap(exc) from exc
        msgs = [WindowMessage.from_json(r) for r in raw]
        return [m for m in msgs if m.user_id == user_id]

    async def rebuild_window(
        self, user_id: str, session_id: str, messages: Sequence[WindowMessage]
    ) -> bool:
        """Refill an empty window from ledger rows; False when a writer refilled it first."""
        if not messages:
            return False
        s = self.settings
        try:
            done = await self._rebuild(
                keys=[self.keys.window(session_id), self.keys.state(session_id)],
                args=[
                    user_id,
                    s.window_max_messages,
                    s.window_ttl_s,
                    s.state_ttl_s,
                    *(m.to_json() for m in messages),
                ],
            )
        except RedisError as exc:
            raise _wrap(exc) from exc
        return bool(done)

    async def session_owner(self, session_id: str) -> str | None:
        try:
            owner = await self.redis.hget(self.keys.state(session_id), "_user_id")
        except RedisError as exc:
            raise _wrap(exc) from exc
        return _text(owner) if owner is not None else None

    async def set_state(self, user_id: str, session_id: str, values: Mapping[str, Any]) -> None:
        """HSET the given fields (JSON-encoded) and refresh the state TTL."""
        if not values:
            raise ValidationError("set_state needs at least one field")
        flat: list[str] = []
        for field, value in values.items():
            if not isinstance(field, str) or not field or field.startswith("_"):
                raise ValidationError(
                    f"state field {field!r} must be a non-empty name not starting with '_'"
                )
            flat += [field, json.dumps(value, ensure_ascii=False)]
        try:
            await self._set_state(
                keys=[self.keys.state(session_id)],
                args=[user_id, self.settings.state_ttl_s, *flat],
            )
        except RedisError as exc:
            raise _wrap(exc) from exc

    async def get_state(self, user_id: str, session_id: str) -> SessionState:
        try:
            raw = await self.redis.hgetall(self.keys.state(session_id))
        except RedisError as exc:
            raise _wrap(exc) from exc
        data = {_text(k): _text(v) for k, v in raw.items()}
        owner = data.get("_user_id")
        if owner is not None and owner != user_id:
            raise SessionOwnershipError("this session belongs to another user")
        fields = {k: json.loads(v) for k, v in data.items() if not k.startswith("_")}
        last_at = data.get("_last_msg_at_ms")
        return SessionState(
            fields=fields,
            turns=int(data.get("_turns", 0)),
            last_msg_id=data.get("_last_msg_id"),
            last_msg_at_ms=int(last_at) if last_at else None,
        )

    async def acquire_lock(self, session_id: str, *, ttl_s: int | None = None) -> str | None:
        """SET NX EX: a token when acquired, None when another holder has it."""
        token = secrets.token_hex(12)
        try:
            ok = await self.redis.set(
                self.keys.lock(session_id), token, nx=True, ex=ttl_s or self.settings.lock_ttl_s
            )
        except RedisError as exc:
            raise _wrap(exc) from exc
        return token if ok else None

    async def release_lock(self, session_id: str, token: str) -> bool:
        """Release only if ``token`` still owns the lock (it may have expired and moved on)."""
        try:
            return bool(await self._release(keys=[self.keys.lock(session_id)], args=[token]))
        except RedisError as exc:
            raise _wrap(exc) from exc

    @asynccontextmanager
    async def lock(
        self, session_id: str, *, ttl_s: int | None = None, wait_s: float = 0.0
    ) -> AsyncIterator[str]:
        """Hold the session lock for a block, waiting up to ``wait_s`` for it."""
        deadline = time.monotonic() + wait_s
        while (token := await self.acquire_lock(session_id, ttl_s=ttl_s)) is None:
            if time.monotonic() >= deadline:
                raise LockNotAcquired(f"session {session_id!r} is locked by another holder")
            await asyncio.sleep(0.01)
        try:
            yield token
        finally:
            await self.release_lock(session_id, token)

    async def forget_sessions(self, user_id: str, session_ids: list[str]) -> int:
        """Delete the Redis keys of ``user_id``'s sessions (ledger-known and still-live ones)."""
        k = self.keys
        deleted = 0
        try:
            live = set(session_ids)
            # Sessions whose messages have not reached the ledger yet are known by state.
            async for key in self.redis.scan_iter(match=f"{k.prefix}:session:*:state", count=500):
                if _text(await self.redis.hget(key, "_user_id") or b"") == user_id:
                    live.add(_text(key).split("{", 1)[1].rsplit("}", 1)[0])
            for sid in live:
                if await self.session_owner(sid) not in (None, user_id):
                    continue
                names = [k.window(sid), k.state(sid), k.knowledge(sid), k.lock(sid)]
                async for idem in self.redis.scan_iter(
                    match=f"{k.prefix}:session:{{{sid}}}:idem:*"
                ):
                    names.append(_text(idem))
                deleted += int(await self.redis.delete(*names))
        except RedisError as exc:
            raise _wrap(exc) from exc
        return deleted

    async def keys_without_ttl(self) -> list[str]:
        """Keys under our prefix that would live forever (the streams are the queue, exempt)."""
        exempt = {self.keys.ingest_stream(), self.keys.dead_letter_stream()}
        found: list[str] = []
        try:
            async for key in self.redis.scan_iter(match=self.keys.pattern(), count=500):
                name = _text(key)
                if name not in exempt and await self.redis.ttl(name) == -1:
                    found.append(name)
        except RedisError as exc:
            raise _wrap(exc) from exc
        return sorted(found)


def _text(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def validate_message(settings: Settings, role: object, content: object) -> str:
    """Check role and content before anything is written; return the content."""
    if role not in ROLES:
        raise InvalidContent(f"role {role!r} is not one of {sorted(ROLES)}")
    if not isinstance(content, str):
        raise InvalidContent(f"content must be a string, got {type(content).__name__}")
    if not content.strip():
        raise InvalidContent("content is empty")
    size = len(content.encode("utf-8"))
    if size > settings.max_message_bytes:
        raise InvalidContent(
            f"content is {size} bytes; the limit is {settings.max_message_bytes} "
            "(MEMSTACK_MAX_MESSAGE_BYTES); store large tool output with set_state"
        )
    return content


NAME_MAX_CHARS = 64
# Names are printed as "name: content" (and "name：content" in Chinese): a colon inside
# one would make the line read as a different author.
_NAME_FORBIDDEN = frozenset(":：")
# Control characters, and the Unicode line and paragraph separators, which break a
# rendered line just as "\n" does.
_NAME_BAD_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})


def validate_name(name: object) -> str | None:
    """Check a message author's name before anything is written; return it stripped.

    None means no name. An empty or blank name is refused rather than dropped: the
    caller meant to name someone and would otherwise lose the author silently.
    """
    if name is None:
        return None
    if not isinstance(name, str):
        raise InvalidContent(f"name must be a string, got {type(name).__name__}")
    stripped = name.strip()
    if not stripped:
        raise InvalidContent("name is empty; pass None for a message without a name")
    if len(stripped) > NAME_MAX_CHARS:
        raise InvalidContent(f"name is {len(stripped)} characters; the limit is {NAME_MAX_CHARS}")
    for ch in stripped:
        if unicodedata.category(ch) in _NAME_BAD_CATEGORIES:
            raise InvalidContent(f"name contains a control character or line break ({ch!r})")
        if ch in _NAME_FORBIDDEN:
            raise InvalidContent(f"name must not contain {ch!r}: it is printed as 'name: content'")
    return stripped
