"""The one message type, from ``remember()`` through the window, the ingest job, the
ledger and the vector store's units, and back out of ``context()``; and the rules a
message must meet before anything is written."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from datetime import datetime

from memstack.core.errors import InvalidContent
from memstack.core.inputs import check_text

ROLES = frozenset({"user", "assistant", "system", "tool"})


@dataclass(frozen=True)
class Message:
    """One message of a session, as it was received.

    ``created_at`` is the message's own time (the caller's ``ts``, else when it was
    accepted), an aware datetime in UTC. ``name`` is the author in a conversation of
    several people (OpenAI's field of that name); the role says what kind of turn it is.
    ``accepted_at`` is when Redis accepted it (None where that was not recorded).
    """

    msg_id: str
    user_id: str
    session_id: str
    role: str
    content: str
    created_at: datetime
    name: str | None = None
    accepted_at: datetime | None = None


def validate_message(role: object, content: object, *, max_bytes: int) -> str:
    """Check role and content before anything is written; return the content."""
    if role not in ROLES:
        raise InvalidContent(f"role {role!r} is not one of {sorted(ROLES)}")
    check_text("content", content)
    assert isinstance(content, str)
    if not content.strip():
        raise InvalidContent("content is empty")
    size = len(content.encode("utf-8"))
    if size > max_bytes:
        raise InvalidContent(
            f"content is {size} bytes; the limit is {max_bytes} "
            "(MEMSTACK_MAX_MESSAGE_BYTES); store large tool output with set_state"
        )
    return content


NAME_MAX_CHARS = 64
# Names are printed as "name: content" (and "name：content" in Chinese): a colon inside
# one would make the line read as a different author.
_NAME_FORBIDDEN = frozenset(":：")
# Control characters, and the Unicode line and paragraph separators, which break a
# rendered line just as "\n" does.
_NAME_BAD_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})


def validate_name(name: object) -> str | None:
    """Check a message author's name before anything is written; return it stripped.

    None means no name. An empty or blank name is refused rather than dropped: the
    caller meant to name someone and would otherwise lose the author silently.
    """
    if name is None:
        return None
    stripped = check_text("name", name).strip()
    if not stripped:
        raise InvalidContent("name is empty; pass None for a message without a name")
    if len(stripped) > NAME_MAX_CHARS:
        raise InvalidContent(f"name is {len(stripped)} characters; the limit is {NAME_MAX_CHARS}")
    for ch in stripped:
        if unicodedata.category(ch) in _NAME_BAD_CATEGORIES:
            raise InvalidContent(f"name contains a control character or line break ({ch!r})")
        if ch in _NAME_FORBIDDEN:
            raise InvalidContent(f"name must not contain {ch!r}: it is printed as 'name: content'")
    return stripped


# Messages in one remember_many call: a batch is one request, and each message is still
# one Redis script, so the bound keeps a request's time on Redis short.
MAX_BATCH = 100
BATCH_STATUSES = ("ok", "duplicate", "error")


@dataclass(frozen=True)
class Remembered:
    """What became of one message of ``remember_many``: ``ok`` (stored now),
    ``duplicate`` (its ``msg_id`` was stored before with this very message: nothing
    changed) or ``error`` (nothing of it was stored; ``error`` names the exception,
    ``detail`` says why). ``msg_id`` is the stored id, as ``remember`` returns it."""

    msg_id: str
    status: str
    error: str | None = None
    detail: str | None = None
