"""Wire models of the two network entry points (the HTTP API and the MCP server).

They mirror the dataclasses of the core (``from_attributes``) so a field added there is
one line here, and both entry points answer with the same shapes.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    WithJsonSchema,
)

from memstack import ContextResult, Message, SessionState
from memstack.core.ids import DEFAULT_NAMESPACE, MAX_ID_LEN, MAX_NAMESPACE_LEN
from memstack.core.settings import Locale


class _FromCore(BaseModel):
    model_config = ConfigDict(from_attributes=True)


# --- what a request may carry ------------------------------------------------------------
# Each pattern is checked here, at the boundary, and stated as is in the OpenAPI document,
# so a request the document calls valid is never refused for its shape. What JSON Schema
# cannot state (sizes in UTF-8 bytes, a lone surrogate, nesting depth) is checked by
# memstack.core.inputs and also answered with 422.

# memstack.core.ids: ids end up in Redis keys, hash tags, vector ids and SQL rows.
ID_PATTERN = r"^[A-Za-z0-9_.:@-]+$"
# What Python's str.strip() removes: the library's test of a blank text.
_SPACE = r"\t\n\x0b\x0c\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
# No NUL: PostgreSQL's text type cannot hold one.
TEXT_PATTERN = r"^[^\x00]*$"
NOT_BLANK_PATTERN = rf"^[^\x00]*[^\x00{_SPACE}][^\x00]*$"
# A message's author (memstack.stores.redis.working_memory.validate_name): 1-64 characters once
# stripped, none of them a control character, line or paragraph separator, or colon.
_NAME_END = rf"[^{_SPACE}\x00-\x1f\x7f-\x9f:\uff1a]"
_NAME_MID = r"[^\x00-\x1f\x7f-\x9f\u2028\u2029:\uff1a]"
NAME_PATTERN = rf"^[{_SPACE}]*{_NAME_END}(?:{_NAME_MID}{{0,62}}{_NAME_END})?[{_SPACE}]*$"
# Room for any context window; a larger budget only costs memory.
MAX_BUDGET_TOKENS = 1_000_000
MAX_KB_TOP_K = 100

# How a refused pattern is explained to a client (pydantic would print the regex).
PATTERN_MEANING = {
    ID_PATTERN: f"must be 1-{MAX_ID_LEN} characters of [A-Za-z0-9_.:@-]",
    TEXT_PATTERN: "must not contain a NUL character (\\u0000)",
    NOT_BLANK_PATTERN: "must not be empty or blank, nor contain a NUL character (\\u0000)",
    NAME_PATTERN: "must be 1-64 characters after stripping, with no control character, "
    "line break or colon (':')",
}

Id = Annotated[str, Field(pattern=ID_PATTERN, min_length=1, max_length=MAX_ID_LEN)]
Namespace = Annotated[
    str,
    Field(
        pattern=ID_PATTERN,
        min_length=1,
        max_length=MAX_NAMESPACE_LEN,
        description="A knowledge base of its own; default: default.",
    ),
]
Text = Annotated[str, Field(pattern=TEXT_PATTERN)]
NotBlank = Annotated[str, Field(pattern=NOT_BLANK_PATTERN)]
Role = Literal["user", "assistant", "system", "tool"]
# memstack.core.namespaces.NAMESPACES as a Literal (a test holds the two equal), so the
# OpenAPI document lists the names and a wrong one is refused before the library runs.
IntegrationNamespace = Literal["langgraph", "llama_index"]
# Epoch seconds up to the year 2603: pydantic reads larger numbers as milliseconds.
MAX_EPOCH_S = 20_000_000_000
# JSON Schema's date-time (RFC 3339) with its offset; pydantic alone would also read
# "1700000000" or a space for the "T".
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)", re.ASCII)


def _moment(value: object) -> object:
    if isinstance(value, str) and not _RFC3339.fullmatch(value):
        raise ValueError(
            "must be an RFC 3339 date-time with its timezone offset "
            "(2025-03-01T10:00:00+08:00), or epoch seconds"
        )
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and not 0 <= value <= MAX_EPOCH_S:  # type: ignore[operator]
        raise ValueError(f"epoch seconds must lie between 0 and {MAX_EPOCH_S}")
    return value


def _json_integer(value: object) -> object:
    # Integers as JSON has them (40 or 40.0), not "40" or true, which pydantic would read.
    if isinstance(value, str | bool):
        raise ValueError("must be a JSON integer")
    return value


def _rfc3339(value: object) -> object:
    # A query string is always text, so epoch seconds have no place here.
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        raise ValueError(
            "must be an RFC 3339 date-time with its timezone offset (2025-03-01T10:00:00+08:00)"
        )
    return value


BudgetTokens = Annotated[int, Field(ge=1, le=MAX_BUDGET_TOKENS), BeforeValidator(_json_integer)]
TopK = Annotated[int, Field(ge=1, le=MAX_KB_TOP_K), BeforeValidator(_json_integer)]
# A time with its offset, or epoch seconds (UTC).
Moment = Annotated[
    AwareDatetime,
    BeforeValidator(_moment),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "format": "date-time"},
                {"type": "number", "minimum": 0, "maximum": MAX_EPOCH_S},
            ]
        }
    ),
]
# A time with its offset, as a query parameter carries it.
MomentText = Annotated[
    AwareDatetime,
    BeforeValidator(_rfc3339),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


# --- working memory --------------------------------------------------------------------------


class RememberIn(BaseModel):
    role: Role
    content: NotBlank = Field(
        description="At most MEMSTACK_MAX_MESSAGE_BYTES (default 64 KiB) of UTF-8."
    )
    msg_id: Id | None = Field(
        default=None,
        description="Your idempotency key: a retry with the same one and the same message is a "
        "no-op; with another message, 409.",
    )
    ts: Moment | None = Field(
        default=None,
        description="When it was said (ISO 8601 with offset, or epoch seconds), between 1970 "
        "and a day from now.",
    )
    name: Annotated[str, Field(pattern=NAME_PATTERN)] | None = Field(
        default=None,
        description="The author, as OpenAI's message `name`: tells the people of a "
        "conversation apart. 1-64 characters, no line break or colon.",
    )


class RememberOut(BaseModel):
    msg_id: str


class MessageOut(BaseModel):
    msg_id: str
    role: str
    content: str
    ts: datetime
    name: str | None = Field(default=None, description="The author, when one was given.")

    @classmethod
    def of(cls, m: Message) -> MessageOut:
        return cls(msg_id=m.msg_id, role=m.role, content=m.content, ts=m.created_at, name=m.name)


class WindowOut(BaseModel):
    messages: list[MessageOut]


class StateOut(BaseModel):
    fields: dict[str, JsonValue]
    turns: int
    last_msg_id: str | None
    last_msg_at: datetime | None

    @classmethod
    def of(cls, state: SessionState) -> StateOut:
        return cls(
            fields=state.fields,
            turns=state.turns,
            last_msg_id=state.last_msg_id,
            last_msg_at=state.last_msg_at,
        )


class ToolResultOut(BaseModel):
    ref: str
    content: str


# --- read path -------------------------------------------------------------------------------


class ContextIn(BaseModel):
    query: NotBlank = Field(
        description="At most MEMSTACK_MAX_MESSAGE_BYTES (default 64 KiB) of UTF-8."
    )
    budget_tokens: BudgetTokens | None = Field(
        default=None,
        description="Default: MEMSTACK_BUDGET_TOKENS. It must hold the system text and the query.",
    )
    locale: Locale | None = None
    now: Moment | None = Field(
        default=None, description="Fixes recency and relative ages, so a call can be replayed."
    )
    system: Text | None = None
    namespaces: list[IntegrationNamespace] = Field(
        default_factory=list,
        description="Memory an integration keeps to recall as well (LangGraph store items, "
        "LlamaIndex chat turns), each value as text; the user's own conversation is always "
        "recalled. Default: none.",
    )


class SectionOut(_FromCore):
    title: str | None
    lines: list[str]
    text: str
    tokens: int


class ManifestItemOut(_FromCore):
    layer: str
    key: str
    msg_ids: list[str]
    preview: str
    tokens: int
    kept: bool
    reason: str | None
    score: float | None
    relevance: float | None
    recency: float | None
    distance: float | None
    ranks: dict[str, int]
    detail: str


class AllocationOut(_FromCore):
    total: int
    reserved: int
    caps: dict[str, int]
    used: dict[str, int]


class RewriteOut(_FromCore):
    original: str
    terms: list[str]
    weights: dict[str, float]
    entities: list[str]
    temporal: bool
    time_intent: Literal["date", "latest"] | None
    source: Literal["rules", "llm"]
    expanded: list[str]


class ContextOut(_FromCore):
    text: str
    messages: list[dict[str, str]]
    sections: dict[str, SectionOut]
    manifest: list[ManifestItemOut]
    degraded: dict[str, str] = Field(description="Layers left out because their store failed.")
    tokens: int
    # The rest of ContextResult, so a client (memstack.client) rebuilds all of it.
    allocation: AllocationOut = Field(description="Each layer's token cap and what it used.")
    rewrite: RewriteOut = Field(description="The query as the retrieval channels saw it.")
    window_rebuilt: bool = Field(description="The window was first rebuilt from the ledger.")
    timings_ms: dict[str, float]

    @classmethod
    def of(cls, result: ContextResult) -> ContextOut:
        return cls.model_validate(result)


# --- fact memory -----------------------------------------------------------------------------


class FactOut(_FromCore):
    id: int
    user_id: str
    session_id: str
    msg_id: str
    key: str
    value: JsonValue
    type: str
    confidence: float
    source: str
    valid_from: datetime
    valid_until: datetime | None
    supersedes_id: int | None
    ended_by_msg_id: str | None = Field(
        default=None,
        description="The message that withdrew this value with nothing in its place (a "
        "retraction); null for a current value and for one a new value superseded.",
    )
    current: bool
    source_deleted: bool = Field(
        default=False,
        description="The message it came from was deleted (a message or its session "
        "erased); the fact stays until it is changed or deleted by hand.",
    )
    candidate_id: int | None = Field(
        default=None,
        description="The fact candidate whose confirmation made this value; null for one "
        "extracted with confidence or set by hand.",
    )


class FactsOut(BaseModel):
    facts: list[FactOut]


class ForgetOut(BaseModel):
    deleted: dict[str, int]


class ForgetUserOut(ForgetOut):
    revoked_keys: list[str] = Field(
        description="The ids of the user's API keys this erasure revoked (never a secret): "
        "they authenticate no more."
    )


# --- users, sessions and the ledger -------------------------------------------------------


class UserOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    user_id: str
    sessions: int
    messages: int
    last_message_at: datetime


class UsersOut(BaseModel):
    users: list[UserOut]


class SessionOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    session_id: str
    messages: int
    first_message_at: datetime
    last_message_at: datetime


class SessionsOut(BaseModel):
    sessions: list[SessionOut]


class LedgerOut(BaseModel):
    messages: list[MessageOut] = Field(description="Oldest first, as the worker stored them.")
    next_offset: int | None = Field(description="The offset of the next page; null at the end.")

    @classmethod
    def page(cls, found: list[Message], *, limit: int, offset: int) -> LedgerOut:
        # A full page may have a next one; a short page is the last.
        more = len(found) == limit
        return cls(
            messages=[MessageOut.of(m) for m in found], next_offset=offset + limit if more else None
        )


# --- knowledge base --------------------------------------------------------------------------


class KBSearchIn(BaseModel):
    query: NotBlank
    top_k: TopK | None = Field(default=None, description="Default: MEMSTACK_KB_TOP_K.")
    namespace: Namespace = DEFAULT_NAMESPACE


class KBHitOut(_FromCore):
    id: str
    doc_id: str
    title: str
    source: str
    chunk_idx: int
    text: str
    score: float


class KBHitsOut(BaseModel):
    hits: list[KBHitOut]


class KBDocumentOut(_FromCore):
    namespace: str
    doc_id: str
    title: str
    source: str
    content_hash: str = Field(description="MD5 of the text: tells whether it changed.")
    chunk_count: int
    model_version: str
    created_at: datetime
    updated_at: datetime


class KBDocumentsOut(BaseModel):
    documents: list[KBDocumentOut]


class DocumentIn(BaseModel):
    text: NotBlank = Field(
        description="At most MEMSTACK_MAX_DOCUMENT_BYTES (default 256 KiB) of UTF-8."
    )
    doc_id: Id | None = Field(default=None, description="Give it to replace the document later.")
    title: Text | None = None
    source: Text | None = None


class KBAddIn(BaseModel):
    documents: list[DocumentIn] = Field(min_length=1)
    namespace: Namespace = DEFAULT_NAMESPACE


class KBAddResultOut(_FromCore):
    doc_id: str
    title: str
    source: str
    status: Literal["added", "replaced", "unchanged"]
    chunk_count: int


class KBAddOut(BaseModel):
    results: list[KBAddResultOut]


# --- operations ------------------------------------------------------------------------------


class DrainOut(_FromCore):
    processed: int
    failed: int
    dead_lettered: int
    summaries: int
    errors: list[str]


class StoreHealth(BaseModel):
    ok: bool
    detail: str


class HealthOut(BaseModel):
    status: Literal["ok", "down"]
    stores: dict[str, StoreHealth]


class ErrorOut(BaseModel):
    error: str = Field(description="The exception's class name, e.g. InvalidId.")
    detail: str
