"""The HTTP API: a FastAPI app over one :class:`~memstack.memory.AsyncMemory`.

``create_app(settings)`` builds the app; the memory is opened in the lifespan and closed
on shutdown, so importing this module connects to nothing. Every error leaves through one
handler as ``{"error": <type>, "detail": <message>}``; no stack trace, SQL text, file path
or store address reaches a client (the server log has them). Before a route sees a
request, :mod:`memstack.server.http.guard` checks its API key or token, and what that
may reach, and bounds its body.

Run it with ``memstack serve``, or ``uvicorn --factory memstack.server.http:create_app``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from memstack import AsyncMemory
from memstack.core.settings import Settings, load_settings
from memstack.server import ui
from memstack.server.http import errors, routes
from memstack.server.http.guard import RequestGuard, RequestMetrics
from memstack.server.http.health import HealthCheck
from memstack.server.http.watch import WATCH_INTERVAL_S, IngestWatch
from memstack.server.schemas import HealthOut

__all__ = ["create_app"]


async def healthz(request: Request) -> JSONResponse:
    """Each store's status; 503 when one is down, so a load balancer stops routing here.
    Probed at most once a second per process, whatever the number of callers."""
    report = await request.app.state.health.report(request.app.state.memory)
    return JSONResponse(report.model_dump(), status_code=200 if report.status == "ok" else 503)


async def metrics_endpoint() -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def create_app(
    settings: Settings | None = None,
    *,
    health_ttl_s: float = 1.0,
    concurrency: int | None = None,
    watch_interval_s: float = WATCH_INTERVAL_S,
) -> FastAPI:
    """The API over one ``AsyncMemory``, opened at startup and closed at shutdown.

    ``health_ttl_s``: how long one round of store probes answers ``/healthz``.
    ``concurrency``: requests served at once; more wait their turn (default: twice
    ``db_pool_size``, the PostgreSQL connections of the process with its overflow).
    ``watch_interval_s``: how often the process looks for jobs waiting with no worker
    alive (:mod:`memstack.server.http.watch`); the embedded Redis has no workers to watch.
    """
    settings = settings or load_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.memory = await AsyncMemory.open(settings)
        app.state.drain_lock = asyncio.Lock()
        # The first context() call then needs no model load.
        await app.state.memory.prepare()
        stop = asyncio.Event()
        watching = None
        if not settings.embedded_redis:
            watch = IngestWatch(watch_interval_s)
            watching = asyncio.create_task(watch.run(app.state.memory, stop))
        try:
            yield
        finally:
            stop.set()
            if watching is not None:
                await watching
            await app.state.memory.close()

    app = FastAPI(
        title="memstack",
        summary="Layered memory for long-running AI agents.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.health = HealthCheck(health_ttl_s)
    app.include_router(routes.router(settings))
    app.openapi = routes.document(app)  # type: ignore[method-assign]
    app.add_api_route(
        "/healthz",
        healthz,
        methods=["GET"],
        response_model=HealthOut,
        responses={503: {"model": HealthOut}},
    )
    app.add_api_route("/metrics", metrics_endpoint, methods=["GET"], include_in_schema=False)

    ui.install(app, settings)
    errors.install(app, ui.error_page)

    token = settings.api_token.get_secret_value() if settings.api_token else None
    # The last added runs first: count every request, then guard it.
    app.add_middleware(
        RequestGuard,
        token=token,
        # Opened by the lifespan, before the first request the guard sees.
        memory=lambda: app.state.memory,
        max_body_bytes=settings.max_body_bytes,
        concurrency=concurrency or 2 * settings.db_pool_size,
        refused_page=ui.refused_page,
    )
    app.add_middleware(RequestMetrics)
    return app
