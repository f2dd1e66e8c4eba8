"""Wire models of the two network entry points (the HTTP API and the MCP server).

They mirror the dataclasses of the core (``from_attributes``) so a field added there is
one line here, and both entry points answer with the same shapes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, JsonValue

from memstack.knowledge_base import DEFAULT_NAMESPACE
from memstack.manifest import ContextResult
from memstack.memory import from_ms
from memstack.settings import Locale
from memstack.working_memory import SessionState, WindowMessage


class _FromCore(BaseModel):
    model_config = ConfigDict(from_attributes=True)


# --- working memory --------------------------------------------------------------------------


class RememberIn(BaseModel):
    role: str = Field(description="user, assistant, system or tool.")
    content: str
    msg_id: str | None = Field(
        default=None, description="Your idempotency key: a retry with the same one is a no-op."
    )
    ts: AwareDatetime | None = Field(
        default=None, description="When it was said (ISO 8601 with offset, or epoch seconds)."
    )
    name: str | None = Field(
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
    def of(cls, m: WindowMessage) -> MessageOut:
        return cls(
            msg_id=m.msg_id, role=m.role, content=m.content, ts=from_ms(m.ts_ms), name=m.name
        )


class WindowOut(BaseModel):
    messages: list[MessageOut]


class StateOut(BaseModel):
    fields: dict[str, JsonValue]
    turns: int
    last_msg_id: str | None
    last_msg_at: datetime | None

    @classmethod
    def of(cls, state: SessionState) -> StateOut:
        at = state.last_msg_at_ms
        return cls(
            fields=state.fields,
            turns=state.turns,
            last_msg_id=state.last_msg_id,
            last_msg_at=from_ms(at) if at is not None else None,
        )


class ToolResultOut(BaseModel):
    ref: str
    content: str


# --- read path -------------------------------------------------------------------------------


class ContextIn(BaseModel):
    query: str
    budget_tokens: int | None = Field(default=None, description="Default: MEMSTACK_BUDGET_TOKENS.")
    locale: Locale | None = None
    now: AwareDatetime | None = Field(
        default=None, description="Fixes recency and relative ages, so a call can be replayed."
    )
    system: str | None = None


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


class ContextOut(_FromCore):
    text: str
    messages: list[dict[str, str]]
    sections: dict[str, SectionOut]
    manifest: list[ManifestItemOut]
    degraded: dict[str, str] = Field(description="Layers left out because their store failed.")
    tokens: int

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
    current: bool


class FactsOut(BaseModel):
    facts: list[FactOut]


class ForgetOut(BaseModel):
    deleted: dict[str, int]


# --- knowledge base --------------------------------------------------------------------------


class KBSearchIn(BaseModel):
    query: str
    top_k: int | None = Field(default=None, description="Default: MEMSTACK_KB_TOP_K.")
    namespace: str = DEFAULT_NAMESPACE


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
    chunk_count: int
    model_version: str
    created_at: datetime
    updated_at: datetime


class KBDocumentsOut(BaseModel):
    documents: list[KBDocumentOut]


class DocumentIn(BaseModel):
    text: str
    doc_id: str | None = Field(default=None, description="Give it to replace the document later.")
    title: str | None = None
    source: str | None = None


class KBAddIn(BaseModel):
    documents: list[DocumentIn]
    namespace: str = DEFAULT_NAMESPACE


class KBAddResultOut(_FromCore):
    doc_id: str
    title: str
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
