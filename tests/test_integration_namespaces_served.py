"""Integration namespaces through the entry points: the HTTP API's context route and the
MCP ``recall_context`` tool leave a LangGraph store item out unless asked for
``langgraph``, then show it as text; a user never sees another user's items, and an
unknown namespace is refused before anything is read or written."""

from __future__ import annotations

from typing import get_args

import pytest

pytest.importorskip("langgraph.store.base")

from mcp import Client

from memstack import AsyncMemory, Settings
from memstack.core.namespaces import NAMESPACES
from memstack.integrations.langgraph import MemstackStore
from memstack.server.mcp import create_server
from memstack.server.schemas import IntegrationNamespace
from tests.conftest import new_id
from tests.test_api import our_keys, say, serve, session_url
from tests.test_mcp import call, text_of

ITEM = {"text": "prefers oolong tea brewed twice"}
SAID = "prefers oolong tea brewed twice"
QUESTION = "which tea do I prefer, oolong?"


def test_the_wire_names_are_the_librarys() -> None:
    assert set(get_args(IntegrationNamespace)) == NAMESPACES


async def test_the_context_route_recalls_a_namespace_only_when_asked(
    any_settings: Settings,
) -> None:
    user, other = new_id("u"), new_id("u")
    async with serve(any_settings) as (client, mem):
        await MemstackStore(mem).aput((user, "prefs"), "tea", ITEM)
        await say(client, user, "chat", "Good morning, what should I drink?", "Something warm.")
        await say(client, other, "chat", "I like tea")
        assert (await client.post("/v1/admin/drain")).status_code == 200
        url = session_url(user, "chat", "context")

        plain = (await client.post(url, json={"query": QUESTION})).json()
        assert SAID not in plain["text"]
        assert all(SAID not in item["preview"] for item in plain["manifest"])
        r = await client.post(url, json={"query": QUESTION, "namespaces": ["langgraph"]})
        assert r.status_code == 200, r.text
        assert SAID in r.json()["text"] and '{"text"' not in r.json()["text"]
        # Another user asking for the namespace finds only their own (none).
        r = await client.post(
            session_url(other, "chat", "context"),
            json={"query": QUESTION, "namespaces": ["langgraph"]},
        )
        assert r.status_code == 200 and "brewed twice" not in r.json()["text"]

        before = sorted(await our_keys(mem))
        for wrong in (["nope"], "langgraph", ["langgraph", None]):
            r = await client.post(url, json={"query": QUESTION, "namespaces": wrong})
            assert r.status_code == 422, r.text
            assert r.json()["error"] == "ValidationError"
            assert "namespaces" in r.json()["detail"]
        r = await client.post(url, json={"query": QUESTION, "namespaces": ["nope"]})
        assert "'langgraph' or 'llama_index'" in r.json()["detail"]
        assert sorted(await our_keys(mem)) == before  # nothing was read into or written

        schema = (await client.get("/openapi.json")).json()["components"]["schemas"]
        field = schema["ContextIn"]["properties"]["namespaces"]
        assert sorted(field["items"]["enum"]) == sorted(NAMESPACES)


async def test_recall_context_recalls_a_namespace_only_when_asked(
    any_settings: Settings,
) -> None:
    user, other = new_id("u"), new_id("u")
    async with await AsyncMemory.open(any_settings) as mem:
        await MemstackStore(mem).aput((user, "prefs"), "tea", ITEM)
        await mem.remember(user, "chat", "user", "Good morning, what should I drink?")
        await mem.remember(other, "chat", "user", "I like tea")
        await mem.drain()
    async with Client(create_server(any_settings)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert "namespaces" not in tools["recall_context"].input_schema.get("required", [])
        args = {"user_id": user, "session_id": "chat", "query": QUESTION}
        assert SAID not in text_of(await call(client, "recall_context", **args))
        asked = await call(client, "recall_context", **args, namespaces=["langgraph"])
        assert not asked.is_error and SAID in text_of(asked) and '{"text"' not in text_of(asked)
        theirs = await call(
            client,
            "recall_context",
            user_id=other,
            session_id="chat",
            query=QUESTION,
            namespaces=["langgraph"],
        )
        assert not theirs.is_error and "brewed twice" not in text_of(theirs)
        wrong = await call(client, "recall_context", **args, namespaces=["nope"])
        assert wrong.is_error and "namespaces" in text_of(wrong)
