"""Identifier validation, message ids and the one text-hash function.

Ids end up inside Redis key names, Redis Cluster hash tags (``{user/session}``), vector
ids (``msg_id#chunk_idx``) and SQL rows, so only a conservative character set is
allowed: braces would break the hash tag, ``/`` the user/session pair, ``#`` the chunk
id, whitespace and ``*?[]`` key scans.
"""

from __future__ import annotations

import hashlib
import re

from memstack.core.errors import InvalidId

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
