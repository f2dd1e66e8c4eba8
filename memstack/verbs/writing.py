"""The write path's entry: one message (``remember``, on the facade) or many
(``remember_many``), each checked the same way before anything is written.

A mixin of :class:`memstack.AsyncMemory`: the working memory and the queue.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memstack.core.errors import Conflict, ValidationError
from memstack.core.ids import scoped_msg_id, validate_id
from memstack.core.messages import MAX_BATCH, Remembered, validate_message, validate_name
from memstack.core.time import Timestamp, message_time_ms
from memstack.stores.redis.queue import job_fields
from memstack.verbs.base import Verbs

if TYPE_CHECKING:
    from memstack.stores.redis.working_memory import WriteResult

# What one message of a batch may hold: remember()'s arguments.
_ITEM_FIELDS = frozenset({"role", "content", "msg_id", "ts", "name"})


@dataclass(frozen=True)
class Checked:
    """A message that passed every check of ``remember``, ready for the write script."""

    role: str
    content: str
    ts_ms: int
    msg_id: str | None
    name: str | None


class Writing(Verbs):
    def _check_message(
        self, role: object, content: object, msg_id: object, ts: Timestamp | None, name: object
    ) -> Checked:
        """Role, content and size, author, time and idempotency key, in that order."""
        text = validate_message(role, content, max_bytes=self.stores.settings.max_message_bytes)
        author = validate_name(name)
        ts_ms = message_time_ms(ts)
        caller_id = validate_id("msg_id", msg_id) if msg_id is not None else None
        return Checked(str(role), text, ts_ms, caller_id, author)

    async def _write_message(self, user_id: str, session_id: str, m: Checked) -> WriteResult:
        """One checked message through the write script (window, state, job), and into
        the embedded journal when it was new."""
        result = await self.stores.working.append(
            user_id=user_id,
            session_id=session_id,
            role=m.role,
            content=m.content,
            ts_ms=m.ts_ms,
            caller_msg_id=m.msg_id,
            name=m.name,
        )
        if not result.duplicate and self.stores.queue.journal is not None:
            job = job_fields(
                msg_id=result.msg_id,
                user_id=user_id,
                session_id=session_id,
                role=m.role,
                content=m.content,
                ts_ms=m.ts_ms,
                name=m.name,
                accepted_us=time.time_ns() // 1000,
            )
            self.stores.queue.accepted(job)
        return result

    def _check_batch(self, messages: object) -> list[Checked]:
        if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
            raise ValidationError("messages must be a list of messages")
        if not 0 < len(messages) <= MAX_BATCH:
            raise ValidationError(f"a batch holds 1 to {MAX_BATCH} messages, got {len(messages)}")
        checked = []
        for i, item in enumerate(messages):
            try:
                if not isinstance(item, Mapping):
                    raise ValidationError(f"a message is a mapping, not {type(item).__name__}")
                unknown = sorted(str(k) for k in set(item) - _ITEM_FIELDS)
                if unknown:
                    raise ValidationError(f"unknown field(s) {unknown}")
                if item.get("msg_id") is None:
                    # Without it a batch sent again would store its messages twice.
                    raise ValidationError("msg_id is required in a batch: it makes a retry safe")
                checked.append(
                    self._check_message(
                        item.get("role"),
                        item.get("content"),
                        item["msg_id"],
                        item.get("ts"),
                        item.get("name"),
                    )
                )
            except ValidationError as exc:
                raise type(exc)(f"messages[{i}]: {exc}") from None
        return checked

    async def remember_many(
        self, user_id: str, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[Remembered]:
        """Record many messages of one session, in order: one :class:`Remembered` per
        message, ``ok``, ``duplicate`` or ``error``.

        Each message is a mapping of ``remember``'s arguments (``role``, ``content``,
        ``msg_id``, ``ts``, ``name``), checked as ``remember`` checks them; ``msg_id`` is
        required, so sending a batch again changes nothing (every message ``duplicate``).
        Every message is checked before any is written: one that fails a check raises
        :class:`ValidationError` naming its index, and nothing of the batch is written.
        A ``msg_id`` stored before with another message (or twice in the batch with two)
        is that message's ``error`` (``Conflict``); the others are written. At most
        ``MAX_BATCH`` (100) messages.
        """
        validate_id("user_id", user_id)
        validate_id("session_id", session_id)
        checked = self._check_batch(messages)
        out: list[Remembered] = []
        for m in checked:
            assert m.msg_id is not None  # required above
            try:
                result = await self._write_message(user_id, session_id, m)
            except Conflict as exc:
                stored = scoped_msg_id(user_id, session_id, m.msg_id)
                out.append(Remembered(stored, "error", type(exc).__name__, str(exc)))
                continue
            status = "duplicate" if result.duplicate else "ok"
            out.append(Remembered(result.msg_id, status))
        return out
