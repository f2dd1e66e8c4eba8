"""How the HTTP API answers a failure: ``{"error": <type>, "detail": <message>}``.

Validation and lookup errors say what was wrong with the request. A store error says
only which layer failed (``database unavailable``): its message and cause can carry SQL
text, parameters, file paths and addresses, which go to the server log, never to a
client. No stack trace leaves the server.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException
from starlette.routing import Match

from memstack.core.errors import (
    Conflict,
    Forbidden,
    InvalidContent,
    InvalidId,
    Layer,
    MemstackError,
    NotFound,
    SchemaMismatch,
    StoreError,
    StoreUnavailable,
    Unauthorized,
    ValidationError,
)
from memstack.server.http.guard import is_page, route_path
from memstack.server.schemas import PATTERN_MEANING, ErrorOut

log = logging.getLogger("memstack.server.http")
# Turns the JSON answer to a request for an inspector page into that page.
PageOf = Callable[[Request, Response], Response]

# First match wins.
STATUS_OF: tuple[tuple[type[MemstackError], int], ...] = (
    (Conflict, 409),
    (ValidationError, 422),
    (NotFound, 404),
    (Unauthorized, 401),
    (Forbidden, 403),
    (StoreUnavailable, 503),
)
# Store errors that escaped a module's own wrapping still mean "try again later", not a bug.
UNWRAPPED_OUTAGES = (
    RedisConnectionError,
    RedisTimeoutError,
    OperationalError,
    InterfaceError,
    PoolTimeout,
)
HTTP_ERROR_NAMES = {
    400: "ValidationError",
    401: "Unauthorized",
    404: "NotFound",
    405: "MethodNotAllowed",
    413: "PayloadTooLarge",
}


def _error(
    status: int, error: str, detail: str, headers: Mapping[str, str] | None = None
) -> Response:
    return JSONResponse(
        ErrorOut(error=error, detail=detail).model_dump(), status_code=status, headers=headers
    )


def layer_of(exc: BaseException) -> Layer:
    """The layer a store error belongs to, named without its address or text."""
    if isinstance(exc, StoreError):
        return exc.layer
    # A driver's error that escaped its store's wrapping: its type says which store.
    if isinstance(exc, RedisError):
        return "redis"
    if isinstance(exc, SQLAlchemyError):
        return "database"
    return "store"


# memstack.client reads the layer back from these details (``served_layer``): keep their
# shape, ``<layer> unavailable`` and ``<layer> error; …``.
async def _memstack_error(_: Request, exc: Exception) -> Response:
    status = next((code for cls, code in STATUS_OF if isinstance(exc, cls)), 500)
    name = type(exc).__name__
    if isinstance(exc, StoreUnavailable):
        # The message and its cause can carry SQL, parameters, paths and addresses.
        log.warning("store unavailable: %s: %s (cause: %r)", name, exc, exc.__cause__)
        return _error(status, name, f"{layer_of(exc)} unavailable")
    if status < 500 or isinstance(exc, SchemaMismatch):
        # Validation and lookup messages describe the request; a schema mismatch names
        # the command that fixes it.
        return _error(status, name, str(exc))
    log.error("request failed: %s: %s", name, exc, exc_info=exc)
    what = f"{layer_of(exc)} error" if isinstance(exc, StoreError) else "internal error"
    return _error(status, name, f"{what}; the server log has the details")


async def _outage(_: Request, exc: Exception) -> Response:
    log.warning("unwrapped store error: %s: %s", type(exc).__name__, exc)
    return _error(503, StoreUnavailable.__name__, f"{layer_of(exc)} unavailable")


def _problem(err: Mapping[str, Any]) -> str:
    where = ".".join(str(p) for p in err["loc"])
    if err["type"] == "string_unicode":
        return f"{where}: is not valid Unicode text (a lone surrogate)"
    pattern = str((err.get("ctx") or {}).get("pattern"))
    return f"{where}: {PATTERN_MEANING.get(pattern, err['msg'])}"


ID_FIELDS = frozenset({"user_id", "session_id", "msg_id", "doc_id", "ref", "key", "namespace"})
# A message's fields, and the author names a user is bound to (checked as a message's).
MESSAGE_FIELDS = frozenset({"role", "content", "name", "display_name", "aliases"})
SHAPE_ERRORS = frozenset(
    {"string_pattern_mismatch", "string_too_short", "string_too_long", "literal_error"}
)


def _invalid_name(errors: list[Any]) -> str:
    """The name the library gives the same refusal: InvalidId when only ids were refused,
    InvalidContent when only a message's role, content or author, else ValidationError."""
    if not errors or any(e["type"] not in SHAPE_ERRORS for e in errors):
        return ValidationError.__name__
    # The field itself, not the place in its list (body.aliases.0 is of aliases).
    fields = {next((p for p in reversed(e["loc"]) if isinstance(p, str)), None) for e in errors}
    if fields <= ID_FIELDS:
        return InvalidId.__name__
    if fields <= MESSAGE_FIELDS:
        return InvalidContent.__name__
    return ValidationError.__name__


async def _request_invalid(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    problems = [_problem(err) for err in errors] or ["invalid request"]
    return _error(422, _invalid_name(errors), "; ".join(problems))


METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _allowed_methods(request: Request) -> str:
    # Starlette's 405 names only the methods of the first route of the path, and several
    # share one here: ask every route which methods it takes for this path.
    routes = request.app.router.routes
    allowed = (
        method
        for method in METHODS
        if any(r.matches({**request.scope, "method": method})[0] is Match.FULL for r in routes)
    )
    return ", ".join(allowed)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    status, detail, headers = exc.status_code, str(exc.detail), dict(exc.headers or {})
    error = HTTP_ERROR_NAMES.get(status, "HTTPError")
    if status == 400:
        # FastAPI's "error parsing the body" (bytes that are not UTF-8, JSON nested too
        # deep to decode): a bad request body like any other, so 422.
        status, detail = 422, "body: not a JSON document this server can read"
    if status == 405:
        headers["Allow"] = _allowed_methods(request)
    return _error(status, error, detail, headers)


async def _unexpected(_: Request, exc: Exception) -> Response:
    log.exception("unexpected error", exc_info=exc)
    return _error(500, "InternalError", "internal error; the server log has the details")


Handler = Callable[[Request, Exception], Awaitable[Response]]


def _shown_as(page: PageOf, handler: Handler) -> Handler:
    """``handler``, whose answer to a request for an inspector page is shown as a page."""

    async def handle(request: Request, exc: Exception) -> Response:
        response = await handler(request, exc)
        return page(request, response) if is_page(route_path(request.scope)) else response

    return handle


def install(app: FastAPI, page: PageOf) -> None:
    """Route every error of ``app`` through the handlers above; ``page`` turns an answer
    to the inspector's pages into HTML."""
    app.add_exception_handler(MemstackError, _shown_as(page, _memstack_error))
    for outage in UNWRAPPED_OUTAGES:
        app.add_exception_handler(outage, _shown_as(page, _outage))
    app.add_exception_handler(RequestValidationError, _shown_as(page, _request_invalid))
    app.add_exception_handler(HTTPException, _shown_as(page, _http_error))
    app.add_exception_handler(Exception, _shown_as(page, _unexpected))
