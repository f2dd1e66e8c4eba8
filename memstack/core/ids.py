"""Identifier validation, message ids and the one text-hash function.

Ids end up inside Redis key names, Redis Cluster hash tags (``{user/session}``), vector
ids (``msg_id#chunk_idx``) and SQL rows, so only a conservative character set is
allowed: braces would break the hash tag, ``/`` the user/session pair, ``#`` the chunk
id, whitespace and ``*?[]`` key scans.
"""

from __future__ import annotations

import hashlib
import re
import uuid

from memstack.core.errors import InvalidId, ValidationError

MAX_ID_LEN = 128
# A knowledge-base namespace is an id too, kept shorter.
DEFAULT_NAMESPACE = "default"
MAX_NAMESPACE_LEN = 64
_ID_RE = re.compile(r"^[A-Za-z0-9_.:@-]+$")


def validate_id(kind: str, value: object) -> str:
    """Return ``value`` if it is a safe id, else raise :class:`InvalidId` naming ``kind``."""
    if not isinstance(value, str):
        raise InvalidId(f"{kind} must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidId(f"{kind} must not be empty")
    if len(value) > MAX_ID_LEN:
        raise InvalidId(f"{kind} is {len(value)} characters long; the limit is {MAX_ID_LEN}")
    if not _ID_RE.match(value):
        raise InvalidId(
            f"{kind} {value[:40]!r} has characters outside [A-Za-z0-9_.:@-] "
            "(braces, '#', spaces and glob characters would break keys and chunk ids)"
        )
    return value


def scoped_msg_id(user_id: str, session_id: str, caller_msg_id: str) -> str:
    """The stored id of a caller-supplied message id: ``<user>/<session>:<msg_id>``.

    Callers' ids are idempotency keys and need only be unique within their session
    ("1", "D1:3"); a session is unique only within its user (``alice``'s and ``bob``'s
    ``s1`` are two sessions), so both prefixes keep ids apart in the ledger, the fact
    table and the vector store. Ids stored before sessions were scoped by user read
    ``<session>:<msg_id>`` and stay valid.
    """
    return f"{user_id}/{session_id}:{validate_id('msg_id', caller_msg_id)}"


# A stored message id: ``<ts>-<user>/<session>-<seq>``, ``<user>/<session>:<caller id>``,
# or (stored before sessions were scoped by user) the same without ``<user>/``.
MAX_MSG_ID_LEN = 400
# Each part holds something besides dots: "." and ".." are no ids, and a URL would read
# them as a step up its path.
_MSG_ID_PART = r"[A-Za-z0-9_.:@-]*[A-Za-z0-9_:@-][A-Za-z0-9_.:@-]*"
MSG_ID_PATTERN = rf"^{_MSG_ID_PART}(/{_MSG_ID_PART})?$"
_MSG_ID_RE = re.compile(MSG_ID_PATTERN)
_GENERATED_RE = re.compile(r"^\d+-(?P<user>[^/]+)/(?P<session>.+)-\d{6,}$")


def validate_msg_id(value: object) -> str:
    """``value`` if it can be a stored message id (see above), else :class:`InvalidId`."""
    if not isinstance(value, str):
        raise InvalidId(f"msg_id must be a string, got {type(value).__name__}")
    if not value or len(value) > MAX_MSG_ID_LEN:
        raise InvalidId(f"msg_id must be 1-{MAX_MSG_ID_LEN} characters long")
    if not _MSG_ID_RE.match(value):
        raise InvalidId(
            f"msg_id {value[:40]!r} is not a message id: characters of [A-Za-z0-9_.:@-], "
            "not only dots, in one part or two joined by '/' (as remember() returns them)"
        )
    return value


# Each guess costs a read of a window: an id of 400 colons must not cost 400.
MAX_SESSION_GUESSES = 8


def sessions_named_by(user_id: str, msg_id: str) -> list[str]:
    """The sessions of ``user_id`` that ``msg_id`` may belong to, read from the id
    itself: one for a generated id, one per ``:`` for a caller's id (a session id may
    hold a colon, so ``u/a:b:c`` is ``a``'s ``b:c`` or ``a:b``'s ``c``; the first
    :data:`MAX_SESSION_GUESSES` of them); none for an id of another user or of the older
    layout."""
    generated = _GENERATED_RE.match(msg_id)
    if generated is not None and generated["user"] == user_id:
        candidates = [generated["session"]]
    elif msg_id.startswith(f"{user_id}/"):
        rest = msg_id[len(user_id) + 1 :]
        candidates = [rest[:i] for i, ch in enumerate(rest) if ch == ":" and 0 < i < len(rest) - 1]
    else:
        candidates = []
    valid = [c for c in candidates if len(c) <= MAX_ID_LEN and _ID_RE.match(c)]
    return valid[:MAX_SESSION_GUESSES]


# Facts set or ended by hand (``set_fact``, ``delete_fact``) name no message; their
# ``msg_id`` is this prefix and a random part. "#" never occurs in a message id.
BY_HAND = "by-hand#"


def by_hand_id() -> str:
    return f"{BY_HAND}{uuid.uuid4().hex}"


def chunk_id(msg_id: str, chunk_idx: int) -> str:
    """Vector id of one chunk: ``msg_id#chunk_idx`` (docs/spec.md, Layers)."""
    return f"{msg_id}#{chunk_idx}"


def msg_id_of_chunk(vector_id: str) -> str:
    """Inverse of :func:`chunk_id` for the message part."""
    return vector_id.rsplit("#", 1)[0]


def text_hash(text: str) -> str:
    """MD5 hex digest of ``text``: the single text-hash entry point.

    The knowledge cache, the retriever and deduplication must agree on this, so
    nothing else in the code base hashes text.
    """
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()


# Candidate ids are 64-bit row ids: a larger number names no candidate, and the database
# cannot bind it.
MAX_CANDIDATE_ID = 2**63 - 1


def validate_candidate_id(value: object) -> int:
    """``value`` if it can name a fact candidate, else :class:`ValidationError`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CANDIDATE_ID:
        raise ValidationError(
            f"candidate_id must be a whole number from 1 to {MAX_CANDIDATE_ID}, got {value!r}"
        )
    return value
