"""The names a user speaks under in a conversation of several people
(:mod:`memstack.core.identity`): only messages by the user, unnamed or under one of
these names, feed the user's facts.

A mixin of :class:`memstack.AsyncMemory` (through :class:`memstack.verbs.reading.Management`).
"""

from __future__ import annotations

from collections.abc import Sequence

from memstack.core.errors import NotFound
from memstack.core.identity import UserIdentity, check_identity
from memstack.core.ids import validate_id
from memstack.stores.sql import db
from memstack.stores.sql import identity as identities
from memstack.verbs.base import Verbs


def _unknown(user_id: str) -> NotFound:
    return NotFound(
        f"user {user_id!r} has no memory yet: names are bound to a user memstack has "
        "stored a message of (remember() one, and let it be ingested, first)"
    )


class Identities(Verbs):
    async def identity(self, user_id: str) -> UserIdentity:
        """The user's display name and aliases; :class:`NotFound` for an unknown user."""
        validate_id("user_id", user_id)
        async with db.guarded("identity"), self.stores.db_sessions() as s:
            found = (await identities.read(s, [user_id])).get(user_id)
        if found is None:
            raise _unknown(user_id)
        return found

    async def set_identity(
        self,
        user_id: str,
        *,
        display_name: str | None = None,
        aliases: Sequence[str] = (),
    ) -> UserIdentity:
        """Bind the names the user speaks under, replacing those bound before: a message
        of role ``user`` whose ``name`` is one of them (compared ignoring case and width)
        is the user's own, and its facts are the user's; any other named author's are
        not. Applies to messages ingested from now on. :class:`ValidationError` for a
        bad name, :class:`NotFound` for a user memstack has stored nothing of; nothing
        changes then."""
        validate_id("user_id", user_id)
        wanted = check_identity(user_id, display_name, aliases)
        async with db.guarded("set identity"), self.stores.db_sessions.begin() as s:
            if not await identities.write(s, wanted):
                raise _unknown(user_id)
        return wanted
