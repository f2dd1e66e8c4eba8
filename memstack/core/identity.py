"""Whose words a message is: the user's own names, and the rule that decides it.

A session may hold a conversation of several people, each message naming its author
(``Message.name``). Only the user's own statements may become the user's facts, so a
message counts as the user's when its role is ``user`` and it names no author, or an
author bound to the user: the display name or one of the aliases set with
``set_identity``. Any other named author is another participant; what they say stays
in the conversation (and in semantic memory), never in the user's profile.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from memstack.core.errors import ValidationError
from memstack.core.messages import validate_name

MAX_ALIASES = 32


def name_key(name: str) -> str:
    """How author names are compared: NFKC, casefolded, runs of spaces as one
    ("ＳＡＭ  Lee" is "sam lee")."""
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split())


@dataclass(frozen=True)
class UserIdentity:
    """The names a user speaks under in a conversation of several people."""

    user_id: str
    display_name: str | None = None
    aliases: tuple[str, ...] = ()

    @property
    def names(self) -> frozenset[str]:
        """Every bound name, compared as :func:`name_key` compares them."""
        own = [self.display_name] if self.display_name else []
        return frozenset(name_key(n) for n in (*own, *self.aliases))

    def speaks(self, role: str, name: str | None) -> bool:
        """Whether a message of ``role`` by author ``name`` is the user's own words."""
        return role == "user" and (name is None or name_key(name) in self.names)


def check_identity(user_id: str, display_name: object, aliases: Iterable[object]) -> UserIdentity:
    """The binding ``set_identity`` stores: every name valid as a message author's
    (1-64 characters, no colon or line break), aliases without repeats (as compared)
    and at most :data:`MAX_ALIASES`; :class:`ValidationError` names the first problem."""
    if isinstance(aliases, str):
        raise ValidationError("aliases must be a list of names, not one string")
    display = validate_name(display_name)
    kept: list[str] = []
    seen = {name_key(display)} if display else set()
    for raw in aliases:
        alias = validate_name(raw)
        if alias is None:
            raise ValidationError("an alias must not be null")
        if name_key(alias) in seen:
            raise ValidationError(f"name {alias!r} is given twice")
        seen.add(name_key(alias))
        kept.append(alias)
    if len(kept) > MAX_ALIASES:
        raise ValidationError(f"{len(kept)} aliases; the limit is {MAX_ALIASES}")
    return UserIdentity(user_id, display, tuple(kept))
