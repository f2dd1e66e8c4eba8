"""The HTTP API, driven through httpx against the app's own lifespan and real stores."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from memstack.core.errors import ConfigError, SchemaMismatch
from memstack.core.settings import Settings
from memstack.memory import AsyncMemory
from memstack.server.http import create_app
from memstack.stores.redis.working_memory import WorkingMemory
from tests.conftest import make_settings, new_id
from tests.test_fact_time import NOT_ANYMORE, VEGETARIAN, Scripted

TOKEN = "s3cret-token-0123456789"
DEAD_REDIS = "redis://127.0.0.1:1/0"


@asynccontextmanager
async def serve(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, AsyncMemory]]:
    """The app with its lifespan running, and a client that sees 500s as responses.
    ``/healthz`` probes on every call here (no cached round), so a store a test breaks is
    seen at once."""
    app = create_app(settings, health_ttl_s=0.0)
    async with app.router.lifespan_context(app):
        mem: AsyncMemory = app.state.memory
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://memstack") as c:
                yield c, mem
        finally:
            redis = mem.working.redis
            keys = [k async for k in redis.scan_iter(match=mem.working.keys.pattern())]
            if keys:
                await redis.delete(*keys)


@pytest.fixture
async def api(any_settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, AsyncMemory]]:
    async with serve(any_settings) as pair:
        yield pair


@pytest.fixture
async def service_api(
    service_settings: Settings,
) -> AsyncIterator[tuple[httpx.AsyncClient, AsyncMemory]]:
    async with serve(service_settings) as pair:
        yield pair


@pytest.fixture
async def embedded_api(
    embedded_settings: Settings,
) -> AsyncIterator[tuple[httpx.AsyncClient, AsyncMemory]]:
    async with serve(embedded_settings) as pair:
        yield pair


def session_url(user: str, session: str, tail: str) -> str:
    return f"/v1/users/{user}/sessions/{session}/{tail}"


async def say(client: httpx.AsyncClient, user: str, session: str, *lines: str) -> list[str]:
    ids = []
    for i, text in enumerate(lines):
        role = "user" if i % 2 == 0 else "assistant"
        r = await client.post(
            session_url(user, session, "messages"), json={"role": role, "content": text}
        )
        assert r.status_code == 201, r.text
        ids.append(r.json()["msg_id"])
    return ids


async def our_keys(mem: AsyncMemory) -> list[bytes]:
    """Keys under the prefix but the layout mark open() writes."""
    layout = mem.working.keys.layout().encode()
    keys = [k async for k in mem.working.redis.scan_iter(match=mem.working.keys.pattern())]
    return [k for k in keys if k != layout]


# --- the round trip -------------------------------------------------------------------------


async def test_remember_drain_context_round_trip(
    api: tuple[httpx.AsyncClient, AsyncMemory],
) -> None:
    client, _ = api
    user, session = new_id("u"), new_id("s")
    ids = await say(
        client,
        user,
        session,
        "我想买一台轻薄笔记本，我预算不超过五千。",
        "好的，五千以内。",
        "其实我可以到八千，性能也想好一点。",
    )

    window = (await client.get(session_url(user, session, "messages"))).json()["messages"]
    assert [m["msg_id"] for m in window] == ids
    assert window[2]["content"].startswith("其实") and window[1]["role"] == "assistant"

    # Nothing is a fact before the ingest jobs run.
    assert (await client.get(f"/v1/users/{user}/facts")).json()["facts"] == []
    drained = await client.post("/v1/admin/drain")
    assert drained.status_code == 200 and drained.json()["processed"] == 3

    facts = (await client.get(f"/v1/users/{user}/facts")).json()["facts"]
    budget = {f["key"]: f for f in facts}["budget_limit"]
    assert budget["value"] == {"amount": 8000, "currency": "CNY"} and budget["current"]
    history = (
        await client.get(f"/v1/users/{user}/facts/history", params={"key": "budget_limit"})
    ).json()["facts"]
    assert [h["value"]["amount"] for h in history] == [5000, 8000]
    assert history[0]["valid_until"] is not None and history[1]["supersedes_id"] == history[0]["id"]

    r = await client.post(
        session_url(user, new_id("s"), "context"),
        json={"query": "我预算多少？", "budget_tokens": 2000, "locale": "zh"},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert "8000" in body["text"]
    assert any("8000" in line for line in body["sections"]["facts"]["lines"])
    assert body["sections"]["input"]["lines"] == ["我预算多少？"]
    assert body["messages"][0]["role"] == "system" and body["messages"][-1] == {
        "role": "user",
        "content": "我预算多少？",
    }
    kept_facts = [m for m in body["manifest"] if m["layer"] == "facts" and m["kept"]]
    assert kept_facts and body["degraded"] == {}
    # The superseded 五千 turn never reaches the text as a current value.
    assert "五千" not in body["sections"]["facts"]["text"]


async def test_facts_as_of_a_moment_and_the_retraction_in_history(
    api: tuple[httpx.AsyncClient, AsyncMemory],
) -> None:
    client, mem = api
    (await mem.worker()).ingestor.extractor = Scripted()
    user, session = new_id("u"), new_id("s")
    url = session_url(user, session, "messages")
    for ts, text in (("2026-11-01T09:00:00Z", VEGETARIAN), ("2026-11-01T11:00:00Z", NOT_ANYMORE)):
        r = await client.post(url, json={"role": "user", "content": text, "ts": ts})
        assert r.status_code == 201, r.text
    withdrew = r.json()["msg_id"]
    assert (await client.post("/v1/admin/drain")).status_code == 200

    facts = f"/v1/users/{user}/facts"
    assert (await client.get(facts)).json()["facts"] == []
    # 18:00 in Shanghai is 10:00 UTC: after the first message, before the second.
    then = await client.get(facts, params={"as_of": "2026-11-01T18:00:00+08:00"})
    assert then.status_code == 200, then.text
    [diet] = then.json()["facts"]
    assert diet["value"] == "vegetarian" and not diet["current"]
    assert diet["valid_until"] == "2026-11-01T11:00:00Z" and diet["ended_by_msg_id"] == withdrew
    after = await client.get(facts, params={"as_of": "2026-11-01T11:00:00.000+00:00"})
    assert after.status_code == 200 and after.json()["facts"] == []
    [ended] = (await client.get(f"{facts}/history")).json()["facts"]
    assert ended == diet

    # A time without its offset is ambiguous; epoch seconds are not a query's form.
    for bad in ("2026-11-01T10:00:00", "2026-11-01 10:00:00+00:00", "1793523600", "yesterday"):
        r = await client.get(facts, params={"as_of": bad})
        assert r.status_code == 422, (bad, r.text)
        assert "offset" in r.json()["detail"]
    [param] = [
        p
        for p in (await client.get("/openapi.json")).json()["paths"]["/v1/users/{user_id}/facts"][
            "get"
        ]["parameters"]
        if p["name"] == "as_of"
    ]
    assert {"type": "string", "format": "date-time"} in param["schema"]["anyOf"]


async def test_retry_with_the_same_msg_id_writes_once(
    embedded_api: tuple[httpx.AsyncClient, AsyncMemory],
) -> None:
    client, _ = embedded_api
    user, session = new_id("u"), new_id("s")
    body = {"role": "user", "content": "hello", "msg_id": "m1", "ts": "2025-03-01T10:00:00+08:00"}
    first = await client.post(session_url(user, session, "messages"), json=body)
    second = await client.post(session_url(user, session, "messages"), json=body)
    assert first.json() == second.json() == {"msg_id": f"{user}/{session}:m1"}
    window = (await client.get(session_url(user, session, "messages"))).json()["messages"]
    assert len(window) == 1 and window[0]["ts"] == "2025-03-01T02:00:00Z"


async def test_a_named_message_keeps_its_author_in_the_window(
    embedded_api: tuple[httpx.AsyncClient, AsyncMemory],
) -> None:
    client, _ = embedded_api
    user, session = new_id("u"), new_id("s")
    url = session_url(user, session, "messages")
    named = await client.post(
        url, json={"role": "user", "content": "I'm in Lisbon", "name": " Tim "}
    )
    assert named.status_code == 201, named.text
    await client.post(url, json={"role": "assistant", "content": "Nice."})
    window = (await client.get(url)).json()["messages"]
    assert [(m["content"], m["name"]) for m in window] == [
        ("I'm in Lisbon", "Tim"),
        ("Nice.", None),
    ]


async def test_state_and_large_values_behind_a_ref(
    service_api: tuple[httpx.AsyncClient, AsyncMemory],
) -> None:
    client, _ = service_api
    user, session = new_id("u"), new_id("s")
    await say(client, user, session, "start")
    big = "x" * 5000
    r = await client.patch(
        session_url(user, session, "state"), json={"current_step": 3, "tool_output": big}
    )
    assert r.status_code == 200, r.text
    state = (await client.get(session_url(user, session, "state"))).json()
    assert state["fields"]["current_step"] == 3 and state["turns"] == 1
    ref = state["fields"]["tool_output"]["$ref"]
    full = await client.get(f"/v1/users/{user}/tool-results/{ref}")
    assert full.json() == {"ref": ref, "content": big}
    # Another user cannot read it by guessing the ref.
    other = await client.get(f"/v1/users/{new_id('u')}/tool-results/{ref}")
    assert other.status_code == 404 and other.json()["error"] == "NotFound"


# --- error mapping ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "session", "body", "error", "says"),
    [
        ("bad%20id", "s1", {"role": "user", "content": "hi"}, "InvalidId", "user_id"),
        ("u1", "s%7B1%7D", {"role": "user", "content": "hi"}, "InvalidId", "session_id"),
        ("u1", "s1", {"role": "user", "content": "   "}, "InvalidContent", "empty"),
        ("u1", "s1", {"role": "boss", "content": "hi"}, "InvalidContent", "role"),
        ("u1", "s1", {"role": "user", "content": "hi", "msg_id": "a#b"}, "InvalidId", "msg_id"),
        ("u1", "s1", {"role": "user"}, "ValidationError", "body.content"),
        ("u1", "s1", {"role": "user", "content": "hi", "name": " "}, "InvalidContent", "name"),
        ("u1", "s1", {"role": "user", "content": "hi", "name": "T" * 65}, "InvalidContent", "64"),
        ("u1", "s1", {"role": "user", "content": "hi", "name": "Ti\nm"}, "InvalidContent", "name"),
        ("u1", "s1", {"role": "user", "content": "hi", "name": "Dr: T"}, "InvalidContent", "':'"),
        ("u1", "s1", {"role": "user", "content": "hi", "name": 42}, "ValidationError", "body.name"),
        (
            "u1",
            "s1",
            {"role": "user", "content": "hi", "ts": "2025-03-01T10:00:00"},
            "ValidationError",
            "timezone",
        ),
    ],
)
async def test_bad_input_is_422_and_writes_nothing(
    api: tuple[httpx.AsyncClient, AsyncMemory],
    user: str,
    session: str,
    body: dict[str, Any],
    error: str,
    says: str,
) -> None:
    client, mem = api
    r = await client.post(session_url(user, session, "messages"), json=body)
    assert r.status_code == 422
    assert r.json()["error"] == error and says in r.json()["detail"]
    assert await our_keys(mem) == []


async def test_oversized_content_is_422(
    embedded_api: tuple[httpx.AsyncClient, AsyncMemory],
) -> None:
    client, mem = embedded_api
    r = await client.post(
        session_url("u1", "s1", "messages"), json={"role": "user", "content": "界" * 30000}
    )
    assert r.status_code == 422 and "90000 bytes" in r.json()["detail"]
    assert await our_keys(mem) == []


async def test_another_users_session_of_the_same_id_is_their_own(
    service_api: tuple[httpx.AsyncClient, AsyncMemory],
) -> None:
    client, _ = service_api
    alice, bob, session = new_id("alice"), new_id("bob"), new_id("s")
    await say(client, alice, session, "my launch code is zebra-77")
    await client.post("/v1/admin/drain")
    attempts = [
        ("GET", "messages", None),
        ("GET", "state", None),
        ("POST", "context", {"query": "what is my launch code?"}),
    ]
    for method, tail, body in attempts:
        r = await client.request(method, session_url(bob, session, tail), json=body)
        assert r.status_code == 200, (method, tail, r.text)
        assert "zebra" not in json.dumps(r.json(), ensure_ascii=False)
    r = await client.post(
        session_url(bob, session, "messages"), json={"role": "user", "content": "x"}
    )
    assert r.status_code == 201
    window = (await client.get(session_url(alice, session, "messages"))).json()["messages"]
    assert [m["content"] for m in window] == ["my launch code is zebra-77"]


async def test_not_found_is_404(embedded_api: tuple[httpx.AsyncClient, AsyncMemory]) -> None:
    client, _ = embedded_api
    r = await client.delete("/v1/knowledge/documents/nope")
    assert r.status_code == 404 and r.json()["error"] == "NotFound" and "nope" in r.json()["detail"]
    r = await client.get("/v1/no/such/route")
    assert r.status_code == 404 and r.json() == {"error": "NotFound", "detail": "Not Found"}


async def test_redis_down_is_503_on_healthz_and_writes(
    service_api: tuple[httpx.AsyncClient, AsyncMemory],
) -> None:
    client, mem = service_api
    healthy = await client.get("/healthz")
    assert healthy.status_code == 200
    assert healthy.json()["status"] == "ok"
    assert set(healthy.json()["stores"]) == {"redis", "database", "vectors"}

    live = mem.working
    dead = Redis.from_url(DEAD_REDIS, socket_connect_timeout=0.2, socket_timeout=0.2)
    mem.working = WorkingMemory(dead, mem.settings)
    try:
        down = await client.get("/healthz")
        assert down.status_code == 503
        stores = down.json()["stores"]
        # Named by its layer, never by its address.
        assert stores["redis"] == {"ok": False, "detail": "unavailable (ConnectionError)"}
        assert "127.0.0.1" not in down.text
        assert stores["database"]["ok"] and stores["vectors"]["ok"]
        r = await client.post(
            session_url(new_id("u"), new_id("s"), "messages"), json={"role": "user", "content": "x"}
        )
        assert r.status_code == 503 and r.json()["error"] == "StoreUnavailable"
    finally:
        mem.working = live
        await dead.aclose()
    assert (await client.get("/healthz")).status_code == 200


async def test_database_down_is_503(service_api: tuple[httpx.AsyncClient, AsyncMemory]) -> None:
    client, mem = service_api
    live_engine, live_sessions = mem.engine, mem.db_sessions
    dead = create_async_engine(
        "postgresql+psycopg://postgres@127.0.0.1:1/none", connect_args={"connect_timeout": 1}
    )
    mem.engine, mem.db_sessions = dead, async_sessionmaker(dead)
    try:
        down = await client.get("/healthz")
        assert down.status_code == 503
        assert down.json()["stores"]["database"]["ok"] is False
        assert down.json()["stores"]["redis"]["ok"] is True
        assert "127.0.0.1" not in down.text and "none" not in down.text
        # 503 naming the layer, without the driver's text (it can carry connection
        # parameters).
        r = await client.get(f"/v1/users/{new_id('u')}/facts")
        assert r.status_code == 503
        assert r.json() == {"error": "StoreUnavailable", "detail": "database unavailable"}
    finally:
        mem.engine, mem.db_sessions = live_engine, live_sessions
        await dead.dispose()


async def test_other_errors_are_500_with_a_clear_body_and_no_trace(
    embedded_api: tuple[httpx.AsyncClient, AsyncMemory], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, mem = embedded_api

    async def schema_mismatch(user_id: str) -> list[object]:
        raise SchemaMismatch(
            "database schema is behind: run `memstack db upgrade`", layer="database"
        )

    monkeypatch.setattr(mem, "facts", schema_mismatch)
    r = await client.get("/v1/users/u1/facts")
    assert r.status_code == 500
    assert r.json() == {
        "error": "SchemaMismatch",
        "detail": "database schema is behind: run `memstack db upgrade`",
    }

    async def bug(user_id: str) -> list[object]:
        raise RuntimeError("secret internals at 0xdeadbeef")

    monkeypatch.setattr(mem, "facts", bug)
    r = await client.get("/v1/users/u1/facts")
    assert r.status_code == 500 and r.json()["error"] == "InternalError"
    assert "deadbeef" not in r.text and "Traceback" not in r.text


# --- auth ---------------------------------------------------------------------------------------


async def test_bearer_token_is_enforced_when_set(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, api_token=TOKEN)
    async with serve(settings) as (client, mem):
        url = session_url("u1", "s1", "messages")
        msg = {"role": "user", "content": "hi"}
        missing = await client.post(url, json=msg)
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"] == "Bearer"
        assert missing.json()["error"] == "Unauthorized"
        wrong = await client.post(url, json=msg, headers={"Authorization": f"Bearer {TOKEN}x"})
        assert wrong.status_code == 401
        basic = await client.post(url, json=msg, headers={"Authorization": f"Basic {TOKEN}"})
        assert basic.status_code == 401
        assert await our_keys(mem) == []
        ok = await client.post(url, json=msg, headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 201
        # Probes and scrapers carry no token and see no user data.
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/metrics")).status_code == 200


async def test_without_a_token_no_auth_is_asked(
    embedded_api: tuple[httpx.AsyncClient, AsyncMemory],
) -> None:
    client, _ = embedded_api
    r = await client.post(
        session_url("u1", "s1", "messages"), json={"role": "user", "content": "hi"}
    )
    assert r.status_code == 201


def test_a_short_token_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="MEMSTACK_API_TOKEN"):
        make_settings(tmp_path, api_token="short")


# --- isolation and erasure ------------------------------------------------------------------


async def test_users_never_see_each_other(
    service_api: tuple[httpx.AsyncClient, AsyncMemory],
) -> None:
    client, _ = service_api
    alice, bob = new_id("alice"), new_id("bob")
    alice_ids = await say(client, alice, new_id("s"), "我预算不超过五千。", "好的。")
    bob_ids = await say(client, bob, new_id("s"), "I live in Lisbon and I like jazz.", "Noted.")
    await client.post("/v1/admin/drain")

    bob_facts = (await client.get(f"/v1/users/{bob}/facts")).json()["facts"]
    assert bob_facts and {f["user_id"] for f in bob_facts} == {bob}
    assert "budget_limit" not in {f["key"] for f in bob_facts}

    r = await client.post(session_url(bob, new_id("s"), "context"), json={"query": "我预算多少？"})
    bob_context = r.json()
    assert "五千" not in bob_context["text"] and "5000" not in bob_context["text"]
    considered = {i for m in bob_context["manifest"] for i in m["msg_ids"]}
    assert considered and considered <= set(bob_ids)
    assert not considered & set(alice_ids)

    r = await client.post(
        session_url(alice, new_id("s"), "context"), json={"query": "Where do I live?"}
    )
    assert "Lisbon" not in r.json()["text"]


async def test_forget_user_erases_every_layer(
    any_settings: Settings,
) -> None:
    async with serve(any_settings) as (client, _):
        alice, bob, session = new_id("alice"), new_id("bob"), new_id("s")
        await say(client, alice, session, "我预算不超过五千。")
        await say(client, bob, new_id("s"), "我预算不超过三千。")
        await client.post("/v1/admin/drain")
        r = await client.delete(f"/v1/users/{alice}")
        assert r.status_code == 200
        deleted = r.json()["deleted"]
        assert deleted["messages"] == 1 and deleted["facts"] == 1 and deleted["redis_keys"] >= 2
        assert (await client.get(f"/v1/users/{alice}/facts")).json()["facts"] == []
        assert (await client.get(session_url(alice, session, "messages"))).json()["messages"] == []
        r = await client.post(session_url(alice, new_id("s"), "context"), json={"query": "预算"})
        assert "五千" not in r.json()["text"] and "5000" not in r.json()["text"]
        # Bob keeps his.
        bob_facts = (await client.get(f"/v1/users/{bob}/facts")).json()["facts"]
        assert [f["value"]["amount"] for f in bob_facts] == [3000]


# --- knowledge base -------------------------------------------------------------------------


async def test_knowledge_documents_and_search(
    embedded_api: tuple[httpx.AsyncClient, AsyncMemory],
) -> None:
    client, _ = embedded_api
    docs = [
        {"doc_id": "returns", "text": "# Returns\n\nLaptops can be returned within 30 days."},
        {"doc_id": "warranty", "text": "# Warranty\n\nEvery laptop has a two-year warranty."},
    ]
    r = await client.post("/v1/knowledge/documents", json={"documents": docs})
    assert r.status_code == 201
    assert [(x["doc_id"], x["status"]) for x in r.json()["results"]] == [
        ("returns", "added"),
        ("warranty", "added"),
    ]
    listed = (await client.get("/v1/knowledge/documents")).json()["documents"]
    assert {d["doc_id"] for d in listed} == {"returns", "warranty"}
    assert (await client.get("/v1/knowledge/documents", params={"namespace": "other"})).json() == {
        "documents": []
    }

    hits = (
        await client.post(
            "/v1/knowledge/search",
            json={"query": "Laptops can be returned within 30 days", "top_k": 2},
        )
    ).json()["hits"]
    assert hits[0]["doc_id"] == "returns" and "30 days" in hits[0]["text"]
    assert hits[0]["score"] >= hits[-1]["score"]

    empty = await client.post("/v1/knowledge/search", json={"query": " "})
    assert empty.status_code == 422 and empty.json()["error"] == "ValidationError"
    removed = await client.delete("/v1/knowledge/documents/returns")
    assert removed.status_code == 200 and removed.json()["doc_id"] == "returns"
    listed = (await client.get("/v1/knowledge/documents")).json()["documents"]
    assert [d["doc_id"] for d in listed] == ["warranty"]


# --- metrics ------------------------------------------------------------------------------------


async def test_metrics_expose_memstack_names_without_user_ids(
    embedded_api: tuple[httpx.AsyncClient, AsyncMemory],
) -> None:
    client, _ = embedded_api
    user = new_id("u")
    await say(client, user, "s1", "hello there")
    await client.post(session_url(user, "s1", "context"), json={"query": "hello"})
    r = await client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    for name in (
        "memstack_context_seconds_bucket",
        "memstack_window_rebuilds_total",
        "memstack_http_requests_total",
    ):
        assert name in text
    route = "/v1/users/{user_id}/sessions/{session_id}/context"
    assert f'memstack_http_requests_total{{method="POST",route="{route}",status="200"}}' in text
    assert user not in text


# --- the command ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_memstack_serve_answers_over_tcp(tmp_path: Path) -> None:
    port = _free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "MEMSTACK_HOME": str(tmp_path / "home"),
        "MEMSTACK_EMBEDDER": "hashing",
    }
    memstack = Path(sys.executable).parent / "memstack"
    proc = subprocess.Popen(
        [str(memstack), "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
                assert time.monotonic() < deadline, "memstack serve did not start"
                time.sleep(0.2)
        assert r.status_code == 200 and r.json()["status"] == "ok"
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/users/u1/sessions/s1/messages",
            json={"role": "user", "content": "hi"},
        )
        assert r.status_code == 201
    finally:
        proc.terminate()
        proc.wait(timeout=30)
