"""Working memory as an export reads it and an import leaves it: which sessions have a
task state, and windows that must take in messages written to the ledger directly."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from memstack.core.errors import StoreUnavailable
from memstack.stores.redis.errors import REDIS_ERRORS
from memstack.stores.redis.working_memory import WorkingMemory

# The state field that says the window holds the session's recent history (see
# scripts.WRITE and scripts.REPAIR_WINDOW): without it the next read merges the ledger in.
COMPLETE_FIELD = "_complete"

# KEYS: state. ARGV: state_ttl_s, turns, last msg_id or "", its time in ms or "".
# The larger turn count and the later last message win, so an import run twice, or into
# a session that went on here, changes nothing it should not (the write script keeps
# the same fields; see scripts.WRITE).
RESTORE_COUNTERS = """
local turns = tonumber(ARGV[2])
if turns > tonumber(redis.call('HGET', KEYS[1], '_turns') or '0') then
  redis.call('HSET', KEYS[1], '_turns', turns)
end
if ARGV[4] ~= '' then
  local held = tonumber(redis.call('HGET', KEYS[1], '_last_msg_at_ms') or '-1')
  if tonumber(ARGV[4]) > held then
    redis.call('HSET', KEYS[1], '_last_msg_id', ARGV[3], '_last_msg_at_ms', ARGV[4])
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return 1
"""


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
        raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc
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
        raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc


async def restore_counters(
    working: WorkingMemory,
    user_id: str,
    session_id: str,
    turns: int,
    last_msg_id: str | None,
    last_msg_at: datetime | None,
) -> None:
    """Give the session the turn count and last message an export recorded, unless it
    holds a larger count or a later message already."""
    # Rounded: the time went through RFC 3339 text, where ms may come back as 0.9999.
    at_ms = "" if last_msg_at is None else str(round(last_msg_at.timestamp() * 1000))
    script = working.redis.register_script(RESTORE_COUNTERS)
    try:
        await script(
            keys=[working.keys.state(user_id, session_id)],
            args=[working.settings.state_ttl_s, turns, last_msg_id or "", at_ms],
        )
    except REDIS_ERRORS as exc:
        raise StoreUnavailable(f"Redis: {exc}", layer="redis") from exc
