"""Every Redis key name memstack writes is built here.

Keys of one session carry the session id as a Redis Cluster hash tag (``{sid}``) so a
transaction or script over them stays in one slot.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Keys:
    prefix: str = "agent"

    def window(self, session_id: str) -> str:
        return f"{self.prefix}:session:{{{session_id}}}:window"

    def state(self, session_id: str) -> str:
        return f"{self.prefix}:session:{{{session_id}}}:state"

    def knowledge(self, session_id: str) -> str:
        return f"{self.prefix}:session:{{{session_id}}}:knowledge"

    def lock(self, session_id: str) -> str:
        return f"{self.prefix}:session:{{{session_id}}}:lock"

    def idempotency(self, session_id: str, msg_id: str) -> str:
        return f"{self.prefix}:session:{{{session_id}}}:idem:{msg_id}"

    def ingest_stream(self) -> str:
        return f"{self.prefix}:ingest"

    def dead_letter_stream(self) -> str:
        return f"{self.prefix}:ingest:dead"

    def pattern(self) -> str:
        """SCAN pattern matching every key under the prefix."""
        return f"{self.prefix}:*"
