"""API keys of the HTTP API: created, listed, revoked, and checked.

A mixin of :class:`memstack.AsyncMemory`, and the base of erasure's, which revokes keys.
Checks are on the hot path of every request, so this process keeps what it read of a
key, and whether any key exists, for at most :data:`KEY_CACHE_S`: a key revoked by
another process is refused within that time (at once by this one).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from memstack.core import api_keys as shapes
from memstack.core.api_keys import ApiKey
from memstack.core.errors import NotFound, StoreUnavailable, ValidationError
from memstack.core.ids import validate_id
from memstack.stores.sql import api_keys, db
from memstack.stores.sql.api_keys import StoredKey
from memstack.verbs.base import Verbs

KEY_CACHE_S = 2.0
# Key ids remembered at most; past it the cache starts over (a flood of made-up ids
# must not grow the process).
MAX_CACHED_KEYS = 10_000


@dataclass
class KeyCache:
    """What this process last read: key id -> (when, stored key or None), and whether
    any live key existed."""

    keys: dict[str, tuple[float, StoredKey | None]] = field(default_factory=dict)
    live: tuple[float, bool] | None = None


class KeyManagement(Verbs):
    _key_cache: KeyCache | None = None

    @property
    def _keys(self) -> KeyCache:
        if self._key_cache is None:
            self._key_cache = KeyCache()
        return self._key_cache

    async def create_key(
        self, user_id: str | None = None, *, admin: bool = False, scopes: Iterable[str] = ()
    ) -> tuple[ApiKey, str]:
        """A new API key: the stored key and the key text a client sends as its bearer
        token. The text is returned once and never stored (only its secret's SHA-256).

        A user key (``user_id``) reaches only that user's memory, plus what ``scopes``
        grant (``"kb:write"``: add and remove knowledge-base documents); an admin key
        (``admin=True``, no user) reaches everything.
        """
        granted = shapes.check_scopes(scopes)
        if admin and user_id is not None:
            raise ValidationError("an admin key belongs to no user: give user_id or admin=True")
        if admin and granted:
            raise ValidationError("an admin key has every scope already")
        if not admin:
            if user_id is None:
                raise ValidationError("a key needs a user_id, or admin=True")
            validate_id("user_id", user_id)
            if user_id in (".", ".."):
                # The HTTP guard refuses dot segments: such a user could reach nothing.
                raise ValidationError(f"user_id {user_id!r} cannot be told from a relative path")
        key_id, secret = shapes.new_key()
        key = ApiKey(key_id, user_id, granted, datetime.now(UTC))
        async with db.guarded("create api key"), self.stores.db_sessions.begin() as s:
            await api_keys.insert(s, self.stores.settings.key_prefix, key, shapes.digest(secret))
        self._keys.live = (time.monotonic(), True)
        return key, shapes.key_text(key_id, secret)

    async def list_keys(self) -> list[ApiKey]:
        """Every key of this deployment (its key prefix), revoked ones included, oldest
        first."""
        async with db.guarded("api keys"), self.stores.reads() as s:
            return await api_keys.all_keys(s, self.stores.settings.key_prefix)

    async def revoke_key(self, key_id: str) -> ApiKey:
        """Revoke a key for good; revoking it again changes nothing. :class:`NotFound`
        when this deployment has no such key."""
        shapes.check_key_id(key_id)
        async with db.guarded("revoke api key"), self.stores.db_sessions.begin() as s:
            key = await api_keys.revoke(
                s, self.stores.settings.key_prefix, key_id, datetime.now(UTC)
            )
        if key is None:
            raise NotFound(f"no API key {key_id!r}")
        self._forget_cached_keys([key_id])
        return key

    def _forget_cached_keys(self, key_ids: Iterable[str]) -> None:
        """Drop what this process read of keys just revoked, so it refuses them at once
        (another process within ``KEY_CACHE_S``)."""
        for key_id in key_ids:
            self._keys.keys.pop(key_id, None)
        self._keys.live = None

    async def authenticate(self, key: str) -> ApiKey | None:
        """The live key ``key`` (the text ``create_key`` returned) is, or None: unknown,
        revoked, malformed or with a wrong secret. Read at most every ``KEY_CACHE_S`` per
        key id; while the database cannot be read, the last answer read stands (a key
        not read before raises :class:`StoreUnavailable`)."""
        parts = shapes.split_key(key) if isinstance(key, str) else None
        if parts is None:
            return None
        key_id, secret = parts
        stored = await self._stored_key(key_id)
        if stored is None or stored.key.revoked:
            return None
        return stored.key if shapes.secret_matches(secret, stored.secret_sha256) else None

    async def has_keys(self) -> bool:
        """Whether this deployment has any unrevoked key (then the HTTP API asks every
        /v1 request for one). Read at most every ``KEY_CACHE_S``, with the last answer
        standing while the database cannot be read."""
        cache = self._keys
        now = time.monotonic()
        if cache.live is not None and now - cache.live[0] < KEY_CACHE_S:
            return cache.live[1]
        try:
            async with db.guarded("api keys"), self.stores.reads() as s:
                live = await api_keys.any_live(s, self.stores.settings.key_prefix)
        except StoreUnavailable:
            if cache.live is None:
                raise
            return cache.live[1]
        cache.live = (now, live)
        return live

    async def _stored_key(self, key_id: str) -> StoredKey | None:
        cache = self._keys
        now = time.monotonic()
        known = cache.keys.get(key_id)
        if known is not None and now - known[0] < KEY_CACHE_S:
            return known[1]
        try:
            async with db.guarded("api keys"), self.stores.reads() as s:
                stored = await api_keys.find(s, self.stores.settings.key_prefix, key_id)
        except StoreUnavailable:
            if known is None:
                raise
            return known[1]
        if len(cache.keys) >= MAX_CACHED_KEYS:
            cache.keys.clear()
        cache.keys[key_id] = (now, stored)
        return stored
