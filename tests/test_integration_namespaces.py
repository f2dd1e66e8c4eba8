"""Memory an integration keeps (LangGraph store items, LlamaIndex chat turns) lives in a
namespace of its own: the user's ``context()`` leaves it out unless asked, and shows a
stored value as text when asked; search, erasure and other users are as before."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("langgraph.store.base")
pytest.importorskip("llama_index.core")

from llama_index.core.base.llms.types import ChatMessage

from memstack import Memory, Settings, ValidationError
from memstack.integrations.langgraph import MemstackStore
from memstack.integrations.llama_index import MemstackMemory
from tests.conftest import _cleanup, new_id

ITEM = {"text": "prefers oolong tea brewed twice"}
QUESTION = "which tea do I prefer, oolong?"


@pytest.fixture
def mem(any_settings: Settings) -> Iterator[Memory]:
    m = Memory(any_settings)
    yield m
    m._run(_cleanup(m.aio))
    m.close()


def _with_store_item(mem: Memory) -> str:
    user = new_id("u")
    MemstackStore(mem).put((user, "prefs"), "tea", ITEM)
    mem.remember(user, "chat", "user", "Good morning, what should I drink today?")
    mem.remember(user, "chat", "assistant", "Something warm, perhaps.")
    mem.drain(summarize=False)
    return user


def test_store_items_stay_out_of_the_users_context(mem: Memory) -> None:
    user = _with_store_item(mem)
    ctx = mem.context(user, "chat", QUESTION)
    assert "oolong tea brewed twice" not in ctx.text
    assert '{"text"' not in ctx.text
    assert all("oolong tea brewed twice" not in i.preview for i in ctx.manifest)
    # search() lists what memory holds, the store's items included (its own search).
    assert mem.search(user, "oolong tea")[0].text == '{"text": "' + ITEM["text"] + '"}'


def test_store_items_reach_context_when_asked_as_text(mem: Memory) -> None:
    user = _with_store_item(mem)
    ctx = mem.context(user, "chat", QUESTION, namespaces=["langgraph"])
    assert "prefers oolong tea brewed twice" in ctx.text
    assert '{"text"' not in ctx.text and "{" not in ctx.sections["history"].text
    # Another user asking for the namespace still sees only their own.
    other = new_id("u")
    mem.remember(other, "chat", "user", "I like tea")
    mem.drain(summarize=False)
    asked = mem.context(other, "chat", QUESTION, namespaces=["langgraph"])
    assert "brewed twice" not in asked.text


def test_erasing_the_user_erases_the_store_items(mem: Memory) -> None:
    user = _with_store_item(mem)
    mem.forget_user(user)
    assert MemstackStore(mem).get((user, "prefs"), "tea") is None
    assert mem.search(user, "oolong tea") == []


def test_llama_index_turns_are_their_own_namespace(mem: Memory) -> None:
    user = new_id("u")
    said = "The spare key hides inside the green watering can."
    MemstackMemory(mem, user_id=user, session_id="li-1").put(ChatMessage(role="user", content=said))
    mem.drain(summarize=False)
    question = "where is the spare key, the watering can?"
    assert said not in mem.context(user, "app", question).text
    assert said in mem.context(user, "app", question, namespaces=["llama_index"]).text
    # The LlamaIndex memory recalls its own earlier sessions.
    recalled = MemstackMemory(mem, user_id=user, session_id="li-2").get(input=question)
    assert any(said in (m.content or "") for m in recalled)


def test_unknown_namespaces_are_refused(mem: Memory) -> None:
    with pytest.raises(ValidationError, match="namespace"):
        mem.context(new_id("u"), "s", "q", namespaces=["nope"])
    with pytest.raises(ValidationError, match="list"):
        mem.context(new_id("u"), "s", "q", namespaces="langgraph")
