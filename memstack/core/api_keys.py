"""What an API key is: its shape, its scopes, and how its secret is checked.

A key reads ``msk_<key_id>_<secret>``. The key id is public (``memstack keys list``
shows it, ``revoke`` takes it) and finds the stored row; the secret is 256 random bits
of which only the SHA-256 is stored. A key with a user reaches that user's memory
only; a key without one (an admin key) reaches everything.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from memstack.core.errors import ValidationError

PREFIX = "msk_"
KB_WRITE = "kb:write"
# The grants a user key may carry beyond its own memory, with what each allows.
SCOPES = {KB_WRITE: "add and remove knowledge-base documents"}

_KEY_ID_RE = re.compile(r"^[0-9a-f]{16}$")
_SECRET_RE = re.compile(r"^[A-Za-z0-9_-]{32,64}$")


@dataclass(frozen=True)
class ApiKey:
    """A stored API key, without its secret."""

    key_id: str
    user_id: str | None
    scopes: frozenset[str]
    created_at: datetime
    revoked_at: datetime | None = None

    @property
    def admin(self) -> bool:
        return self.user_id is None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def grants(self, scope: str) -> bool:
        return self.admin or scope in self.scopes


def new_key() -> tuple[str, str]:
    """A fresh key id and secret."""
    return secrets.token_hex(8), secrets.token_urlsafe(32)


def key_text(key_id: str, secret: str) -> str:
    """The key as a client sends it (``Authorization: Bearer <this>``)."""
    return f"{PREFIX}{key_id}_{secret}"


def split_key(presented: str) -> tuple[str, str] | None:
    """The key id and secret of a presented key, or None when it is not one: nothing of
    a malformed key is looked up."""
    if not presented.startswith(PREFIX):
        return None
    key_id, _, secret = presented[len(PREFIX) :].partition("_")
    if not _KEY_ID_RE.match(key_id) or not _SECRET_RE.match(secret):
        return None
    return key_id, secret


def digest(secret: str) -> str:
    """What is stored of a secret. A plain SHA-256 suffices for 256 random bits: there
    is no dictionary to try, so a slow password hash would only slow every lookup."""
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def secret_matches(secret: str, stored_digest: str) -> bool:
    # compare_digest: the time to reject must not reveal how much of a guess was right.
    return secrets.compare_digest(digest(secret), stored_digest)


def check_scopes(scopes: Iterable[str]) -> frozenset[str]:
    """The scopes as a set, or :class:`ValidationError` naming an unknown one."""
    if isinstance(scopes, str):
        raise ValidationError(f"scopes must be a collection of names such as [{KB_WRITE!r}]")
    found = frozenset(scopes)
    unknown = sorted((s for s in found if s not in SCOPES), key=repr)
    if unknown:
        raise ValidationError(f"unknown scope {unknown[0]!r}; the scopes are: {', '.join(SCOPES)}")
    return found


def check_key_id(key_id: object) -> str:
    if not isinstance(key_id, str) or not _KEY_ID_RE.match(key_id):
        raise ValidationError(f"{key_id!r} is not a key id (16 hex digits, as keys list shows)")
    return key_id
