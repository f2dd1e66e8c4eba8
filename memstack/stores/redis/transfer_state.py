"""Working memory as an export reads it and an import leaves it: which sessions have a
task state, and windows that must take in messages written to the ledger directly."""

from __future__ import annotations

from collections.abc import Iterable

from memstack.core.errors import StoreUnavailable
from memstack.stores.redis.errors import REDIS_ERRORS
from memstack.stores.redis.working_memory import WorkingMemory

# The state field that says the window holds the session's recent history (see
# scripts.WRITE and scripts.REPAIR_WINDOW): without it the next read merges the ledger in.
COMPLETE_FIELD = "_complete"


def _session_of(working: WorkingMemory, key: str) -> tuple[str, str] | None:
    """(user_id, session_id) of a state key, or None for any other key."""
    parsed = working.keys.parse_session(key)
    if parsed is None or parsed[2] != "state":
        return None
    return parsed[0], parsed[1]


async def state_sessions(
    working: WorkingMemory, user_id: str | None = None
) -> list[tuple[str, str]]:
    """The (user, session) pairs with a task-state hash: of ``user_id``, or of everyone."""
    keys = working.keys
    pattern = keys.user_sessions_pattern(user_id) if user_id else f"{keys.prefix}:session:*"
    found: set[tuple[str, str]] = set()
    try:
        async for raw in working.redis.scan_iter(match=pattern, count=500):
            key = raw.decode() if isinstance(raw, bytes) else str(raw)
            pair = _session_of(working, key)
            if pair is not None and (user_id is None or pair[0] == user_id):
                found.add(pair)
    except REDIS_ERRORS as exc:
        raise StoreUnavailable(f"Redis: {exc}") from exc
    return sorted(found)


async def mark_windows_incomplete(
    working: WorkingMemory, sessions: Iterable[tuple[str, str]]
) -> None:
    """Make the next read of each session's window merge the ledger's recent messages in
    (an import wrote them to the ledger, not to the window)."""
    try:
        async with working.redis.pipeline(transaction=False) as pipe:
            for user_id, session_id in sorted(set(sessions)):
                pipe.hdel(working.keys.state(user_id, session_id), COMPLETE_FIELD)
            await pipe.execute()
    except REDIS_ERRORS as exc:
        raise StoreUnavailable(f"Redis: {exc}") from exc
