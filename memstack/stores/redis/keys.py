"""Every Redis key name memstack writes is built here.

A session belongs to its user: ``alice``'s ``s1`` and ``bob``'s ``s1`` are two
sessions, so every session key carries both ids. They form the Redis Cluster hash tag
(``{alice/s1}``): a script over one session's keys stays in one slot. ``/`` cannot
occur in an id (see :mod:`memstack.core.ids`), so the tag is never ambiguous.

Keys written before sessions were scoped (``{s1}``) are renamed by
:func:`memstack.stores.redis.layout.upgrade`; ``layout`` records that it ran.

On a Redis Cluster (``shards`` set) the write script also appends to the ingest
stream, so a session's keys and its stream must share a slot: there the hash tag is
the session's shard, ``crc32(user/session) % shards``, and the ids follow it
(``agent:session:{7}:alice/s1:window``, stream ``agent:ingest:{7}``, dead letters
``agent:ingest:{7}:dead``). The shard count decides where every key lives, so the
layout mark records it and a process set to another count is refused.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from memstack.core.settings import Settings

# Version of the key layout above; stored under Keys.layout() once a Redis holds it.
LAYOUT_VERSION = "2"


def session_tag(user_id: str, session_id: str) -> str:
    """The hash tag of a session: its user and its id."""
    return f"{user_id}/{session_id}"


def cluster_layout(shards: int) -> str:
    """The layout mark of a cluster sharded ``shards`` ways."""
    return f"cluster-1 shards={shards}"


@dataclass(frozen=True)
class Keys:
    """Key names under ``prefix``; ``shards`` is None on one Redis (the layout above),
    the number of ingest shards on a Redis Cluster."""

    prefix: str = "agent"
    shards: int | None = None

    def shard(self, user_id: str, session_id: str) -> int | None:
        """The session's shard on a cluster (None on one Redis)."""
        if self.shards is None:
            return None
        return zlib.crc32(session_tag(user_id, session_id).encode()) % self.shards

    def _session(self, user_id: str, session_id: str, what: str) -> str:
        shard = self.shard(user_id, session_id)
        if shard is None:
            return f"{self.prefix}:session:{{{session_tag(user_id, session_id)}}}:{what}"
        return f"{self.prefix}:session:{{{shard}}}:{session_tag(user_id, session_id)}:{what}"

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
        characters, braces or ``/``, so the pattern matches exactly these)."""
        if self.shards is None:
            return f"{self.prefix}:session:{{{user_id}/*"
        return f"{self.prefix}:session:{{*}}:{user_id}/*"

    def session_pattern(self, user_id: str, session_id: str) -> str:
        """SCAN pattern of every key of one session (window, state, knowledge cache,
        lock, idempotency marks)."""
        return self._session(user_id, session_id, "*")

    def parse_session(self, key: str) -> tuple[str, str, str] | None:
        """(user_id, session_id, what) of a session key of this layout, else None."""
        head = f"{self.prefix}:session:{{"
        if not key.startswith(head):
            return None
        tag, sep, rest = key[len(head) :].partition("}:")
        if self.shards is not None:
            tag, sep, rest = rest.partition(":") if sep else ("", "", "")
        user_id, slash, session_id = tag.partition("/")
        if not sep or not slash or not rest or self._session(user_id, session_id, rest) != key:
            return None
        return user_id, session_id, rest

    def ingest_stream(self) -> str:
        """The ingest stream of one Redis (a cluster has one per shard)."""
        return f"{self.prefix}:ingest"

    def dead_letter_stream(self) -> str:
        return f"{self.prefix}:ingest:dead"

    def session_stream(self, user_id: str, session_id: str) -> str:
        """The stream the session's jobs go to: in its slot on a cluster."""
        shard = self.shard(user_id, session_id)
        return self.ingest_stream() if shard is None else f"{self.prefix}:ingest:{{{shard}}}"

    def streams(self) -> list[tuple[str, str]]:
        """Every (ingest stream, its dead-letter stream); on a cluster one pair per shard,
        in the shard's slot, so moving a job to the dead letters stays one MULTI."""
        if self.shards is None:
            return [(self.ingest_stream(), self.dead_letter_stream())]
        return [
            (f"{self.prefix}:ingest:{{{i}}}", f"{self.prefix}:ingest:{{{i}}}:dead")
            for i in range(self.shards)
        ]

    def worker(self, worker_id: str) -> str:
        """A worker's heartbeat: set with a TTL on every beat, so a worker that died
        without a word vanishes on its own. One slot for all (``{workers}``), so one
        SCAN of one node finds them on a cluster too."""
        return f"{self.prefix}:workers:{{workers}}:{worker_id}"

    def workers_pattern(self) -> str:
        """SCAN pattern of every worker's heartbeat."""
        return f"{self.prefix}:workers:{{workers}}:*"

    def layout(self) -> str:
        """Which key layout this Redis holds (no TTL: it describes the data)."""
        return f"{self.prefix}:layout"

    def layout_mark(self) -> str:
        """The value :meth:`layout` holds for this layout."""
        return LAYOUT_VERSION if self.shards is None else cluster_layout(self.shards)

    def pattern(self) -> str:
        """SCAN pattern matching every key under the prefix."""
        return f"{self.prefix}:*"

    def durable(self) -> frozenset[str]:
        """Keys that live without a TTL on purpose: the queue and the layout mark."""
        return frozenset({name for pair in self.streams() for name in pair} | {self.layout()})


def keys_for(settings: Settings) -> Keys:
    """The keys of a deployment: sharded on a Redis Cluster, today's layout otherwise."""
    return Keys(settings.key_prefix, settings.ingest_shards if settings.redis_cluster else None)
