"""The routes of the HTTP API under ``/v1``, and the OpenAPI document that states every
constraint the server enforces on them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, FastAPI, Query, Request, Security
from pydantic import JsonValue

from memstack import Document
from memstack.core.ids import DEFAULT_NAMESPACE
from memstack.core.settings import Settings
from memstack.server.http import batch_routes, manage_routes, status_routes, transfer_routes
from memstack.server.http.params import (
    ERRORS,
    SESSION,
    DocId,
    MemoryDep,
    NamespaceQuery,
    PageLimit,
    PageOffset,
    Ref,
    Route,
    SessionId,
    UserId,
    bearer,
)
from memstack.server.schemas import (
    TEXT_PATTERN,
    ContextIn,
    ContextOut,
    DrainOut,
    ErrorOut,
    FactOut,
    FactsOut,
    ForgetUserOut,
    Id,
    KBAddIn,
    KBAddOut,
    KBAddResultOut,
    KBDocumentOut,
    KBDocumentsOut,
    KBHitOut,
    KBHitsOut,
    KBSearchIn,
    LedgerOut,
    MessageOut,
    MomentText,
    RememberIn,
    RememberOut,
    SessionOut,
    SessionsOut,
    StateOut,
    ToolResultOut,
    UserOut,
    UsersOut,
    WindowOut,
)

# --- routes ----------------------------------------------------------------------------------


async def remember(
    user_id: UserId, session_id: SessionId, body: RememberIn, mem: MemoryDep
) -> RememberOut:
    """Record one message (the synchronous write path: window, state, ingest job)."""
    msg_id = await mem.remember(
        user_id,
        session_id,
        body.role,
        body.content,
        msg_id=body.msg_id,
        ts=body.ts,
        name=body.name,
    )
    return RememberOut(msg_id=msg_id)


def _window_route(limit: int) -> Callable[..., Awaitable[WindowOut]]:
    async def window(
        user_id: UserId, session_id: SessionId, mem: MemoryDep, n: int | None = None
    ) -> WindowOut:
        """The session's recent window from working memory, oldest first."""
        msgs = await mem.window(user_id, session_id, n)
        return WindowOut(messages=[MessageOut.of(m) for m in msgs])

    # The bound is this app's setting, so the annotation is made here, not in the source.
    window.__annotations__["n"] = Annotated[
        int | None,
        Query(ge=1, le=limit, description="Default: MEMSTACK_RECENT_WINDOW_READ."),
    ]
    return window


async def get_state(user_id: UserId, session_id: SessionId, mem: MemoryDep) -> StateOut:
    return StateOut.of(await mem.get_state(user_id, session_id))


async def patch_state(
    user_id: UserId,
    session_id: SessionId,
    mem: MemoryDep,
    fields: Annotated[
        dict[str, JsonValue],
        Body(description="Fields to set; null deletes a field; others are kept."),
    ],
) -> StateOut:
    """Set task-state fields (``null`` deletes one); a large value moves to the database
    behind a ``$ref``. Answers the state as ``GET`` does."""
    await mem.set_state(user_id, session_id, fields)
    return StateOut.of(await mem.get_state(user_id, session_id))


async def context(
    user_id: UserId, session_id: SessionId, body: ContextIn, mem: MemoryDep
) -> ContextOut:
    """The assembled context for ``query``, with its sections and manifest."""
    result = await mem.context(
        user_id,
        session_id,
        body.query,
        budget_tokens=body.budget_tokens,
        locale=body.locale,
        now=body.now,
        system=body.system,
        namespaces=body.namespaces,
    )
    return ContextOut.of(result)


async def tool_result(user_id: UserId, ref: Ref, mem: MemoryDep) -> ToolResultOut:
    """The full value behind a ``$ref`` that ``PATCH .../state`` left in the state."""
    return ToolResultOut(ref=ref, content=await mem.get_tool_result(user_id, ref))


async def facts(
    user_id: UserId,
    mem: MemoryDep,
    as_of: Annotated[
        MomentText | None,
        Query(
            description="The facts current at this moment (RFC 3339 with its offset, e.g. "
            "2025-03-01T10:00:00+08:00), superseded, retracted and archived ones included. "
            "Default: the current facts."
        ),
    ] = None,
) -> FactsOut:
    """Current facts, most confident first; with ``as_of``, those current at that moment."""
    # Without as_of, the very call this route made before as_of existed.
    found = await (mem.facts(user_id) if as_of is None else mem.facts(user_id, as_of=as_of))
    return FactsOut(facts=[FactOut.model_validate(f) for f in found])


async def fact_history(
    user_id: UserId,
    mem: MemoryDep,
    key: Annotated[Id | None, Query(description="One fact key; default: all.")] = None,
) -> FactsOut:
    """Every value a fact ever had, oldest first (superseded rows have ``valid_until``; a
    retracted one also ``ended_by_msg_id``, the message that withdrew it)."""
    return FactsOut(facts=[FactOut.model_validate(f) for f in await mem.fact_history(user_id, key)])


async def users(mem: MemoryDep, limit: PageLimit = 100, offset: PageOffset = 0) -> UsersOut:
    """Users with messages in the ledger, by id, with their counts and last message time."""
    found = await mem.users(limit=limit, offset=offset)
    return UsersOut(users=[UserOut.model_validate(u) for u in found])


async def sessions(user_id: UserId, mem: MemoryDep) -> SessionsOut:
    """The user's sessions in the ledger, oldest first."""
    found = await mem.sessions(user_id)
    return SessionsOut(sessions=[SessionOut.model_validate(s) for s in found])


async def ledger(
    user_id: UserId,
    session_id: SessionId,
    mem: MemoryDep,
    limit: PageLimit = 100,
    offset: PageOffset = 0,
) -> LedgerOut:
    """One page of the session's messages as stored (the ledger), oldest first."""
    found = await mem.messages(user_id, session_id, limit=limit, offset=offset)
    return LedgerOut.page(found, limit=limit, offset=offset)


async def forget_user(user_id: UserId, mem: MemoryDep) -> ForgetUserOut:
    """Erase everything held about the user, in every layer, and revoke the user's API
    keys (listed by id in ``revoked_keys``)."""
    erased = await mem.forget_user(user_id)
    return ForgetUserOut(deleted=erased, revoked_keys=list(erased.revoked_keys))


async def knowledge_search(body: KBSearchIn, mem: MemoryDep) -> KBHitsOut:
    hits = await mem.kb_search(body.query, body.top_k, namespace=body.namespace)
    return KBHitsOut(hits=[KBHitOut.model_validate(h) for h in hits])


async def knowledge_documents(
    mem: MemoryDep, namespace: NamespaceQuery = DEFAULT_NAMESPACE
) -> KBDocumentsOut:
    return KBDocumentsOut(
        documents=[KBDocumentOut.model_validate(d) for d in await mem.kb_list(namespace=namespace)]
    )


async def knowledge_add(body: KBAddIn, mem: MemoryDep) -> KBAddOut:
    """Add or replace documents given as text (never paths: the server reads no files)."""
    docs = [
        Document(text=d.text, doc_id=d.doc_id, title=d.title, source=d.source)
        for d in body.documents
    ]
    results = await mem.kb_add(*docs, namespace=body.namespace)
    return KBAddOut(results=[KBAddResultOut.model_validate(r) for r in results])


async def knowledge_remove(
    doc_id: DocId, mem: MemoryDep, namespace: NamespaceQuery = DEFAULT_NAMESPACE
) -> KBDocumentOut:
    return KBDocumentOut.model_validate(await mem.kb_remove(doc_id, namespace=namespace))


async def drain(request: Request, mem: MemoryDep) -> DrainOut:
    """Process pending ingest jobs in this process.

    The embedded default keeps its queue in an in-process Redis that no ``memstack
    worker`` can reach, so this is how its messages become facts and vectors.
    """
    # Two drains at once would race for the same jobs: harmless, but twice the work.
    async with request.app.state.drain_lock:
        report = await mem.drain()
    return DrainOut.model_validate(report)


def _routes(settings: Settings) -> list[Route]:
    conflict: dict[int | str, dict[str, Any]] = {409: {"model": ErrorOut}}
    return [
        ("POST", f"{SESSION}/messages", remember, {"status_code": 201, "responses": conflict}),
        ("GET", f"{SESSION}/messages", _window_route(settings.window_max_messages), {}),
        ("GET", f"{SESSION}/ledger", ledger, {}),
        ("GET", f"{SESSION}/state", get_state, {}),
        ("PATCH", f"{SESSION}/state", patch_state, {}),
        ("POST", f"{SESSION}/context", context, {}),
        ("GET", "/users/{user_id}/tool-results/{ref}", tool_result, {}),
        ("GET", "/users/{user_id}/facts", facts, {}),
        ("GET", "/users/{user_id}/facts/history", fact_history, {}),
        ("GET", "/users", users, {}),
        ("GET", "/users/{user_id}/sessions", sessions, {}),
        ("DELETE", "/users/{user_id}", forget_user, {}),
        ("POST", "/knowledge/search", knowledge_search, {}),
        ("GET", "/knowledge/documents", knowledge_documents, {}),
        ("POST", "/knowledge/documents", knowledge_add, {"status_code": 201}),
        ("DELETE", "/knowledge/documents/{doc_id}", knowledge_remove, {}),
        ("POST", "/admin/drain", drain, {}),
        *transfer_routes.ROUTES,
        *manage_routes.ROUTES,
        *batch_routes.ROUTES,
        *status_routes.ROUTES,
    ]


def router(settings: Settings) -> APIRouter:
    """The /v1 routes; ``n`` of the window is bounded by this app's settings."""
    # Declared always: an API key created at any time closes the API (the guard checks).
    v1 = APIRouter(prefix="/v1", responses=ERRORS, dependencies=[Security(bearer)])
    for method, path, endpoint, options in _routes(settings):
        v1.add_api_route(path, endpoint, methods=[method], **options)
    return v1


# --- the OpenAPI document ----------------------------------------------------------------------

# Task-state values: any JSON without NUL (memstack.core.inputs.check_json), by reference since
# they nest. Depth and size are beyond JSON Schema; the description states them.
STATE_VALUE: dict[str, Any] = {
    "description": "Any JSON value without NUL characters, nested at most 16 deep, at most "
    "MEMSTACK_MAX_STATE_VALUE_BYTES as JSON.",
    "anyOf": [
        {"type": "string", "pattern": TEXT_PATTERN},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "null"},
        {"type": "array", "items": {"$ref": "#/components/schemas/StateValue"}},
        {
            "type": "object",
            "propertyNames": {"pattern": TEXT_PATTERN},
            "additionalProperties": {"$ref": "#/components/schemas/StateValue"},
        },
    ],
}
STATE_FIELDS: dict[str, Any] = {
    "minProperties": 1,
    "propertyNames": {"pattern": r"^[^_\x00][^\x00]*$", "maxLength": 256},
    "additionalProperties": {"$ref": "#/components/schemas/StateValue"},
}


def document(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """``app.openapi`` with the task-state body the library checks, which the route's
    ``dict[str, JsonValue]`` cannot describe."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = build()
        doc["components"]["schemas"]["StateValue"] = STATE_VALUE
        state = doc["paths"][f"/v1{SESSION}/state"]["patch"]["requestBody"]
        state["content"]["application/json"]["schema"].update(STATE_FIELDS)
        return doc

    return openapi
