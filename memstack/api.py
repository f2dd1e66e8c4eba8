"""The HTTP API: a FastAPI app over one :class:`~memstack.memory.AsyncMemory`.

``create_app(settings)`` builds the app; the memory is opened in the lifespan and closed
on shutdown, so importing this module connects to nothing. Every error leaves through one
handler as ``{"error": <type>, "detail": <message>}``; no stack trace reaches a client.

Run it with ``memstack serve``, or ``uvicorn --factory memstack.api:create_app``.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Annotated, Any, cast

from fastapi import APIRouter, Body, Depends, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import JsonValue
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy import text
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.exceptions import HTTPException

from memstack import metrics
from memstack.errors import MemstackError, NotFound, StoreUnavailable, ValidationError
from memstack.knowledge_base import DEFAULT_NAMESPACE, Document
from memstack.memory import AsyncMemory
from memstack.schemas import (
    ContextIn,
    ContextOut,
    DrainOut,
    ErrorOut,
    FactOut,
    FactsOut,
    ForgetOut,
    HealthOut,
    KBAddIn,
    KBAddOut,
    KBAddResultOut,
    KBDocumentOut,
    KBDocumentsOut,
    KBHitOut,
    KBHitsOut,
    KBSearchIn,
    MessageOut,
    RememberIn,
    RememberOut,
    StateOut,
    StoreHealth,
    ToolResultOut,
    WindowOut,
)
from memstack.settings import Settings, load_settings

log = logging.getLogger("memstack.api")

# --- errors ----------------------------------------------------------------------------------

# First match wins.
STATUS_OF: tuple[tuple[type[MemstackError], int], ...] = (
    (ValidationError, 422),
    (NotFound, 404),
    (StoreUnavailable, 503),
)
# Store errors that escaped a module's own wrapping still mean "try again later", not a bug.
UNWRAPPED_OUTAGES = (RedisConnectionError, RedisTimeoutError, OperationalError, InterfaceError)


HTTP_ERROR_NAMES = {401: "Unauthorized", 404: "NotFound", 405: "MethodNotAllowed"}


def _error(
    status: int, error: str, detail: str, headers: Mapping[str, str] | None = None
) -> Response:
    return JSONResponse(
        ErrorOut(error=error, detail=detail).model_dump(), status_code=status, headers=headers
    )


async def _memstack_error(_: Request, exc: Exception) -> Response:
    status = next((code for cls, code in STATUS_OF if isinstance(exc, cls)), 500)
    if status == 500:
        log.error("request failed: %s: %s", type(exc).__name__, exc)
    return _error(status, type(exc).__name__, str(exc))


async def _outage(_: Request, exc: Exception) -> Response:
    # The driver's text may carry SQL or connection parameters: keep it in the log.
    log.warning("unwrapped store error: %s: %s", type(exc).__name__, exc)
    return _error(503, StoreUnavailable.__name__, "a backing store is unreachable")


async def _request_invalid(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    problems = [
        f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
    ] or ["invalid request"]
    return _error(422, ValidationError.__name__, "; ".join(problems))


async def _http_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error = HTTP_ERROR_NAMES.get(exc.status_code, "HTTPError")
    return _error(exc.status_code, error, str(exc.detail), exc.headers)


async def _unexpected(_: Request, exc: Exception) -> Response:
    log.exception("unexpected error", exc_info=exc)
    return _error(500, "InternalError", "internal error; the server log has the details")


# --- dependencies ----------------------------------------------------------------------------


def _memory(request: Request) -> AsyncMemory:
    return cast(AsyncMemory, request.app.state.memory)


Memory = Annotated[AsyncMemory, Depends(_memory)]
_bearer = HTTPBearer(auto_error=False, description="MEMSTACK_API_TOKEN, when it is set.")


def _authorizer(settings: Settings) -> Callable[..., Awaitable[None]]:
    token = settings.api_token.get_secret_value().encode() if settings.api_token else None

    async def authorize(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        if token is None:
            return
        # compare_digest: the time to reject must not reveal how much of a guess was right.
        if credentials is None or not secrets.compare_digest(
            credentials.credentials.encode(), token
        ):
            raise HTTPException(
                401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"}
            )

    return authorize


# --- health ----------------------------------------------------------------------------------


async def _probe(probe: Callable[[], Awaitable[str]], timeout_s: float) -> StoreHealth:
    try:
        return StoreHealth(ok=True, detail=await asyncio.wait_for(probe(), timeout_s))
    except TimeoutError:
        return StoreHealth(ok=False, detail=f"no answer within {timeout_s} s")
    except Exception as exc:
        first_line = (str(exc).splitlines() or [""])[0]
        return StoreHealth(ok=False, detail=f"{type(exc).__name__}: {first_line}"[:300])


async def health(mem: AsyncMemory) -> HealthOut:
    """Each store of this process's memory, probed on its own connection."""

    async def redis() -> str:
        await mem.working.redis.ping()
        return "ping ok" + (" (embedded)" if mem.settings.embedded_redis else "")

    async def database() -> str:
        async with mem.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        return f"{mem.engine.dialect.name} ok"

    async def vectors() -> str:
        store = await mem.memory_vectors()
        return f"{await store.count()} vectors"

    async def knowledge_base() -> str:
        kb = await mem.knowledge_base()
        return f"{await kb.store.count()} chunks"

    probes: dict[str, Callable[[], Awaitable[str]]] = {
        "redis": redis,
        "database": database,
        "vectors": vectors,
    }
    # Only a configured knowledge-base server is a dependency worth failing a probe for.
    if mem.settings.kb_url:
        probes["knowledge_base"] = knowledge_base
    timeout_s = mem.settings.store_timeout_s
    results = await asyncio.gather(*(_probe(p, timeout_s) for p in probes.values()))
    stores = dict(zip(probes, results, strict=True))
    return HealthOut(status="ok" if all(s.ok for s in results) else "down", stores=stores)


# --- routes ----------------------------------------------------------------------------------

SESSION = "/users/{user_id}/sessions/{session_id}"
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (401, 404, 422, 500, 503)
}
v1 = APIRouter(prefix="/v1", responses=ERRORS)


@v1.post(f"{SESSION}/messages", status_code=201)
async def remember(user_id: str, session_id: str, body: RememberIn, mem: Memory) -> RememberOut:
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


@v1.get(f"{SESSION}/messages")
async def window(
    user_id: str,
    session_id: str,
    mem: Memory,
    n: Annotated[int | None, Query(gt=0, description="Default: recent_window_read.")] = None,
) -> WindowOut:
    """The session's recent window from working memory, oldest first."""
    msgs = await mem.window(user_id, session_id, n)
    return WindowOut(messages=[MessageOut.of(m) for m in msgs])


@v1.get(f"{SESSION}/state")
async def get_state(user_id: str, session_id: str, mem: Memory) -> StateOut:
    return StateOut.of(await mem.get_state(user_id, session_id))


@v1.patch(f"{SESSION}/state")
async def patch_state(
    user_id: str,
    session_id: str,
    mem: Memory,
    fields: Annotated[dict[str, JsonValue], Body(description="Fields to set; others are kept.")],
) -> StateOut:
    """Set task-state fields; a large value moves to the database behind a ``$ref``."""
    await mem.set_state(user_id, session_id, fields)
    return StateOut.of(await mem.get_state(user_id, session_id))


@v1.post(f"{SESSION}/context")
async def context(user_id: str, session_id: str, body: ContextIn, mem: Memory) -> ContextOut:
    """The assembled context for ``query``, with its sections and manifest."""
    result = await mem.context(
        user_id,
        session_id,
        body.query,
        budget_tokens=body.budget_tokens,
        locale=body.locale,
        now=body.now,
        system=body.system,
    )
    return ContextOut.of(result)


@v1.get("/users/{user_id}/tool-results/{ref}")
async def tool_result(user_id: str, ref: str, mem: Memory) -> ToolResultOut:
    """The full value behind a ``$ref`` that ``PATCH .../state`` left in the state."""
    return ToolResultOut(ref=ref, content=await mem.get_tool_result(user_id, ref))


@v1.get("/users/{user_id}/facts")
async def facts(user_id: str, mem: Memory) -> FactsOut:
    """Current facts, most confident first."""
    return FactsOut(facts=[FactOut.model_validate(f) for f in await mem.facts(user_id)])


@v1.get("/users/{user_id}/facts/history")
async def fact_history(
    user_id: str,
    mem: Memory,
    key: Annotated[str | None, Query(description="One fact key; default: all.")] = None,
) -> FactsOut:
    """Every value a fact ever had, oldest first (superseded rows have ``valid_until``)."""
    return FactsOut(facts=[FactOut.model_validate(f) for f in await mem.fact_history(user_id, key)])


@v1.delete("/users/{user_id}")
async def forget_user(user_id: str, mem: Memory) -> ForgetOut:
    """Erase everything held about the user, in every layer."""
    return ForgetOut(deleted=await mem.forget_user(user_id))


@v1.post("/knowledge/search")
async def knowledge_search(body: KBSearchIn, mem: Memory) -> KBHitsOut:
    hits = await mem.kb_search(body.query, body.top_k, namespace=body.namespace)
    return KBHitsOut(hits=[KBHitOut.model_validate(h) for h in hits])


@v1.get("/knowledge/documents")
async def knowledge_documents(
    mem: Memory, namespace: Annotated[str, Query()] = DEFAULT_NAMESPACE
) -> KBDocumentsOut:
    return KBDocumentsOut(
        documents=[KBDocumentOut.model_validate(d) for d in await mem.kb_list(namespace=namespace)]
    )


@v1.post("/knowledge/documents", status_code=201)
async def knowledge_add(body: KBAddIn, mem: Memory) -> KBAddOut:
    """Add or replace documents given as text (never paths: the server reads no files)."""
    docs = [
        Document(text=d.text, doc_id=d.doc_id, title=d.title, source=d.source)
        for d in body.documents
    ]
    results = await mem.kb_add(*docs, namespace=body.namespace)
    return KBAddOut(results=[KBAddResultOut.model_validate(r) for r in results])


@v1.delete("/knowledge/documents/{doc_id}")
async def knowledge_remove(
    doc_id: str, mem: Memory, namespace: Annotated[str, Query()] = DEFAULT_NAMESPACE
) -> KBDocumentOut:
    return KBDocumentOut.model_validate(await mem.kb_remove(doc_id, namespace=namespace))


@v1.post("/admin/drain")
async def drain(request: Request, mem: Memory) -> DrainOut:
    """Process pending ingest jobs in this process.

    The embedded default keeps its queue in an in-process Redis that no ``memstack
    worker`` can reach, so this is how its messages become facts and vectors.
    """
    # Two drains at once would race for the same jobs: harmless, but twice the work.
    async with request.app.state.drain_lock:
        report = await mem.drain()
    return DrainOut.model_validate(report)


async def healthz(mem: Memory) -> JSONResponse:
    """Each store's status; 503 when one is down, so a load balancer stops routing here."""
    report = await health(mem)
    return JSONResponse(report.model_dump(), status_code=200 if report.status == "ok" else 503)


async def metrics_endpoint() -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


# --- the app ---------------------------------------------------------------------------------


def create_app(settings: Settings | None = None) -> FastAPI:
    """The API over one ``AsyncMemory``, opened at startup and closed at shutdown."""
    settings = settings or load_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.memory = await AsyncMemory.open(settings)
        app.state.drain_lock = asyncio.Lock()
        # The first context() call then needs no model load.
        await app.state.memory.prepare()
        try:
            yield
        finally:
            await app.state.memory.close()

    app = FastAPI(
        title="memstack",
        summary="Layered memory for long-running AI agents.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.include_router(v1, dependencies=[Depends(_authorizer(settings))])
    app.add_api_route(
        "/healthz",
        healthz,
        methods=["GET"],
        response_model=HealthOut,
        responses={503: {"model": HealthOut}},
    )
    app.add_api_route("/metrics", metrics_endpoint, methods=["GET"], include_in_schema=False)

    app.add_exception_handler(MemstackError, _memstack_error)
    for outage in UNWRAPPED_OUTAGES:
        app.add_exception_handler(outage, _outage)
    app.add_exception_handler(RequestValidationError, _request_invalid)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)

    @app.middleware("http")
    async def measure(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        started = time.perf_counter()
        status = 500
        try:
            response = await call_next(request)
            status = response.status_code
            return response
        finally:
            route = getattr(request.scope.get("route"), "path", "unmatched")
            metrics.HTTP_REQUESTS.labels(request.method, route, str(status)).inc()
            metrics.HTTP_SECONDS.labels(route).observe(time.perf_counter() - started)

    return app
