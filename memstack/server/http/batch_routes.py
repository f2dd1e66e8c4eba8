"""``POST /v1/users/{user}/sessions/{session}/messages/batch``: many messages of one
session in one request, each idempotent by its ``msg_id``, one answer per message."""

from __future__ import annotations

from memstack.server.batch_schemas import (
    RememberBatchIn,
    RememberBatchOut,
    RememberedOut,
    batch_item,
)
from memstack.server.http.params import SESSION, MemoryDep, Route, SessionId, UserId


async def remember_batch(
    user_id: UserId, session_id: SessionId, body: RememberBatchIn, mem: MemoryDep
) -> RememberBatchOut:
    """Record many messages of the session, in order, each as ``POST …/messages`` would:
    ``ok``, ``duplicate`` (the same ``msg_id`` and message before) or ``error`` (a
    ``msg_id`` used for another message: ``Conflict``; the others are still stored)."""
    results = await mem.remember_many(user_id, session_id, [batch_item(m) for m in body.messages])
    return RememberBatchOut(
        results=[RememberedOut.model_validate(r, from_attributes=True) for r in results]
    )


ROUTES: list[Route] = [("POST", f"{SESSION}/messages/batch", remember_batch, {})]
