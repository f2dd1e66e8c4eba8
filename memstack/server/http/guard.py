"""What the HTTP API does with a request before any route sees it: authenticate it,
check what its key may reach, bound its body, and count it.

All are pure ASGI middleware, not Starlette's ``BaseHTTPMiddleware``: a request is
answered or passed on from its method, path and headers alone, and its body is never
read or buffered here. A request without a valid key (or ``MEMSTACK_API_TOKEN``), or with
a key that may not reach its path, is refused before a byte of its body is read,
whatever its path or content (an unknown route or broken JSON included); a body whose
``Content-Length`` is over the limit is refused before it is read, and a chunked one is
counted while the route reads it and cut off at the limit.

Access, once the deployment has a live API key or a token (otherwise the API is open):

* the token and admin keys reach everything;
* a user key reaches ``/v1/users/<its user>`` and everything under it, the knowledge
  base's reads (``POST /v1/knowledge/search``, ``GET /v1/knowledge/documents``), and
  its writes only with the ``kb:write`` scope; anything else is 403 (the list of all
  users, other users, ``/v1/admin/…``, routes added later).

The inspector's pages under ``/ui`` take the same keys, from a cookie its sign-in page
sets (a browser cannot send a bearer header on a link); a user key reaches its own
``/ui/users/<user>`` pages and the knowledge base's page. A page without a valid key
is sent to the sign-in page, and a refusal there is a page, not JSON.

The path is judged as the router matches it (``scope["path"]``, percent-decoded once by
the server, less ``root_path``), segment by segment: a route's ``{user_id}`` is exactly
the segment after ``users``, so user ``al`` never reaches ``alice``, and a path with a
``.`` or ``..`` segment is refused to a user key outright.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from starlette.exceptions import HTTPException
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memstack import ApiKey, AsyncMemory
from memstack.core import metrics
from memstack.core.api_keys import KB_WRITE
from memstack.core.errors import StoreError, StoreUnavailable

log = logging.getLogger("memstack.server.http")

# Answered without a key: probes, scrapers and the API's own description.
OPEN_PATHS = frozenset(
    {"/healthz", "/metrics", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}
)
# The knowledge base's reads, open to every key (documents are shared, not a user's).
KB_READS = frozenset(
    {
        ("POST", "/v1/knowledge/search"),
        ("GET", "/v1/knowledge/documents"),
        ("HEAD", "/v1/knowledge/documents"),
    }
)
UNAUTHORIZED = "missing or wrong bearer token"
# The inspector: its pages, the cookie that carries their key, and what a browser must
# load before it has one (the sign-in page, its style sheet and script).
PAGES = "/ui"
PAGE_KEY_COOKIE = "memstack_ui_key"
PAGE_SIGN_IN = "/ui/login"
PAGE_STATIC = "/ui/static/"


def is_page(path: str) -> bool:
    return path == PAGES or path.startswith(PAGES + "/")


def is_open_page(path: str) -> bool:
    return path == PAGE_SIGN_IN or path.startswith(PAGE_STATIC)


class PayloadTooLarge(HTTPException):
    """A request body over ``max_body_bytes`` (413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            413,
            f"the request body is over the limit of {limit} bytes (MEMSTACK_MAX_BODY_BYTES)",
            headers={"Connection": "close"},
        )


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


def _page_key(scope: Scope) -> bytes:
    cookies = cookie_parser((_header(scope, b"cookie") or b"").decode("latin-1"))
    return cookies.get(PAGE_KEY_COOKIE, "").encode("latin-1", "replace")


def viewer_of(scope: Scope) -> ApiKey | None:
    """The key a request was admitted with; None for the token or an open API (both reach
    everything)."""
    viewer: ApiKey | None = scope.get("state", {}).get("memstack_key")
    return viewer


async def send_page_refusal(send: Send, status: int, detail: str) -> None:
    """A refused page: to the sign-in page without a valid key, else a short page saying
    why (the API's JSON would be a blank stare in a browser)."""
    if status == 401:
        headers = [(b"location", PAGE_SIGN_IN.encode()), (b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 303, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
        return
    body = f"<!doctype html><title>{status}</title><p>{html.escape(detail)}</p>".encode()
    headers = [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def send_error(
    send: Send, status: int, error: str, detail: str, headers: Iterable[tuple[str, str]] = ()
) -> None:
    """The API's error body, ``{"error", "detail"}``, sent straight to the client."""
    body = json.dumps({"error": error, "detail": detail}).encode()
    raw = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers),
    ]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def route_path(scope: Scope) -> str:
    """The path the router matches: ``scope["path"]`` less the app's ``root_path`` (as
    Starlette's own routing computes it)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path != root and path[len(root)] == "/":
        return path[len(root) :]
    return path


def refusal_of(key: ApiKey, method: str, path: str) -> str | None:
    """Why ``key`` may not make this request (403), or None when it may."""
    if key.admin:
        return None
    segments = path.split("/")  # "/v1/users/al/facts" -> ["", "v1", "users", "al", "facts"]
    if "." in segments or ".." in segments:
        return "a path with . or .. segments is refused"
    if segments[1:4] == ["v1", "users", key.user_id]:
        return None
    if is_page(path):
        return _page_refusal(key, method, path, segments)
    if segments[1:3] == ["v1", "knowledge"]:
        if (method, path.removesuffix("/")) in KB_READS or key.grants(KB_WRITE):
            return None
        return f"writing the knowledge base needs a key with the {KB_WRITE} scope"
    return f"this key reaches only /v1/users/{key.user_id}/… and the knowledge base"


def _page_refusal(key: ApiKey, method: str, path: str, segments: list[str]) -> str | None:
    """A user key's pages: its own user's, the knowledge base's (reading), the start page
    (which sends it to its own) and signing out."""
    if segments[1:4] == ["ui", "users", key.user_id]:
        return None
    if path.removesuffix("/") in (PAGES, f"{PAGES}/logout"):
        return None
    if segments[1:3] == ["ui", "knowledge"] and method in ("GET", "HEAD"):
        return None
    return f"this key reaches only {PAGES}/users/{key.user_id} and the knowledge base"


@dataclass(frozen=True)
class Refusal:
    status: int
    error: str
    detail: str


class RequestGuard:
    """API keys (once the deployment has one) and the bearer token (when set), the
    request body limit, and admission: at most ``concurrency`` requests past the open
    paths are in the routes at once.

    Admission is the back-pressure: under a burst the others wait here, before their
    body is read and before they take a store connection, rather than inside the pools,
    where a wait longer than ``store_timeout_s`` is an error or a context without a
    layer. ``/healthz`` and ``/metrics`` never wait behind them. A key is checked once
    admitted, so a flood of made-up keys takes no more database connections than the
    routes may.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        memory: Callable[[], AsyncMemory],
        max_body_bytes: int,
        concurrency: int,
        refused_page: Callable[[Scope], ASGIApp] | None = None,
    ) -> None:
        self.app = app
        # The inspector's own 403 page (which key, why, how to sign in with another);
        # the guard cannot import the pages, which sit beside it.
        self.refused_page = refused_page
        self.token = token.encode() if token else None
        self.memory = memory
        self.max_body_bytes = max_body_bytes
        self.slots = asyncio.Semaphore(concurrency)

    async def refusal(self, scope: Scope, path: str) -> Refusal | None:
        """Why this request is refused (401, 403, or 503 when the keys cannot be read),
        or None when it may go on."""
        mem = self.memory()
        try:
            if self.token is None and not await mem.has_keys():
                return None  # no token and no key: the API is open
            scheme, _, credentials = (_header(scope, b"authorization") or b"").partition(b" ")
            presented = credentials.strip()
            if is_page(path) and not presented:
                scheme, presented = b"bearer", _page_key(scope)
            if scheme.lower() != b"bearer" or not presented:
                return Refusal(401, "Unauthorized", UNAUTHORIZED)
            # compare_digest: the time to reject must not reveal how much of a guess was right.
            if self.token is not None and secrets.compare_digest(presented, self.token):
                return None
            key = await mem.authenticate(presented.decode("latin-1"))
        except StoreError as exc:
            log.warning("API keys unreadable: %s: %s", type(exc).__name__, exc)
            if isinstance(exc, StoreUnavailable):
                return Refusal(503, "StoreUnavailable", "database unavailable")
            return Refusal(
                500, type(exc).__name__, "database error; the server log has the details"
            )
        if key is None:
            return Refusal(401, "Unauthorized", UNAUTHORIZED)
        scope.setdefault("state", {})["memstack_key"] = key
        reason = refusal_of(key, scope["method"], path)
        return None if reason is None else Refusal(403, "Forbidden", reason)

    def declared_length(self, scope: Scope) -> int | None:
        raw = _header(scope, b"content-length")
        try:
            return int(raw) if raw is not None else None
        except ValueError:
            return None  # the server refuses it; counting below still applies

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        has_body = _header(scope, b"content-length") not in (None, b"0") or (
            _header(scope, b"transfer-encoding") is not None
        )
        # Closing the connection spares the server reading a body nobody wants.
        close = [("Connection", "close")] if has_body else []
        path = route_path(scope)
        if path in OPEN_PATHS:
            if await self._too_large(scope, send, close):
                return
            await self._pass_on(scope, receive, send)
            return
        async with self.slots:
            refused = None if is_open_page(path) else await self.refusal(scope, path)
            if refused is not None and is_page(path):
                if refused.status == 403 and self.refused_page is not None:
                    await self.refused_page(scope)(scope, receive, send)
                    return
                await send_page_refusal(send, refused.status, refused.detail)
                return
            if refused is not None:
                bearer = [("WWW-Authenticate", "Bearer")] if refused.status == 401 else []
                await send_error(
                    send, refused.status, refused.error, refused.detail, [*bearer, *close]
                )
                return
            if await self._too_large(scope, send, close):
                return
            await self._pass_on(scope, receive, send)

    async def _too_large(self, scope: Scope, send: Send, close: list[tuple[str, str]]) -> bool:
        declared = self.declared_length(scope)
        if declared is None or declared <= self.max_body_bytes:
            return False
        too_large = PayloadTooLarge(self.max_body_bytes)
        await send_error(send, 413, "PayloadTooLarge", too_large.detail, close)
        return True

    async def _pass_on(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.max_body_bytes
        received = 0
        started = False

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    # Raised inside the route's body read: FastAPI passes an HTTPException
                    # on to the app's handler, which answers 413.
                    raise PayloadTooLarge(limit)
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, watched_send)
        except PayloadTooLarge as exc:
            # Read by something that let it escape: answer here if nothing was sent yet.
            if started:
                raise
            await send_error(send, 413, "PayloadTooLarge", exc.detail, [("Connection", "close")])


class RequestMetrics:
    """``memstack_http_requests_total`` and ``memstack_http_request_seconds`` by route
    template (never by raw path, which carries user ids)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def watched_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, watched_send)
        finally:
            # The router writes the matched route into the scope it was given.
            route = getattr(scope.get("route"), "path", "unmatched")
            metrics.HTTP_REQUESTS.labels(scope["method"], route, str(status)).inc()
            metrics.HTTP_SECONDS.labels(route).observe(time.perf_counter() - started)
