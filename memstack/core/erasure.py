"""What erasing a user reports: how much each layer held, and the API keys it revoked.

A dict of counts, as it always was, so a caller that reads ``report["messages"]`` keeps
working; the keys are listed by id (``memstack keys list`` shows the same ids), never by
secret, which is not stored anyway.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class UserErasure(dict[str, int]):
    """Counts per layer (``messages``, ``facts``, ``api_keys``, …) and ``revoked_keys``:
    the ids of the keys bound to the user that the erasure revoked."""

    def __init__(self, counts: Mapping[str, int], revoked_keys: Iterable[str] = ()) -> None:
        super().__init__(counts)
        self.revoked_keys: tuple[str, ...] = tuple(revoked_keys)

    def __repr__(self) -> str:
        return f"UserErasure({dict(self)!r}, revoked_keys={list(self.revoked_keys)!r})"
