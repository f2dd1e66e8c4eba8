"""The export format, version 1: JSON Lines (UTF-8), one JSON object per line.

The first line is the header, ``{"type": "header", "format": "memstack-export",
"version": 1, "exported_at": …, "users": […], "knowledge": …}``; the last is the end
record, ``{"type": "end", "records": n}``, which counts the records between them: a file
cut short (a dropped connection, a full disk) has none and is refused whole. Between
them, one record per line:

- ``message``: a ledger row (``msg_id``, ``user_id``, ``session_id``, ``role``,
  ``content``, ``name``, ``created_at``, ``accepted_at``);
- ``fact``: a row of the fact history, current, superseded, retracted or archived
  (``archived_at``), with its ``id``, the ``supersedes_id`` it links to and the
  ``candidate_id`` whose confirmation wrote it (ids of the file: an import maps them
  onto its own; a file without ``candidate_id`` reads as none);
- ``candidate``: a fact candidate of any status (``pending``, ``confirmed``,
  ``rejected``, ``superseded``) with its ``id``, ``said_at``, ``decided_at`` and the
  ``fact_id`` a confirmed one became (ids of the file, mapped likewise);
- ``identity``: the names the user speaks under (``display_name``, ``aliases``), one
  record for a user who has any;
- ``summary``, ``tool_result`` (a ``$ref`` of the task state), ``state`` (a session's
  task-state fields, ``$ref`` values as they are, and its counters: ``turns``,
  ``last_msg_id``, ``last_msg_at``; a file without them reads as none);
- ``document``: a knowledge-base document as stored, its chunks in order.

Times are RFC 3339 with their offset. Every record names its user, who must be one of
the header's. This module reads one record (:func:`read_record`) and checks it whole,
with the line number in every error; it knows nothing of any store.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

from memstack.core.facts.fact import FACT_SOURCES, FACT_TYPES
from memstack.core.identity import UserIdentity, check_identity
from memstack.core.ids import MAX_NAMESPACE_LEN, validate_id
from memstack.core.inputs import MAX_DEPTH, check_json, check_text
from memstack.core.messages import Message, validate_message, validate_name
from memstack.core.settings import Settings
from memstack.knowledge.documents import MAX_SOURCE_BYTES, MAX_TITLE_LEN
from memstack.stores.sql.candidates import CONFIRMED, PENDING, STATUSES
from memstack.stores.sql.transfer_candidates import CandidateData
from memstack.stores.sql.transfer_rows import FactData, SummaryData, ToolResultData
from memstack.transfer.fields import Fields, fail_line, is_by_hand
from memstack.types import KBDocument

FORMAT = "memstack-export"
VERSION = 1
MEDIA_TYPE = "application/x-ndjson"
# A line longer than this is refused before it is parsed (a document's chunks, a state
# value and a message are each bounded far below it).
MAX_LINE_BYTES = 64 * 1024 * 1024
# What a read hands on of a fact value (memstack.stores.sql.fact_rows): an imported row
# may be as large as the rows a deployment kept from before the write checks.
MAX_FACT_VALUE_BYTES = 64 * 1024
RECORD_TYPES = (
    "message",
    "fact",
    "candidate",
    "identity",
    "summary",
    "tool_result",
    "state",
    "document",
)


@dataclass(frozen=True)
class Header:
    exported_at: datetime
    users: tuple[str, ...]
    knowledge: bool


@dataclass(frozen=True)
class StateData:
    user_id: str
    session_id: str
    fields: dict[str, Any]
    turns: int = 0
    last_msg_id: str | None = None
    last_msg_at: datetime | None = None


@dataclass(frozen=True)
class DocumentData:
    namespace: str
    doc_id: str
    title: str
    source: str
    content_hash: str
    chunks: tuple[str, ...]


Record = (
    Message
    | FactData
    | CandidateData
    | UserIdentity
    | SummaryData
    | ToolResultData
    | StateData
    | DocumentData
)


def kind_of(record: Record) -> str:
    """The ``type`` of a record."""
    kinds: dict[type, str] = {
        Message: "message",
        FactData: "fact",
        CandidateData: "candidate",
        UserIdentity: "identity",
        SummaryData: "summary",
        ToolResultData: "tool_result",
        StateData: "state",
        DocumentData: "document",
    }
    return kinds[type(record)]


# --- writing -------------------------------------------------------------------------------


def _time(at: datetime | None) -> str | None:
    return None if at is None else at.astimezone(UTC).isoformat()


def line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"


def header_line(at: datetime, users: Sequence[str], knowledge: bool) -> str:
    return line(
        {
            "type": "header",
            "format": FORMAT,
            "version": VERSION,
            "exported_at": _time(at),
            "users": list(users),
            "knowledge": knowledge,
        }
    )


def end_line(records: int) -> str:
    return line({"type": "end", "records": records})


def record_line(record: Record) -> str:
    """One record as its line."""
    out: dict[str, Any] = {"type": kind_of(record)}
    if isinstance(record, Message):
        out |= {
            "msg_id": record.msg_id,
            "user_id": record.user_id,
            "session_id": record.session_id,
            "role": record.role,
            "content": record.content,
            "name": record.name,
            "created_at": _time(record.created_at),
            "accepted_at": _time(record.accepted_at),
        }
    else:
        for key, value in vars(record).items():
            out[key] = _time(value) if isinstance(value, datetime) else value
    return line(out)


def document_data(doc: KBDocument, chunks: Sequence[str]) -> DocumentData:
    return DocumentData(
        doc.namespace, doc.doc_id, doc.title, doc.source, doc.content_hash, tuple(chunks)
    )


# --- reading -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """The target's bounds a record must keep (its settings)."""

    message_bytes: int
    state_value_bytes: int
    document_bytes: int

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        return cls(
            settings.max_message_bytes,
            settings.max_state_value_bytes,
            settings.max_document_bytes,
        )


def read_header(obj: dict[str, Any], n: int) -> Header:
    if obj.get("type") != "header":
        fail_line(
            n, f'the first line must be the header {{"type": "header", "format": "{FORMAT}", …}}'
        )
    f = Fields(obj, n, "header")
    if f.get("format") != FORMAT:
        f.fail(f"format must be {FORMAT!r}, got {obj.get('format')!r}")
    version = f.get("version")
    if version != VERSION or isinstance(version, bool):
        f.fail(f"version {version!r} is not one this memstack reads (it reads {VERSION})")
    at = f.time("exported_at")
    users = f.get("users")
    if not isinstance(users, list):
        f.fail("users must be a list of user ids")
    for user in users:
        f.checked(partial(validate_id, "user_id", user))
    if len(set(users)) != len(users):
        f.fail("users names a user twice")
    knowledge = f.get("knowledge", optional=True)
    if knowledge is not None and not isinstance(knowledge, bool):
        f.fail("knowledge must be true or false")
    f.done()
    return Header(at, tuple(users), bool(knowledge))


def read_end(obj: dict[str, Any], n: int) -> int:
    f = Fields(obj, n, "end")
    records = f.whole("records")
    f.done()
    return int(records)


def read_record(obj: dict[str, Any], n: int, users: frozenset[str], limits: Limits) -> Record:
    """The record of line ``n``, checked whole; :class:`ValidationError` naming the line."""
    kind = obj.get("type")
    reader = _READERS.get(kind) if isinstance(kind, str) else None
    if reader is None:
        fail_line(n, f"unknown record type {str(kind)[:40]!r} (one of {', '.join(RECORD_TYPES)})")
    f = Fields(obj, n, str(kind))
    if kind == "document":
        record: Record = _document(f, limits)
    else:
        user_id = f.id("user_id")
        if user_id not in users:
            f.fail(f"user_id {user_id!r} is not one of the header's users")
        record = reader(f, user_id, limits)
    f.done()
    return record


def _message(f: Fields, user_id: str, limits: Limits) -> Message:
    session_id = f.id("session_id")
    role, content = f.get("role"), f.get("content")
    f.checked(lambda: validate_message(role, content, max_bytes=limits.message_bytes))
    name = f.checked(lambda: validate_name(f.get("name", optional=True)))
    return Message(
        f.msg_id("msg_id", user_id, session_id),
        user_id,
        session_id,
        str(role),
        str(content),
        f.time("created_at"),
        name,
        f.time("accepted_at", optional=True),
    )


def _fact_value(f: Fields) -> Any:
    value = f.get("fact_value")
    f.checked(
        lambda: check_json("fact_value", value, max_bytes=MAX_FACT_VALUE_BYTES, max_depth=MAX_DEPTH)
    )
    return value


def _fact(f: Fields, user_id: str, limits: Limits) -> FactData:
    # A row set by hand names no message, and no session ("").
    by_hand = is_by_hand(f.get("msg_id"))
    session_id = "" if by_hand and f.get("session_id") == "" else f.id("session_id")
    fact = FactData(
        id=f.whole("id", low=1),
        user_id=user_id,
        session_id=session_id,
        msg_id=f.msg_id("msg_id", user_id, session_id, by_hand=True),
        fact_type=f.choice("fact_type", FACT_TYPES),
        fact_key=f.id("fact_key"),
        fact_value=_fact_value(f),
        confidence=f.share("confidence"),
        source=f.choice("source", FACT_SOURCES),
        valid_from=f.time("valid_from"),
        valid_until=f.time("valid_until", optional=True),
        created_at=f.time("created_at"),
        supersedes_id=f.whole("supersedes_id", low=1, optional=True),
        ended_by_msg_id=f.msg_id("ended_by_msg_id", user_id, None, optional=True, by_hand=True),
        hit_count=f.whole("hit_count", optional=True) or 0,
        last_hit_at=f.time("last_hit_at", optional=True),
        archived_at=f.time("archived_at", optional=True),
        candidate_id=f.whole("candidate_id", low=1, optional=True),
    )
    if fact.valid_until is not None and fact.valid_until < fact.valid_from:
        f.fail("valid_until is before valid_from")
    if fact.archived_at is not None and fact.valid_until is None:
        f.fail("an archived row has a valid_until (the archive serves no current value)")
    if fact.supersedes_id == fact.id:
        f.fail("a row cannot supersede itself")
    return fact


def _candidate(f: Fields, user_id: str, limits: Limits) -> CandidateData:
    session_id = f.id("session_id")
    candidate = CandidateData(
        id=f.whole("id", low=1),
        user_id=user_id,
        session_id=session_id,
        msg_id=f.msg_id("msg_id", user_id, session_id),
        fact_type=f.choice("fact_type", FACT_TYPES),
        fact_key=f.id("fact_key"),
        fact_value=_fact_value(f),
        confidence=f.share("confidence"),
        source=f.choice("source", FACT_SOURCES),
        said_at=f.time("said_at"),
        status=f.choice("status", STATUSES),
        decided_at=f.time("decided_at", optional=True),
        fact_id=f.whole("fact_id", low=1, optional=True),
    )
    # What the store's decisions leave: a pending one is undecided, a decided one says
    # when, and only a confirmed one names the fact it became.
    if (candidate.status == PENDING) != (candidate.decided_at is None):
        f.fail("decided_at is set exactly when the status is not pending")
    if candidate.fact_id is not None and candidate.status != CONFIRMED:
        f.fail(f"a {candidate.status} candidate names no fact_id (only a confirmed one does)")
    return candidate


def _identity(f: Fields, user_id: str, limits: Limits) -> UserIdentity:
    display_name, aliases = f.get("display_name", optional=True), f.get("aliases", optional=True)
    if aliases is None:
        aliases = []
    if not isinstance(aliases, list):
        f.fail("aliases must be a list of names")
    identity: UserIdentity = f.checked(lambda: check_identity(user_id, display_name, aliases))
    if identity.display_name is None and not identity.aliases:
        f.fail("an identity record binds a display_name or an alias")
    return identity


def _summary(f: Fields, user_id: str, limits: Limits) -> SummaryData:
    session_id = f.id("session_id")
    content = f.get("content")
    if not isinstance(content, dict):
        f.fail("content must be a JSON object")
    f.checked(lambda: check_json("content", content, max_bytes=limits.state_value_bytes))
    topic = f.text("topic", max_bytes=64)
    return SummaryData(
        user_id,
        session_id,
        f.msg_id("first_msg_id", user_id, session_id),
        f.msg_id("last_msg_id", user_id, session_id),
        f.whole("message_count", low=1),
        topic,
        content,
        f.time("created_at"),
    )


def _tool_result(f: Fields, user_id: str, limits: Limits) -> ToolResultData:
    return ToolResultData(
        f.id("ref", max_len=64),
        user_id,
        f.id("session_id"),
        f.text("field", max_bytes=128),
        f.text("content", max_bytes=limits.state_value_bytes),
        f.time("created_at"),
    )


def _state(f: Fields, user_id: str, limits: Limits) -> StateData:
    session_id = f.id("session_id")
    fields = f.get("fields")
    turns = f.whole("turns", optional=True) or 0
    last_msg_id = f.msg_id("last_msg_id", user_id, session_id, optional=True)
    last_msg_at = f.time("last_msg_at", optional=True)
    if (last_msg_id is None) != (last_msg_at is None):
        f.fail("last_msg_id and last_msg_at come together")
    if not isinstance(fields, dict) or not (fields or turns or last_msg_id):
        f.fail("fields must be a JSON object, non-empty unless the record has counters")
    for name, value in fields.items():
        f.checked(partial(check_text, "state field name", name, max_bytes=256))
        if not name or name.startswith("_"):
            f.fail(f"state field {name!r} must be a non-empty name not starting with '_'")
        f.checked(
            partial(check_json, f"state field {name!r}", value, max_bytes=limits.state_value_bytes)
        )
    return StateData(user_id, session_id, fields, turns, last_msg_id, last_msg_at)


_HASH = re.compile(r"^[0-9a-f]{32}$")


def _document(f: Fields, limits: Limits) -> DocumentData:
    namespace = f.id("namespace", max_len=MAX_NAMESPACE_LEN)
    content_hash = f.get("content_hash")
    if not isinstance(content_hash, str) or not _HASH.match(content_hash):
        f.fail("content_hash must be 32 lowercase hex digits")
    chunks = f.get("chunks")
    if not isinstance(chunks, list) or not chunks:
        f.fail("chunks must be a non-empty list of texts")
    for chunk in chunks:
        f.checked(partial(check_text, "chunk", chunk))
        if not chunk.strip():
            f.fail("a chunk is empty")
    size = sum(len(c.encode("utf-8")) for c in chunks)
    if size > limits.document_bytes:
        f.fail(f"the chunks hold {size} bytes; the limit is {limits.document_bytes}")
    title = f.text("title")
    if not 0 < len(title) <= MAX_TITLE_LEN:
        f.fail(f"title must be 1 to {MAX_TITLE_LEN} characters")
    return DocumentData(
        namespace,
        f.id("doc_id"),
        title,
        f.text("source", max_bytes=MAX_SOURCE_BYTES),
        content_hash,
        tuple(chunks),
    )


_READERS: dict[str, Callable[[Fields, str, Limits], Record]] = {
    "message": _message,
    "fact": _fact,
    "candidate": _candidate,
    "identity": _identity,
    "summary": _summary,
    "tool_result": _tool_result,
    "state": _state,
    "document": lambda f, _user, limits: _document(f, limits),
}
