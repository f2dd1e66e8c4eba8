"""The HTTP API at its edges: authentication before the body, body limits, bounded
parameters, errors that leak nothing, a health check that stays cheap under load."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr
from redis.exceptions import ConnectionError as RedisConnectionError

from memstack.core.errors import ConfigError, ModelUnavailable, StoreError, StoreUnavailable
from memstack.core.ids import MAX_ID_LEN, MAX_MSG_ID_LEN, MSG_ID_PATTERN
from memstack.core.settings import Settings
from memstack.memory import AsyncMemory
from memstack.server.http import create_app
from memstack.server.manage_schemas import FACT_KEY_PATTERN
from tests.conftest import new_id, new_prefix

TOKEN = "limits-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ID_PATTERN = "^[A-Za-z0-9_.:@-]+$"


@asynccontextmanager
async def running(
    settings: Settings, **options: Any
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient, AsyncMemory]]:
    """The app with its lifespan running, a client, and its memory."""
    app = create_app(settings, **options)
    async with app.router.lifespan_context(app):
        mem: AsyncMemory = app.state.memory
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://memstack") as c:
                yield app, c, mem
        finally:
            keys = [k async for k in mem.working.redis.scan_iter(match=mem.working.keys.pattern())]
            if keys:
                await mem.working.redis.delete(*keys)


@pytest.fixture
async def guarded(
    service_settings: Settings,
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient, AsyncMemory]]:
    """Real stores, a token, and a 4 KiB body limit."""
    limits = {"api_token": SecretStr(TOKEN), "max_body_bytes": 4096}
    async with running(service_settings.model_copy(update=limits)) as trio:
        yield trio


@pytest.fixture
async def open_api(
    service_settings: Settings,
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient, AsyncMemory]]:
    async with running(service_settings) as trio:
        yield trio


async def raw_call(
    app: FastAPI, method: str, path: str, headers: dict[str, str], chunks: list[bytes]
) -> tuple[int, dict[str, str], bytes, int]:
    """Call the ASGI app directly; return status, headers, body and how many body chunks
    the app pulled."""
    pulled = 0

    async def receive() -> dict[str, Any]:
        nonlocal pulled
        if pulled < len(chunks):
            pulled += 1
            return {"type": "http.request", "body": chunks[pulled - 1], "more_body": True}
        if pulled == len(chunks):
            pulled += 1
            return {"type": "http.request", "body": b"", "more_body": False}
        return {"type": "http.disconnect"}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "client": ("127.0.0.1", 5000), "server": ("memstack", 80),
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }  # fmt: skip
    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    got = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    return int(start["status"]), got, body, min(pulled, len(chunks))


# --- 1. authentication before the body -------------------------------------------------------


async def test_without_the_token_every_v1_request_is_401_before_its_body_is_read(
    guarded: tuple[FastAPI, httpx.AsyncClient, AsyncMemory],
) -> None:
    app, client, mem = guarded
    url = f"/v1/users/{new_id('u')}/sessions/s1/messages"
    for path, body in [
        (url, b'{"role": "user", "content": "hi"}'),
        (url, b"{not json"),
        ("/v1/no/such/route", b"x" * 100),
        ("/v1", b""),
    ]:
        for headers in ({}, {"Authorization": f"Bearer {TOKEN}x"}, {"Authorization": TOKEN}):
            status, got, text, pulled = await raw_call(
                app, "POST", path, {**headers, "content-type": "application/json"}, [body]
            )
            assert status == 401, (path, headers, text)
            assert pulled == 0 and got["www-authenticate"] == "Bearer"
            assert text == b'{"error": "Unauthorized", "detail": "missing or wrong bearer token"}'
    assert [k async for k in mem.working.redis.scan_iter(match=mem.working.keys.pattern())] == [
        mem.working.keys.layout().encode()
    ]
    # With the token: an unknown route is 404 and broken JSON 422, as before.
    assert (await client.post("/v1/no/such/route", headers=AUTH)).status_code == 404
    broken = await client.post(url, content=b"{not json", headers=AUTH)
    assert broken.status_code == 422
    # Probes, scrapers and the API's description carry no token.
    for path in ("/healthz", "/metrics", "/openapi.json", "/docs"):
        assert (await client.get(path)).status_code == 200, path


# --- 2. the body limit ------------------------------------------------------------------------


async def test_a_declared_length_over_the_limit_is_413_unread(
    guarded: tuple[FastAPI, httpx.AsyncClient, AsyncMemory],
) -> None:
    app, client, _ = guarded
    url = f"/v1/users/{new_id('u')}/sessions/s1/messages"
    headers = {**AUTH, "content-type": "application/json", "content-length": "5000"}
    status, got, text, pulled = await raw_call(app, "POST", url, headers, [b"x" * 5000])
    assert (status, pulled) == (413, 0)
    assert got["connection"] == "close"
    assert text.startswith(b'{"error": "PayloadTooLarge", "detail": "the request body is over')
    # Without a token the 401 comes first: nobody learns the limit unauthenticated.
    no_token = {"content-type": "application/json", "content-length": "5000"}
    assert (await raw_call(app, "POST", url, no_token, [b"x" * 5000]))[0] == 401
    # At the limit, the request goes through.
    padded = {"role": "user", "content": "hi" + " " * 3900}
    assert (await client.post(url, json=padded, headers=AUTH)).status_code == 201


async def test_a_chunked_body_is_cut_off_at_the_limit(
    guarded: tuple[FastAPI, httpx.AsyncClient, AsyncMemory],
) -> None:
    app, client, _ = guarded
    url = f"/v1/users/{new_id('u')}/sessions/s1/messages"
    headers = {**AUTH, "content-type": "application/json", "transfer-encoding": "chunked"}
    chunks = [b'{"role": "user", "content": "'] + [b"x" * 1024] * 200
    status, _, text, pulled = await raw_call(app, "POST", url, headers, chunks)
    assert status == 413 and b"PayloadTooLarge" in text
    assert pulled <= 6  # 4 KiB read, not 200 KiB

    async def stream() -> AsyncIterator[bytes]:
        yield b'{"role": "user", "content": "'
        for _ in range(200):
            yield b"y" * 1024

    headers = {**AUTH, "content-type": "application/json"}
    r = await client.post(url, content=stream(), headers=headers)
    assert r.status_code == 413 and r.json()["error"] == "PayloadTooLarge"
    assert "4096 bytes" in r.json()["detail"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))


@pytest.fixture
def server(tmp_path: Path, redis_url: str, pg_url: str) -> Iterator[tuple[str, int]]:
    """``memstack serve`` on real stores: its base URL and PID."""
    port = _free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "MEMSTACK_HOME": str(tmp_path / "home"),
        "MEMSTACK_EMBEDDER": "hashing",
        "MEMSTACK_REDIS_URL": redis_url,
        "MEMSTACK_DATABASE_URL": pg_url,
        "MEMSTACK_KEY_PREFIX": new_prefix(),
        "MEMSTACK_API_TOKEN": TOKEN,
        # The shared Redis keeps nothing on disk, which serve and worker refuse otherwise.
        "MEMSTACK_ALLOW_UNSAFE": "1",
        # The server runs the code under test, whichever checkout that is.
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    memstack = Path(sys.executable).parent / "memstack"
    proc = subprocess.Popen(
        [str(memstack), "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, "memstack serve exited"
            assert time.monotonic() < deadline, "memstack serve did not start"
            time.sleep(0.2)
        yield base, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_twenty_megabytes_cost_the_server_nothing(server: tuple[str, int]) -> None:
    base, pid = server
    url = f"{base}/v1/users/u1/sessions/s1/messages"
    big = b'{"role": "user", "content": "' + b"x" * 20_000_000 + b'"}'
    headers = {**AUTH, "content-type": "application/json"}
    with httpx.Client(timeout=30) as client:
        client.post(url, json={"role": "user", "content": "warm up"}, headers=headers)
        before = _rss_kib(pid)

        def chunks() -> Iterator[bytes]:
            for i in range(0, len(big), 65536):
                yield big[i : i + 65536]

        for content, extra in ((big, {}), (chunks(), {}), (big, {"Authorization": "Bearer no"})):
            started = time.monotonic()
            r = client.post(url, content=content, headers={**headers, **extra})
            elapsed = time.monotonic() - started
            assert r.status_code == (401 if extra else 413), r.text
            assert elapsed < 3, elapsed
        grown_mib = (_rss_kib(pid) - before) / 1024
        assert grown_mib < 10, f"the server grew by {grown_mib:.1f} MiB"
        assert client.get(f"{base}/healthz").status_code == 200


# --- 3. bounded parameters and a truthful OpenAPI document ---------------------------------


async def test_window_n_is_bounded_by_the_setting_and_documented(
    open_api: tuple[FastAPI, httpx.AsyncClient, AsyncMemory],
) -> None:
    app, client, mem = open_api
    url = f"/v1/users/{new_id('u')}/sessions/s1/messages"
    limit = mem.settings.window_max_messages
    for n in ("99999999999999999999", "0", "-1", str(limit + 1), "abc"):
        r = await client.get(url, params={"n": n})
        assert r.status_code == 422, (n, r.text)
        assert r.json()["error"] == "ValidationError" and "query.n" in r.json()["detail"]
    assert (await client.get(url, params={"n": str(limit)})).status_code == 200
    window = app.openapi()["paths"]["/v1/users/{user_id}/sessions/{session_id}/messages"]
    [n] = [p["schema"]["anyOf"][0] for p in window["get"]["parameters"] if p["name"] == "n"]
    assert {"minimum": 1, "maximum": limit}.items() <= n.items()


def _id_schemas(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every id the document declares: path and query parameters and body fields."""
    found: dict[str, dict[str, Any]] = {}
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for p in op.get("parameters", []):
                if p["in"] == "path" or p["name"] in ("key", "namespace"):
                    schema = p["schema"].get("anyOf", [p["schema"]])[0]
                    found[f"{method} {path} {p['name']}"] = schema
    for model, fields in doc["components"]["schemas"].items():
        for name, schema in fields.get("properties", {}).items():
            if name in ("msg_id", "doc_id", "namespace") and model.endswith("In"):
                found[f"{model}.{name}"] = schema.get("anyOf", [schema])[0]
    return found


async def test_the_document_states_every_id_rule_the_server_enforces(
    open_api: tuple[FastAPI, httpx.AsyncClient, AsyncMemory],
) -> None:
    app, client, _ = open_api
    ids = _id_schemas(app.openapi())
    assert len(ids) >= 20
    for where, schema in ids.items():
        if where.endswith("/messages/{msg_id} msg_id"):
            # A stored message id, as remember() returns it: "<user>/<session>:<id>" or
            # a generated one, so it may hold one "/".
            assert schema["pattern"] == MSG_ID_PATTERN, where
            assert schema["maxLength"] == MAX_MSG_ID_LEN, where
            continue
        if where.endswith("/facts/{key} key"):
            # A key set by hand: what check_fact_key takes, never "history".
            assert schema["pattern"] == FACT_KEY_PATTERN, where
            continue
        if where.endswith(" candidate_id"):
            # A candidate's row id: a positive 64-bit integer.
            assert (schema["type"], schema["minimum"], schema["maximum"]) == (
                "integer",
                1,
                2**63 - 1,
            ), where
            continue
        assert schema["pattern"] == ID_PATTERN, where
        assert schema["minLength"] == 1, where
        assert schema["maxLength"] == (64 if where.endswith("namespace") else MAX_ID_LEN), where
    # The longest id the document allows is accepted, one more character refused.
    longest = "u" * MAX_ID_LEN
    r = await client.post(
        f"/v1/users/{longest}/sessions/{longest}/messages",
        json={"role": "user", "content": "hi", "msg_id": longest},
    )
    assert r.status_code == 201, r.text
    r = await client.get(f"/v1/users/{longest}x/facts")
    assert r.status_code == 422 and r.json()["error"] == "InvalidId"
    assert "path.user_id" in r.json()["detail"]


async def test_405_names_every_method_of_the_path(
    open_api: tuple[FastAPI, httpx.AsyncClient, AsyncMemory],
) -> None:
    _, client, _ = open_api
    session = "/v1/users/u1/sessions/s1"
    allows = {f"{session}/state": "GET, PATCH", f"{session}/messages": "GET, POST"}
    allows |= {"/v1/knowledge/documents": "GET, POST", "/v1/users/u1": "DELETE"}
    for path, allowed in allows.items():
        r = await client.put(path, json={})
        assert r.status_code == 405 and r.headers["allow"] == allowed, (path, r.headers)
        assert r.json()["error"] == "MethodNotAllowed"


async def test_a_body_that_is_not_utf8_is_422_not_an_undocumented_400(
    open_api: tuple[FastAPI, httpx.AsyncClient, AsyncMemory],
) -> None:
    _, client, _ = open_api
    for body in (b'{"query": "\xff\xfe"}', b"[" * 100_000):
        r = await client.post(
            "/v1/knowledge/search", content=body, headers={"content-type": "application/json"}
        )
        assert r.status_code == 422 and r.json()["error"] == "ValidationError", r.text


# --- 4. errors that leak nothing --------------------------------------------------------------

SECRETS = ("10.9.8.7", "5432", "INSERT", "/srv/", "password")
LEAKY = "at 10.9.8.7, port 5432: password authentication failed; INSERT INTO fact ('x')"
IN_LOG = "the server log has the details"


@pytest.mark.parametrize(
    ("exc", "status", "detail"),
    [
        (
            StoreUnavailable(f"database unavailable (facts): {LEAKY}", layer="database"),
            503,
            "database unavailable",
        ),
        (
            StoreUnavailable(f"Redis: Error 111 connecting {LEAKY}", layer="redis"),
            503,
            "redis unavailable",
        ),
        (
            StoreUnavailable(f"chroma http://{LEAKY}", layer="vector store"),
            503,
            "vector store unavailable",
        ),
        (
            ModelUnavailable(f"cannot load the ONNX model /srv/m.onnx {LEAKY}"),
            503,
            "model unavailable",
        ),
        (
            StoreError(f"chroma /srv/chroma collection 'm': {LEAKY}", layer="vector store"),
            500,
            f"vector store error; {IN_LOG}",
        ),
        (
            ConfigError(f"home /srv/memstack is held by pid 5432 {LEAKY}"),
            500,
            f"internal error; {IN_LOG}",
        ),
        (RedisConnectionError(f"Error 111 connecting to {LEAKY}"), 503, "redis unavailable"),
    ],
)
async def test_store_errors_reach_the_client_as_their_layer_only(
    open_api: tuple[FastAPI, httpx.AsyncClient, AsyncMemory],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    exc: Exception,
    status: int,
    detail: str,
) -> None:
    _, client, mem = open_api

    async def failing(user_id: str) -> list[object]:
        raise exc

    monkeypatch.setattr(mem, "facts", failing)
    with caplog.at_level(logging.WARNING, logger="memstack.server.http"):
        r = await client.get("/v1/users/u1/facts")
    assert r.status_code == status
    assert r.json()["detail"] == detail
    assert not any(secret in r.text for secret in SECRETS), r.text
    # The server log keeps the whole story.
    assert "10.9.8.7" in caplog.text or "/srv/" in caplog.text


async def test_a_msg_id_retried_with_other_content_is_409(
    open_api: tuple[FastAPI, httpx.AsyncClient, AsyncMemory],
) -> None:
    _, client, _ = open_api
    url = f"/v1/users/{new_id('u')}/sessions/s1/messages"
    first = await client.post(url, json={"role": "user", "content": "a", "msg_id": "m1"})
    again = await client.post(url, json={"role": "user", "content": "a", "msg_id": "m1"})
    other = await client.post(url, json={"role": "user", "content": "b", "msg_id": "m1"})
    assert first.status_code == again.status_code == 201
    assert other.status_code == 409 and other.json()["error"] == "Conflict"
    assert [m["content"] for m in (await client.get(url)).json()["messages"]] == ["a"]


# --- 5. /healthz under load ---------------------------------------------------------------------


async def test_a_thousand_concurrent_healthz_share_one_probe_round(
    service_settings: Settings,
) -> None:
    async with running(service_settings, health_ttl_s=1.0) as (app, client, _):
        started = time.monotonic()
        replies = await asyncio.gather(*(client.get("/healthz") for _ in range(1000)))
        elapsed = time.monotonic() - started
        assert {r.status_code for r in replies} == {200}
        # One round, or two if the thousand took longer than the second a round stands for.
        rounds = app.state.health.rounds
        assert rounds <= 1 + int(elapsed), (rounds, elapsed)
        await asyncio.sleep(1.05)  # the round is stale now: the next call makes one, once
        await asyncio.gather(client.get("/healthz"), client.get("/healthz"))
        assert app.state.health.rounds == rounds + 1


async def test_a_burst_waits_its_turn_instead_of_failing(
    service_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Admission: at most ``concurrency`` requests in the routes; the rest wait before
    their body is read and before they take a store connection. Probes never wait."""
    async with running(service_settings, concurrency=2, health_ttl_s=0.0) as (_, client, mem):
        assert (await client.get("/healthz")).status_code == 200  # opens the stores
        inside = peak = 0
        real_facts = mem.facts

        async def slow_facts(user_id: str) -> list[object]:
            nonlocal inside, peak
            inside += 1
            peak = max(peak, inside)
            await asyncio.sleep(0.1)
            inside -= 1
            return list(await real_facts(user_id))

        monkeypatch.setattr(mem, "facts", slow_facts)
        burst = asyncio.gather(*(client.get(f"/v1/users/u{i}/facts") for i in range(10)))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        health = await client.get("/healthz")
        assert health.status_code == 200 and time.monotonic() - started < 0.3
        replies = await burst
        assert [r.status_code for r in replies] == [200] * 10
        assert peak == 2


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "messages", '{"role": "user", "content": "a\\ud800b"}'),
        ("POST", "messages", '{"role": "user", "content": "a\\u0000b"}'),
        ("POST", "messages", '{"role": "user", "content": "ok", "name": "T\\ud800"}'),
        ("POST", "context", '{"query": "a\\ud800b"}'),
        ("POST", "context", '{"query": "ok", "system": "a\\ud800b"}'),
        ("PATCH", "state", '{"f": "a\\ud800b"}'),
        ("PATCH", "state", '{"f": {"g": "a\\u0000"}}'),
        ("POST", "/v1/knowledge/search", '{"query": "a\\ud800b"}'),
        ("POST", "/v1/knowledge/documents", '{"documents": [{"text": "ok", "title": "a\\u0000"}]}'),
        ("POST", "/v1/knowledge/documents", '{"documents": [{"text": "a\\ud800b"}]}'),
    ],
)
async def test_nul_and_lone_surrogates_are_422_everywhere(
    open_api: tuple[FastAPI, httpx.AsyncClient, AsyncMemory], method: str, path: str, body: str
) -> None:
    _, client, mem = open_api
    user = new_id("u")
    url = path if path.startswith("/") else f"/v1/users/{user}/sessions/s1/{path}"
    r = await client.request(
        method, url, content=body.encode(), headers={"content-type": "application/json"}
    )
    assert r.status_code == 422, r.text
    assert "Unicode" in r.json()["detail"] or "NUL" in r.json()["detail"]
    assert await mem.window(user, "s1") == []


async def test_numbers_and_times_are_read_as_the_document_types_them(
    open_api: tuple[FastAPI, httpx.AsyncClient, AsyncMemory],
) -> None:
    _, client, _ = open_api
    for top_k in ("5", True, 0, 101):
        r = await client.post("/v1/knowledge/search", json={"query": "x", "top_k": top_k})
        assert r.status_code == 422 and "top_k" in r.json()["detail"], (top_k, r.text)
    url = f"/v1/users/{new_id('u')}/sessions/s1/messages"
    for ts in ("1700000000", "2025-03-01 10:00:00+08:00", -1, 10**12):
        r = await client.post(url, json={"role": "user", "content": "x", "ts": ts})
        assert r.status_code == 422 and "body.ts" in r.json()["detail"], (ts, r.text)
    for ts in ("2025-03-01T10:00:00+08:00", 1_700_000_000):
        r = await client.post(url, json={"role": "user", "content": "x", "ts": ts})
        assert r.status_code == 201, (ts, r.text)
