"""Every Redis key name memstack writes is built here.

A session belongs to its user: ``alice``'s ``s1`` and ``bob``'s ``s1`` are two
sessions, so every session key carries both ids. They form the Redis Cluster hash tag
(``{alice/s1}``): a script over one session's keys stays in one slot. ``/`` cannot
occur in an id (see :mod:`memstack.core.ids`), so the tag is never ambiguous.

Keys written before sessions were scoped (``{s1}``) are renamed by
:func:`memstack.stores.redis.layout.upgrade`; ``layout`` records that it ran.
"""

from __future__ import annotations

from dataclasses import dataclass

# Version of the key layout above; stored under Keys.layout() once a Redis holds it.
LAYOUT_VERSION = "2"


def session_tag(user_id: str, session_id: str) -> str:
    """The hash tag of a session: its user and its id."""
    return f"{user_id}/{session_id}"


@dataclass(frozen=True)
class Keys:
    prefix: str = "agent"

    def _session(self, user_id: str, session_id: str, what: str) -> str:
        return f"{self.prefix}:session:{{{session_tag(user_id, session_id)}}}:{what}"

    def window(self, user_id: str, session_id: str) -> str:
        return self._session(user_id, session_id, "window")

    def state(self, user_id: str, session_id: str) -> str:
        return self._session(user_id, session_id, "state")

    def knowledge(self, user_id: str, session_id: str) -> str:
        return self._session(user_id, session_id, "knowledge")

    def lock(self, user_id: str, session_id: str) -> str:
        return self._session(user_id, session_id, "lock")

    def idempotency(self, user_id: str, session_id: str, caller_msg_id: str) -> str:
        """The mark of a caller's own message id (its idempotency key in the session)."""
        return self._session(user_id, session_id, f"idem:{caller_msg_id}")

    def user_sessions_pattern(self, user_id: str) -> str:
        """SCAN pattern of every key of ``user_id``'s sessions (ids hold no glob
        characters, so the pattern matches exactly these)."""
        return f"{self.prefix}:session:{{{user_id}/*"

    def session_pattern(self, user_id: str, session_id: str) -> str:
        """SCAN pattern of every key of one session (window, state, knowledge cache,
        lock, idempotency marks)."""
        return self._session(user_id, session_id, "*")

    def ingest_stream(self) -> str:
        return f"{self.prefix}:ingest"

    def dead_letter_stream(self) -> str:
        return f"{self.prefix}:ingest:dead"

    def layout(self) -> str:
        """Which key layout this Redis holds (no TTL: it describes the data)."""
        return f"{self.prefix}:layout"

    def pattern(self) -> str:
        """SCAN pattern matching every key under the prefix."""
        return f"{self.prefix}:*"

    def durable(self) -> frozenset[str]:
        """Keys that live without a TTL on purpose: the queue and the layout mark."""
        return frozenset({self.ingest_stream(), self.dead_letter_stream(), self.layout()})
