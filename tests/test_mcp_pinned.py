"""``memstack mcp --user``: an MCP server pinned to one user. Its tools take no user_id,
reach only that user, and offer no destructive tool unless allowed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import pytest
from mcp import Client, StdioServerParameters
from pydantic import Field

from memstack.core.errors import InvalidId
from memstack.core.settings import Settings
from memstack.memory import AsyncMemory
from memstack.server import mcp as mcp_module
from memstack.server.mcp import (
    ERASING,
    READ_ONLY,
    ToolContext,
    UserId,
    create_server,
    destructive,
)
from tests.conftest import new_id
from tests.test_mcp import TOOLS, call, ok, text_of

# Whatever the table holds: forget_user and any other tool annotated destructive.
DESTRUCTIVE = {tool.__name__ for tool, hints in mcp_module.TOOLS if destructive(hints)}


async def whoami(
    user_id: UserId,
    ctx: ToolContext,
    shout: Annotated[bool, Field(description="Upper case.")] = False,
) -> str:
    """A tool this test adds to the table: which user the server called it for."""
    return user_id.upper() if shout else user_id


async def wipe_everything(user_id: UserId, ctx: ToolContext) -> str:
    """A destructive tool this test adds to the table."""
    return f"wiped {user_id}"


@pytest.fixture
def extra_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tools the pinning code has never seen, as another module would add them."""
    table = (*mcp_module.TOOLS, (whoami, READ_ONLY), (wipe_everything, ERASING))
    monkeypatch.setattr(mcp_module, "TOOLS", table)


async def test_a_pinned_server_shows_no_user_id_and_no_destructive_tool(
    embedded_settings: Settings, extra_tools: None
) -> None:
    server = create_server(embedded_settings, user_id="alice")
    async with Client(server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert "forget_user" in DESTRUCTIVE
        # Nor a tool that reaches every user without naming one.
        assert set(tools) == TOOLS - DESTRUCTIVE - {"list_users"} | {"whoami"}
        for tool in tools.values():
            assert "user_id" not in tool.input_schema["properties"], tool.name
            assert "user_id" not in tool.input_schema.get("required", []), tool.name
            assert "ctx" not in tool.input_schema["properties"], tool.name
        assert set(tools["remember"].input_schema["required"]) == {"session_id", "role", "content"}
        assert tools["whoami"].input_schema["properties"]["shout"]["description"] == "Upper case."
        assert tools["knowledge_search"].input_schema["required"] == ["query"]
        assert "one user only" in (server.instructions or "")
        # A tool it did not see when written, and the model naming another user anyway.
        assert text_of(await call(client, "whoami", shout=True)) == "ALICE"
        assert text_of(await call(client, "whoami", user_id="bob")) == "alice"
        missing = await call(client, "forget_user", user_id="alice")
        assert missing.is_error


async def test_allow_forget_offers_the_destructive_tools_pinned_too(
    embedded_settings: Settings, extra_tools: None
) -> None:
    server = create_server(embedded_settings, user_id="alice", allow_forget=True)
    async with Client(server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert DESTRUCTIVE | {"wipe_everything"} <= set(tools)
        assert "list_users" not in tools
        assert tools["forget_user"].input_schema["properties"] == {}
        assert text_of(await call(client, "wipe_everything", user_id="bob")) == "wiped alice"
    # Unpinned servers keep today's tools; --no-forget leaves the destructive ones out.
    async with Client(create_server(embedded_settings)) as client:
        assert {"forget_user", "wipe_everything"} <= {
            t.name for t in (await client.list_tools()).tools
        }
    async with Client(create_server(embedded_settings, allow_forget=False)) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "forget_user" not in names and "wipe_everything" not in names


async def test_pinned_tools_reach_the_pinned_user_only(any_settings: Settings) -> None:
    alice, bob, session = new_id("al"), new_id("bob"), new_id("s")
    async with await AsyncMemory.open(any_settings) as mem:
        await mem.remember(bob, session, "user", "Bob's secret: I live in Oslo.")
        await mem.drain()
    server = create_server(any_settings, user_id=alice, inline_ingest=True, allow_forget=True)
    async with Client(server) as client:
        said = await ok(
            client, "remember", session_id=session, role="user", content="I live in Lisbon."
        )
        assert said["msg_id"].split("-", 1)[1].startswith(f"{alice}/{session}-")
        # Naming bob changes nothing: the argument is not the tool's.
        await ok(
            client, "remember", user_id=bob, session_id=session, role="user", content="I'm Ann."
        )
        sessions = await ok(client, "list_sessions", user_id=bob)
        assert [s["session_id"] for s in sessions["sessions"]] == [session]
        page = await ok(client, "read_messages", user_id=bob, session_id=session)
        contents = [m["content"] for m in page["messages"]]
        assert contents == ["I live in Lisbon.", "I'm Ann."]
        context = text_of(await call(client, "recall_context", session_id=session, query="Oslo?"))
        assert "Oslo" not in context.replace("Oslo?", "") and "Lisbon" in context
        if "search_memory" in {t.name for t in (await client.list_tools()).tools}:
            hits = await ok(client, "search_memory", user_id=bob, query="Where do I live, Oslo?")
            assert "Oslo" not in str(hits) and "Lisbon" in str(hits)
        facts = await ok(client, "facts")
        assert {f["user_id"] for f in facts["facts"]} == {alice}, facts
        erased = await ok(client, "forget_user", user_id=bob)
        assert erased["deleted"]["messages"] == 2
    async with await AsyncMemory.open(any_settings) as mem:
        assert [m.content for m in await mem.messages(bob, session)] == [
            "Bob's secret: I live in Oslo."
        ]
        assert await mem.messages(alice, session) == []


def test_a_bad_pinned_user_stops_the_start(embedded_settings: Settings) -> None:
    with pytest.raises(InvalidId):
        create_server(embedded_settings, user_id="alice bob")


async def test_memstack_mcp_user_over_stdio(tmp_path: Path) -> None:
    memstack = Path(sys.executable).parent / "memstack"
    params = StdioServerParameters(
        command=str(memstack),
        args=["mcp", "--user", "alice"],
        env={"MEMSTACK_HOME": str(tmp_path / "home"), "MEMSTACK_EMBEDDER": "hashing"},
        cwd=tmp_path,
    )
    async with Client(params) as client:
        tools = (await client.list_tools()).tools
        assert {t.name for t in tools} == TOOLS - DESTRUCTIVE - {"list_users"}
        assert all("user_id" not in t.input_schema["properties"] for t in tools)
        await ok(client, "remember", session_id="s1", role="user", content="I live in Porto.")
        page = await ok(client, "read_messages", session_id="s1")
    assert [m["content"] for m in page["messages"]] == ["I live in Porto."]
