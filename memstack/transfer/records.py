"""The export format, version 1: JSON Lines (UTF-8), one JSON object per line.

The first line is the header, ``{"type": "header", "format": "memstack-export",
"version": 1, "exported_at": …, "users": […], "knowledge": …}``; the last is the end
record, ``{"type": "end", "records": n}``, which counts the records between them: a file
cut short (a dropped connection, a full disk) has none and is refused whole. Between
them, one record per line:

- ``message``: a ledger row (``msg_id``, ``user_id``, ``session_id``, ``role``,
  ``content``, ``name``, ``created_at``, ``accepted_at``);
- ``fact``: a row of the fact history, current, superseded, retracted or archived
  (``archived_at``), with its ``id`` and the ``supersedes_id`` it links to (ids of the
  file: an import maps them onto its own);
- ``summary``, ``tool_result`` (a ``$ref`` of the task state), ``state`` (a session's
  task-state fields, ``$ref`` values as they are);
- ``document``: a knowledge-base document as stored, its chunks in order.

Times are RFC 3339 with their offset. Every record names its user, who must be one of
the header's. This module reads one record (:func:`read_record`) and checks it whole,
with the line number in every error; it knows nothing of any store.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, NoReturn

from memstack.core.errors import ValidationError
from memstack.core.facts.fact import FACT_SOURCES, FACT_TYPES
from memstack.core.ids import MAX_NAMESPACE_LEN, validate_id
from memstack.core.inputs import MAX_DEPTH, check_json, check_text
from memstack.core.messages import Message, validate_message, validate_name
from memstack.core.settings import Settings
from memstack.knowledge.base import KBDocument
from memstack.knowledge.documents import MAX_SOURCE_BYTES, MAX_TITLE_LEN
from memstack.stores.sql.transfer_rows import FactData, SummaryData, ToolResultData

FORMAT = "memstack-export"
VERSION = 1
MEDIA_TYPE = "application/x-ndjson"
# A line longer than this is refused before it is parsed (a document's chunks, a state
# value and a message are each bounded far below it).
MAX_LINE_BYTES = 64 * 1024 * 1024
# What a read hands on of a fact value (memstack.stores.sql.fact_rows): an imported row
# may be as large as the rows a deployment kept from before the write checks.
MAX_FACT_VALUE_BYTES = 64 * 1024
MAX_MSG_ID_LEN = 400
RECORD_TYPES = ("message", "fact", "summary", "tool_result", "state", "document")


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


@dataclass(frozen=True)
class DocumentData:
    namespace: str
    doc_id: str
    title: str
    source: str
    content_hash: str
    chunks: tuple[str, ...]


Record = Message | FactData | SummaryData | ToolResultData | StateData | DocumentData


def kind_of(record: Record) -> str:
    """The ``type`` of a record."""
    kinds: dict[type, str] = {
        Message: "message",
        FactData: "fact",
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


def parse_line(raw: bytes, n: int) -> dict[str, Any] | None:
    """The JSON object of line ``n``; None for a blank line."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        _fail(n, f"not UTF-8 text ({exc.reason} at byte {exc.start})")
    if not text.strip():
        return None
    try:
        obj = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        _fail(n, f"not valid JSON ({str(exc)[:120]})")
    if not isinstance(obj, dict):
        _fail(n, f"a record is a JSON object, not {type(obj).__name__}")
    return obj


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def _fail(n: int, problem: str) -> NoReturn:
    raise ValidationError(f"line {n}: {problem}")


class _Fields:
    """The fields of one record, each read once and checked; errors name the line."""

    def __init__(self, obj: dict[str, Any], n: int, kind: str) -> None:
        self.obj, self.n, self.kind = obj, n, kind
        self.read = {"type"}

    def fail(self, problem: str) -> NoReturn:
        _fail(self.n, f"{self.kind} record: {problem}")

    def get(self, name: str, *, optional: bool = False) -> Any:
        self.read.add(name)
        if name not in self.obj and not optional:
            self.fail(f"missing field {name!r}")
        return self.obj.get(name)

    def checked(self, check: Callable[[], Any]) -> Any:
        try:
            return check()
        except ValidationError as exc:
            self.fail(str(exc))
        except ValueError as exc:  # an integer too long to write as text
            self.fail(str(exc)[:120])

    def id(self, name: str, *, max_len: int | None = None) -> str:
        value = self.checked(lambda: validate_id(name, self.get(name)))
        if max_len is not None and len(value) > max_len:
            self.fail(f"{name} is longer than {max_len} characters")
        return str(value)

    def text(self, name: str, *, max_bytes: int | None = None, optional: bool = False) -> Any:
        value = self.get(name, optional=optional)
        if value is None and optional:
            return None
        return self.checked(lambda: check_text(name, value, max_bytes=max_bytes))

    def whole(self, name: str, *, low: int = 0, optional: bool = False) -> Any:
        value = self.get(name, optional=optional)
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            self.fail(f"{name} must be a whole number from {low}, got {value!r}")
        return value

    def time(self, name: str, *, optional: bool = False) -> Any:
        value = self.get(name, optional=optional)
        if value is None and optional:
            return None
        try:
            at = datetime.fromisoformat(value) if isinstance(value, str) else None
        except ValueError:
            at = None
        if at is None or at.tzinfo is None:
            self.fail(f"{name} must be an RFC 3339 time with its offset, got {value!r}")
        return at.astimezone(UTC)

    def msg_id(
        self, name: str, user_id: str, session_id: str | None, *, optional: bool = False
    ) -> Any:
        value = self.get(name, optional=optional)
        if value is None and optional:
            return None
        problem = msg_id_problem(value, user_id, session_id)
        if problem:
            self.fail(f"{name} {str(value)[:80]!r} {problem}")
        return value

    def done(self) -> None:
        unknown = sorted(set(self.obj) - self.read)
        if unknown:
            self.fail(f"unknown field {unknown[0]!r}")


_MSG_ID_CHARS = re.compile(r"^[A-Za-z0-9_.:@/-]+$")


def msg_id_problem(value: object, user_id: str, session_id: str | None) -> str | None:
    """Why ``value`` is not a message id of ``user_id`` (and of ``session_id`` if given),
    or None. An id made since sessions were scoped names its user and session
    (``<ts>-<user>/<session>-<seq>``, ``<user>/<session>:<caller id>``), and must name
    these: a file cannot take an id another user's message will have. An older id
    (no ``/``) names neither and is accepted as it is."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if len(value) > MAX_MSG_ID_LEN or not _MSG_ID_CHARS.match(value):
        return f"is not a message id (at most {MAX_MSG_ID_LEN} of [A-Za-z0-9_.:@/-])"
    if "/" not in value:
        return None
    left, _, right = value.partition("/")
    user = re.escape(user_id)
    if not (left == user_id or re.fullmatch(rf"\d+-{user}", left)):
        return "is not a message id of this record's user"
    session = re.escape(session_id) if session_id is not None else r"[A-Za-z0-9_.:@-]+"
    if left == user_id:
        ok = re.fullmatch(rf"{session}:[A-Za-z0-9_.:@-]+", right)
    else:
        ok = re.fullmatch(rf"{session}-\d+", right)
    return None if ok else "is not a message id of this record's session"


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
        _fail(n, f'the first line must be the header {{"type": "header", "format": "{FORMAT}", …}}')
    f = _Fields(obj, n, "header")
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
    f = _Fields(obj, n, "end")
    records = f.whole("records")
    f.done()
    return int(records)


def read_record(obj: dict[str, Any], n: int, users: frozenset[str], limits: Limits) -> Record:
    """The record of line ``n``, checked whole; :class:`ValidationError` naming the line."""
    kind = obj.get("type")
    reader = _READERS.get(kind) if isinstance(kind, str) else None
    if reader is None:
        _fail(n, f"unknown record type {str(kind)[:40]!r} (one of {', '.join(RECORD_TYPES)})")
    f = _Fields(obj, n, str(kind))
    if kind == "document":
        record: Record = _document(f, limits)
    else:
        user_id = f.id("user_id")
        if user_id not in users:
            f.fail(f"user_id {user_id!r} is not one of the header's users")
        record = reader(f, user_id, limits)
    f.done()
    return record


def _message(f: _Fields, user_id: str, limits: Limits) -> Message:
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


def _fact(f: _Fields, user_id: str, limits: Limits) -> FactData:
    session_id = f.id("session_id")
    fact_type, source = f.get("fact_type"), f.get("source")
    if fact_type not in FACT_TYPES:
        f.fail(f"fact_type {str(fact_type)[:40]!r} is not one of {', '.join(FACT_TYPES)}")
    if source not in FACT_SOURCES:
        f.fail(f"source {str(source)[:40]!r} is not one of {', '.join(FACT_SOURCES)}")
    value = f.get("fact_value")
    f.checked(
        lambda: check_json("fact_value", value, max_bytes=MAX_FACT_VALUE_BYTES, max_depth=MAX_DEPTH)
    )
    confidence = f.get("confidence")
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float)
        or not (math.isfinite(confidence) and 0 <= confidence <= 1)
    ):
        f.fail(f"confidence must be a number from 0 to 1, got {confidence!r}")
    fact = FactData(
        id=f.whole("id", low=1),
        user_id=user_id,
        session_id=session_id,
        msg_id=f.msg_id("msg_id", user_id, session_id),
        fact_type=str(fact_type),
        fact_key=f.id("fact_key"),
        fact_value=value,
        confidence=float(confidence),
        source=str(source),
        valid_from=f.time("valid_from"),
        valid_until=f.time("valid_until", optional=True),
        created_at=f.time("created_at"),
        supersedes_id=f.whole("supersedes_id", low=1, optional=True),
        ended_by_msg_id=f.msg_id("ended_by_msg_id", user_id, None, optional=True),
        hit_count=f.whole("hit_count", optional=True) or 0,
        last_hit_at=f.time("last_hit_at", optional=True),
        archived_at=f.time("archived_at", optional=True),
    )
    if fact.valid_until is not None and fact.valid_until < fact.valid_from:
        f.fail("valid_until is before valid_from")
    if fact.archived_at is not None and fact.valid_until is None:
        f.fail("an archived row has a valid_until (the archive serves no current value)")
    if fact.supersedes_id == fact.id:
        f.fail("a row cannot supersede itself")
    return fact


def _summary(f: _Fields, user_id: str, limits: Limits) -> SummaryData:
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


def _tool_result(f: _Fields, user_id: str, limits: Limits) -> ToolResultData:
    return ToolResultData(
        f.id("ref", max_len=64),
        user_id,
        f.id("session_id"),
        f.text("field", max_bytes=128),
        f.text("content", max_bytes=limits.state_value_bytes),
        f.time("created_at"),
    )


def _state(f: _Fields, user_id: str, limits: Limits) -> StateData:
    session_id = f.id("session_id")
    fields = f.get("fields")
    if not isinstance(fields, dict) or not fields:
        f.fail("fields must be a non-empty JSON object")
    for name, value in fields.items():
        f.checked(partial(check_text, "state field name", name, max_bytes=256))
        if not name or name.startswith("_"):
            f.fail(f"state field {name!r} must be a non-empty name not starting with '_'")
        f.checked(
            partial(check_json, f"state field {name!r}", value, max_bytes=limits.state_value_bytes)
        )
    return StateData(user_id, session_id, fields)


_HASH = re.compile(r"^[0-9a-f]{32}$")


def _document(f: _Fields, limits: Limits) -> DocumentData:
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


_READERS: dict[str, Callable[[_Fields, str, Limits], Record]] = {
    "message": _message,
    "fact": _fact,
    "summary": _summary,
    "tool_result": _tool_result,
    "state": _state,
    "document": lambda f, _user, limits: _document(f, limits),
}
