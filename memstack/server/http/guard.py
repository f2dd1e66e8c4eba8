"""What the HTTP API does with a request before any route sees it: authenticate it, bound
its body, and count it.

Both are pure ASGI middleware, not Starlette's ``BaseHTTPMiddleware``: a request is
answered or passed on from its headers alone, and its body is never read or buffered
here. A request without the right bearer token is refused before a byte of its body is
read, whatever its path or content (an unknown route or broken JSON included); a body
whose ``Content-Length`` is over the limit is refused before it is read, and a chunked
one is counted while the route reads it and cut off at the limit.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Iterable

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memstack.core import metrics

# Answered without a token: probes, scrapers and the API's own description.
OPEN_PATHS = frozenset(
    {"/healthz", "/metrics", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}
)


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


class RequestGuard:
    """Bearer-token check (when a token is set), the request body limit, and admission:
    at most ``concurrency`` requests past the open paths are in the routes at once.

    Admission is the back-pressure: under a burst the others wait here, before their
    body is read and before they take a store connection, rather than inside the pools,
    where a wait longer than ``store_timeout_s`` is an error or a context without a
    layer. ``/healthz`` and ``/metrics`` never wait behind them.
    """

    def __init__(
        self, app: ASGIApp, *, token: str | None, max_body_bytes: int, concurrency: int
    ) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.max_body_bytes = max_body_bytes
        self.slots = asyncio.Semaphore(concurrency)

    def authorized(self, scope: Scope) -> bool:
        if self.token is None or scope["path"] in OPEN_PATHS:
            return True
        scheme, _, credentials = (_header(scope, b"authorization") or b"").partition(b" ")
        # compare_digest: the time to reject must not reveal how much of a guess was right.
        return scheme.lower() == b"bearer" and secrets.compare_digest(
            credentials.strip(), self.token
        )

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
        if not self.authorized(scope):
            detail = "missing or wrong bearer token"
            headers = [("WWW-Authenticate", "Bearer"), *close]
            await send_error(send, 401, "Unauthorized", detail, headers)
            return
        declared = self.declared_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            too_large = PayloadTooLarge(self.max_body_bytes)
            await send_error(send, 413, "PayloadTooLarge", too_large.detail, close)
            return
        if scope["path"] in OPEN_PATHS:
            await self._pass_on(scope, receive, send)
            return
        async with self.slots:
            await self._pass_on(scope, receive, send)

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
