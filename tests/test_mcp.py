"""The MCP server, driven through the SDK's own client: in-process, over the JSON-RPC
in-memory transport, and as the ``memstack mcp`` process over stdio."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult, TextContent
from redis.asyncio import Redis

from memstack.core.settings import Settings
from memstack.memory import AsyncMemory
from memstack.server.mcp import create_server
from memstack.stores.redis.keys import Keys
from tests.conftest import new_id
from tests.test_fact_time import NOT_ANYMORE, VEGETARIAN, Scripted

TOOLS = {
    "remember",
    "remember_many",
    "recall_context",
    "facts",
    "list_users",
    "list_sessions",
    "read_messages",
    "get_message",
    "delete_message",
    "forget_user",
    "search_memory",
    "set_fact",
    "delete_fact",
    "forget_session",
    "knowledge_search",
    "candidates",
    "confirm_candidate",
    "reject_candidate",
    "identity",
    "set_identity",
}


@asynccontextmanager
async def connect(
    settings: Settings, *, inline_ingest: bool | None = None, mode: str = "auto"
) -> AsyncIterator[Client]:
    server = create_server(settings, inline_ingest=inline_ingest)
    async with Client(server, mode=mode) as client:
        yield client


def text_of(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


async def call(client: Client, tool: str, **arguments: Any) -> CallToolResult:
    return await client.call_tool(tool, arguments)


async def ok(client: Client, tool: str, **arguments: Any) -> Any:
    """The structured result of a call that must succeed."""
    result = await call(client, tool, **arguments)
    assert not result.is_error, text_of(result)
    return result.structured_content


async def tell(client: Client, user: str, session: str, *lines: str) -> None:
    for i, line in enumerate(lines):
        role = "user" if i % 2 == 0 else "assistant"
        await ok(client, "remember", user_id=user, session_id=session, role=role, content=line)


async def test_tools_and_their_hints(embedded_settings: Settings) -> None:
    async with connect(embedded_settings) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    assert tools["forget_user"].annotations and tools["forget_user"].annotations.destructive_hint
    assert tools["facts"].annotations and tools["facts"].annotations.read_only_hint
    schema = tools["remember"].input_schema
    assert set(schema["required"]) == {"user_id", "session_id", "role", "content"}
    # The SDK's Context must never leak into the schema as a tool argument.
    assert "ctx" not in schema["properties"]
    assert "ctx" not in tools["recall_context"].input_schema["properties"]


async def test_remember_then_recall_shows_the_changed_fact(any_settings: Settings) -> None:
    user, session = new_id("u"), new_id("s")
    # With a Redis server a worker would ingest; here the server drains before reads.
    async with connect(any_settings, inline_ingest=True) as client:
        await tell(
            client,
            user,
            session,
            "我想买一台轻薄笔记本，我预算不超过五千。",
            "好的，五千以内。",
            "其实我可以到八千，性能也想好一点。",
        )
        result = await call(
            client, "recall_context", user_id=user, session_id=new_id("s"), query="我预算多少？"
        )
        assert not result.is_error
        text = text_of(result)
        facts = await ok(client, "facts", user_id=user)
    assert "8000" in text and "我预算多少？" in text
    budget = {f["key"]: f for f in facts["facts"]}["budget_limit"]
    assert budget["value"] == {"amount": 8000, "currency": "CNY"}
    assert budget["source"] == "user_stated" and budget["user_id"] == user


async def test_remember_returns_the_scoped_id_and_is_idempotent(
    embedded_settings: Settings,
) -> None:
    user, session = new_id("u"), new_id("s")
    async with connect(embedded_settings) as client:
        line = "my bike is a red Brompton"
        args = {"user_id": user, "session_id": session, "role": "user", "content": line}
        first = await ok(client, "remember", **args, msg_id="turn-1")
        second = await ok(client, "remember", **args, msg_id="turn-1")
        context = text_of(
            await call(client, "recall_context", user_id=user, session_id=session, query="hello")
        )
    assert first == second == {"msg_id": f"{user}/{session}:turn-1"}
    assert context.count(line) == 1


async def test_remember_takes_an_author_name(service_settings: Settings) -> None:
    user, session = new_id("u"), new_id("s")
    args = {"user_id": user, "session_id": session, "role": "user"}
    async with connect(service_settings) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        await ok(client, "remember", **args, content="I'm in Lisbon", name="Tim")
        await ok(client, "remember", **args, content="Me too")
        bad = await call(client, "remember", **args, content="x", name="Tim: Jo")
    assert "name" in tools["remember"].input_schema["properties"]
    assert "name" not in tools["remember"].input_schema["required"]
    assert bad.is_error and "InvalidContent" in text_of(bad) and "name" in text_of(bad)
    async with await AsyncMemory.open(service_settings) as mem:
        window = await mem.window(user, session)
        await mem.working.redis.delete(
            mem.working.keys.window(user, session),
            mem.working.keys.state(user, session),
            mem.working.keys.ingest_stream(),
        )
    assert [(m.content, m.name) for m in window] == [("I'm in Lisbon", "Tim"), ("Me too", None)]


async def test_facts_as_of_an_earlier_moment(
    any_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The extractor is scripted: the fact store's time, not the rules, is the subject.
    monkeypatch.setattr("memstack.wiring.build_extractor", lambda _settings: Scripted())
    user, session = new_id("u"), new_id("s")
    args = {"user_id": user, "session_id": session, "role": "user"}
    async with connect(any_settings, inline_ingest=True) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        await ok(client, "remember", **args, content=VEGETARIAN)
        await asyncio.sleep(0.02)
        between = datetime.now(UTC).astimezone(timezone(timedelta(hours=-5)))
        await asyncio.sleep(0.02)
        withdrew = (await ok(client, "remember", **args, content=NOT_ANYMORE))["msg_id"]
        now = await ok(client, "facts", user_id=user)
        then = await ok(client, "facts", user_id=user, as_of=between.isoformat())
        before = await ok(client, "facts", user_id=user, as_of="2000-01-01T00:00:00Z")
        naive = await call(client, "facts", user_id=user, as_of="2026-11-01T10:00:00")
    assert now["facts"] == [] and before["facts"] == []
    [diet] = then["facts"]
    assert diet["value"] == "vegetarian" and diet["ended_by_msg_id"] == withdrew
    assert naive.is_error and "as_of" in text_of(naive)
    schema = tools["facts"].input_schema
    assert "as_of" in schema["properties"] and schema["required"] == ["user_id"]


async def test_errors_reach_the_model_by_name_and_write_nothing(
    embedded_settings: Settings,
) -> None:
    alice, bob, session = new_id("alice"), new_id("bob"), new_id("s")
    async with connect(embedded_settings) as client:
        bad = await call(
            client, "remember", user_id="bad id", session_id=session, role="user", content="x"
        )
        assert bad.is_error and "InvalidId" in text_of(bad) and "user_id" in text_of(bad)
        empty = await call(
            client, "remember", user_id=alice, session_id=session, role="user", content=" "
        )
        assert empty.is_error and "InvalidContent" in text_of(empty)
        # Nothing was written; bob's session of the same id is his alone.
        await tell(client, bob, session, "mine is zebra-77")
        peek = await call(client, "recall_context", user_id=alice, session_id=session, query="q")
        assert not peek.is_error and "zebra" not in text_of(peek)
        missing = await call(client, "remember", user_id=alice, session_id=session)
        assert missing.is_error and "content" in text_of(missing)


async def test_users_are_isolated_and_forget_user_erases(service_settings: Settings) -> None:
    alice, bob = new_id("alice"), new_id("bob")
    async with connect(service_settings, inline_ingest=True) as client:
        await tell(client, alice, new_id("s"), "我预算不超过五千。", "好的。")
        await tell(client, bob, new_id("s"), "I live in Lisbon and I like jazz.")
        bob_text = text_of(
            await call(
                client, "recall_context", user_id=bob, session_id=new_id("s"), query="我预算多少？"
            )
        )
        assert "五千" not in bob_text and "5000" not in bob_text
        bob_facts = (await ok(client, "facts", user_id=bob))["facts"]
        assert bob_facts and {f["user_id"] for f in bob_facts} == {bob}

        deleted = (await ok(client, "forget_user", user_id=alice))["deleted"]
        assert deleted["messages"] == 2 and deleted["facts"] == 1
        assert (await ok(client, "facts", user_id=alice))["facts"] == []
        alice_text = text_of(
            await call(
                client, "recall_context", user_id=alice, session_id=new_id("s"), query="预算"
            )
        )
        assert "五千" not in alice_text
        assert (await ok(client, "facts", user_id=bob))["facts"] == bob_facts


async def test_with_a_redis_server_reads_leave_ingest_to_the_worker(
    service_settings: Settings,
) -> None:
    user = new_id("u")
    async with connect(service_settings) as client:
        await tell(client, user, new_id("s"), "我预算不超过五千。")
        assert (await ok(client, "facts", user_id=user))["facts"] == []
    redis = Redis.from_url(service_settings.redis_url or "")
    try:
        stream = Keys(service_settings.key_prefix).ingest_stream()
        assert await redis.xlen(stream) == 1  # the job waits for `memstack worker`
        await redis.delete(stream)
    finally:
        await redis.aclose()


async def test_knowledge_search(embedded_settings: Settings) -> None:
    from memstack.knowledge.base import Document

    # The embedded knowledge base allows one process-local client at a time: fill it first.
    async with await AsyncMemory.open(embedded_settings) as mem:
        await mem.kb_add(
            Document("# Returns\n\nLaptops can be returned within 30 days.", doc_id="returns"),
            Document("# Warranty\n\nEvery laptop has a two-year warranty.", doc_id="warranty"),
        )
    async with connect(embedded_settings) as client:
        found = await ok(
            client, "knowledge_search", query="Laptops can be returned within 30 days", top_k=2
        )
        elsewhere = await ok(client, "knowledge_search", query="returned", namespace="other")
        blank = await call(client, "knowledge_search", query=" ")
    assert found["hits"][0]["doc_id"] == "returns" and "30 days" in found["hits"][0]["text"]
    assert elsewhere == {"hits": []}
    assert blank.is_error and "ValidationError" in text_of(blank)


async def test_legacy_json_rpc_transport(embedded_settings: Settings) -> None:
    # The initialize handshake and JSON framing that pre-2026 clients speak.
    user = new_id("u")
    async with connect(embedded_settings, mode="legacy") as client:
        await tell(client, user, "s1", "I live in Lisbon.")
        facts = await ok(client, "facts", user_id=user)
    assert {f["key"]: f["value"] for f in facts["facts"]}.get("city") == "Lisbon"


@pytest.mark.slow
async def test_memstack_mcp_over_stdio(tmp_path: Path) -> None:
    memstack = Path(sys.executable).parent / "memstack"
    params = StdioServerParameters(
        command=str(memstack),
        args=["mcp"],
        env={"MEMSTACK_HOME": str(tmp_path / "home"), "MEMSTACK_EMBEDDER": "hashing"},
        cwd=tmp_path,
    )
    user = new_id("u")
    async with Client(params) as client:
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        await tell(client, user, "s1", "我预算不超过五千。", "好的。", "其实我可以到八千。")
        text = text_of(
            await call(client, "recall_context", user_id=user, session_id="s2", query="预算多少？")
        )
    assert "8000" in text


async def test_sessions_and_messages_read_back_what_was_said(any_settings: Settings) -> None:
    user, session = new_id("u"), new_id("s")
    async with connect(any_settings, inline_ingest=True) as client:
        await tell(client, user, session, "I moved to Lisbon.", "Noted.", "I ride a bike.")
        listed = await ok(client, "list_sessions", user_id=user)
        assert [(s["session_id"], s["messages"]) for s in listed["sessions"]] == [(session, 3)]
        page = await ok(client, "read_messages", user_id=user, session_id=session, limit=2)
        assert [m["content"] for m in page["messages"]] == ["I moved to Lisbon.", "Noted."]
        assert page["next_offset"] == 2
        bad = await call(client, "read_messages", user_id=user, session_id=session, limit=0)
        assert bad.is_error


async def test_one_message_read_and_deleted_and_the_users_listed(any_settings: Settings) -> None:
    user, other, session = new_id("u"), new_id("u"), new_id("s")
    async with connect(any_settings, inline_ingest=True) as client:
        await tell(client, user, session, "I moved to Lisbon.", "Noted.")
        await tell(client, other, session, "I live in Oslo.")
        [first, _] = (await ok(client, "read_messages", user_id=user, session_id=session))[
            "messages"
        ]
        got = await ok(client, "get_message", user_id=user, msg_id=first["msg_id"])
        assert (got["content"], got["session_id"]) == ("I moved to Lisbon.", session)
        # Another user's id for the same message is not found, never shown.
        assert (await call(client, "get_message", user_id=other, msg_id=first["msg_id"])).is_error
        assert (await call(client, "get_message", user_id=user, msg_id="no/such:id")).is_error
        deleted = await ok(client, "delete_message", user_id=user, msg_id=first["msg_id"])
        assert deleted["deleted"]["messages"] == 1
        assert (await call(client, "get_message", user_id=user, msg_id=first["msg_id"])).is_error
        page = await ok(client, "read_messages", user_id=user, session_id=session)
        assert [m["content"] for m in page["messages"]] == ["Noted."]
        # The run's database holds every test's users: read every page.
        users: dict[str, Any] = {}
        while not users or len(users) % 100 == 0:
            found = (await ok(client, "list_users", offset=len(users)))["users"]
            if not found:
                break
            users.update((u["user_id"], u) for u in found)
        assert users[user]["messages"] == 1 and users[other]["messages"] == 1
        assert (await call(client, "list_users", limit=0)).is_error
