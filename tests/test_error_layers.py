"""A store error names its layer where it is raised (``exc.layer``); the HTTP API tells a
client only that layer, and the client raises the error again with it. The message never
decides the layer: it is free text that can name any store (or none)."""

from __future__ import annotations

import pickle
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Request, Response
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy.exc import OperationalError

from memstack.client import AsyncMemoryClient, MemoryClient
from memstack.core.errors import (
    LAYERS,
    Layer,
    ModelUnavailable,
    SchemaMismatch,
    StoreError,
    StoreUnavailable,
)
from memstack.server.http.errors import install
from memstack.stores.sql.db import unavailable
from tests.conftest import make_settings

IN_LOG = "the server log has the details"
DB_URL = "postgresql://u:secret@10.9.8.7:5432/memstack"


def _app(exc: Exception) -> FastAPI:
    """An app whose every route raises ``exc``, answered by the API's error handlers."""
    app = FastAPI()

    def as_is(_: Request, response: Response) -> Response:
        return response

    install(app, as_is)

    @app.get("/{path:path}")
    async def failing(path: str) -> None:
        raise exc

    return app


async def _answer(exc: Exception) -> httpx.Response:
    transport = httpx.ASGITransport(app=_app(exc), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://memstack") as http:
        return await http.get("/v1/users/u1/facts")


def test_the_layer_is_set_where_the_error_is_raised_and_survives_pickling() -> None:
    assert StoreError("x").layer == "store"
    assert ModelUnavailable("x").layer == "model"
    assert SchemaMismatch("x", layer="vector store").layer == "vector store"
    assert set(LAYERS) >= {"redis", "database", "vector store", "model", "store"}
    for exc in (StoreUnavailable("Redis: refused", layer="redis"), ModelUnavailable("gone")):
        again = pickle.loads(pickle.dumps(exc))
        assert (type(again), str(again), again.layer) == (type(exc), str(exc), exc.layer)


@pytest.mark.parametrize(
    ("exc", "status", "detail"),
    [
        # The message starts with another store's name: the attribute decides.
        (StoreUnavailable("Redis: key refused by the database", layer="database"), 503,
         "database unavailable"),
        (StoreError("chroma collection 'kb' lost chunks", layer="knowledge base"), 500,
         f"knowledge base error; {IN_LOG}"),
        (StoreUnavailable("database of vectors: refused", layer="vector store"), 503,
         "vector store unavailable"),
        (ModelUnavailable("redis-like cache of the model is unreadable"), 503,
         "model unavailable"),
        # The message names no layer at all.
        (StoreUnavailable("search: no channel answered"), 503, "store unavailable"),
        # Driver errors that escaped their store's wrapping are named by their type.
        (RedisConnectionError("database at 10.9.8.7 refused"), 503, "redis unavailable"),
        (OperationalError("SELECT 1", {}, Exception("redis")), 503, "database unavailable"),
    ],
)  # fmt: skip
async def test_the_answer_names_the_layer_of_the_error_not_of_its_text(
    exc: Exception, status: int, detail: str
) -> None:
    r = await _answer(exc)
    assert (r.status_code, r.json()["detail"]) == (status, detail)


async def test_a_database_that_cannot_be_reached_is_named_the_database(tmp_path: Path) -> None:
    """The real helper's message starts with the server's product name (PostgreSQL),
    which no list of prefixes would have held."""
    exc = unavailable(make_settings(tmp_path, database_url=DB_URL), ConnectionRefusedError(111))
    assert str(exc).startswith("PostgreSQL")
    r = await _answer(exc)
    assert r.json() == {"error": "StoreUnavailable", "detail": "database unavailable"}
    assert "10.9.8.7" not in r.text


@pytest.mark.parametrize(
    ("exc", "layer"),
    [
        (StoreUnavailable("Redis: refused", layer="database"), "database"),
        (StoreError("chroma: bad", layer="vector store"), "vector store"),
        (ModelUnavailable("gone"), "model"),
        (StoreUnavailable("both channels failed"), "store"),
    ],
)
async def test_the_client_raises_the_error_again_with_its_layer(
    exc: StoreError, layer: Layer
) -> None:
    transport = httpx.ASGITransport(app=_app(exc), raise_app_exceptions=False)
    async with AsyncMemoryClient("http://memstack", transport=transport) as client:
        with pytest.raises(type(exc)) as caught:
            await client.facts("u1")
    assert type(caught.value) is type(exc) and caught.value.layer == layer


def test_a_gateway_or_no_answer_is_the_server_failing() -> None:
    def gateway(_: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="<html>Bad Gateway</html>")

    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("read timed out", request=request)

    for handler in (gateway, timeout):
        client = MemoryClient("http://memstack", transport=httpx.MockTransport(handler))
        with client, pytest.raises(StoreUnavailable) as caught:
            client.users()
        assert caught.value.layer == "server"


def test_a_schema_mismatch_keeps_its_message_and_the_default_layer() -> None:
    """Its detail is the message (it names the fix), which says no layer the client could
    trust, so the client does not guess one."""
    detail = "database schema is at nothing: run `memstack db upgrade`"

    def handler(_: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"error": "SchemaMismatch", "detail": detail})

    client = MemoryClient("http://memstack", transport=httpx.MockTransport(handler))
    with client, pytest.raises(SchemaMismatch, match="db upgrade") as caught:
        client.users()
    assert caught.value.layer == "store"
