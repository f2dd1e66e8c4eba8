"""memstack as LlamaIndex memory (memstack.integrations.llama_index), in real chat engines.

The LLM is LlamaIndex's MockLLM, which needs no network; its ``messages_to_prompt``
hook records every message list the engine sends, so the tests can check what memstack
put in front of the model, not only what it stored. Both store modes run: the real
Redis and PostgreSQL, and the embedded default.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.chat_engine.types import ChatMode
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.memory import Memory as LlamaMemory

from memstack import InvalidContent, InvalidId, Memory, Settings, ValidationError
from memstack.integrations.llama_index import MemstackMemory, MemstackMemoryBlock
from tests.conftest import _cleanup, new_id

BUDGET = "My budget is at most 8000 dollars."
SECRET = "Bob keeps his savings under the blue porcelain elephant."


@pytest.fixture
def mem(any_settings: Settings) -> Iterator[Memory]:
    m = Memory(any_settings)
    yield m
    m._run(_cleanup(m.aio))
    m.close()


Sent = list[list[ChatMessage]]


def recording_llm() -> tuple[MockLLM, Sent]:
    """A MockLLM that answers "text text text" and keeps what each call was sent."""
    sent: Sent = []

    def to_prompt(messages: Sequence[ChatMessage]) -> str:
        sent.append(list(messages))
        return "\n".join(f"{m.role.value}: {m.content}" for m in messages)

    return MockLLM(max_tokens=3, messages_to_prompt=to_prompt), sent


def text_of(messages: Sequence[ChatMessage]) -> str:
    return "\n".join(m.content or "" for m in messages)


def stored(mem: Memory, user: str, session: str) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in mem.messages(user, session)]


def engine_for(
    mem: Memory, user: str, session: str
) -> tuple[SimpleChatEngine, MemstackMemory, Sent]:
    llm, sent = recording_llm()
    memory = MemstackMemory(mem, user_id=user, session_id=session)
    return SimpleChatEngine.from_defaults(llm=llm, memory=memory), memory, sent


def test_chat_turns_land_in_memstack(mem: Memory) -> None:
    user, session = new_id("u"), new_id("s")
    engine, memory, sent = engine_for(mem, user, session)
    questions = ["Hello there.", "I live in Lisbon.", "What should I cook tonight?"]
    for q in questions:
        assert engine.chat(q).response == "text text text"
    expected = [t for q in questions for t in (("user", q), ("assistant", "text text text"))]
    # In the window at once, in the ledger after ingest, and back through the memory.
    assert [(m.role, m.content) for m in mem.window(user, session)] == expected
    mem.drain()
    assert stored(mem, user, session) == expected
    assert [(m.role.value, m.content) for m in memory.get_all()] == expected
    assert [(m.role.value, m.content) for m in engine.chat_history] == expected
    # The LLM got the dialogue so far, ending with the question just asked.
    last = sent[-1]
    assert last[-1].role == MessageRole.USER and last[-1].content == questions[-1]
    assert "I live in Lisbon." in text_of(last)


def test_earlier_session_reaches_the_llm(mem: Memory) -> None:
    user = new_id("u")
    mem.remember(user, "old", "user", BUDGET)
    mem.remember(user, "old", "assistant", "Noted: 8000 dollars at most.")
    mem.drain()
    engine, memory, sent = engine_for(mem, user, new_id("s"))
    engine.chat("How much can I spend, what is my budget?")
    system = [m for m in sent[-1] if m.role == MessageRole.SYSTEM]
    assert len(system) == 1
    assert "8000" in (system[0].content or "")  # the fact, and the recalled history
    assert BUDGET in (system[0].content or "")
    assert sent[-1][-1].content == "How much can I spend, what is my budget?"
    # get(input) as ContextChatEngine calls it: the question is not in memory yet, and
    # the engine appends it itself.
    history = memory.get(input="Remind me of my budget limit?")
    assert history[0].role == MessageRole.SYSTEM and "8000" in (history[0].content or "")
    assert history[-1].role == MessageRole.ASSISTANT
    assert "Remind me" not in text_of(history)


def test_another_user_never_appears(mem: Memory) -> None:
    alice, bob = new_id("alice"), new_id("bob")
    # Same session id for both: a session belongs to its user.
    mem.remember(bob, "s1", "user", SECRET)
    mem.remember(bob, "s1", "user", BUDGET)
    mem.drain()
    engine, memory, sent = engine_for(mem, alice, "s1")
    engine.chat("Where are the savings, under the blue porcelain elephant?")
    engine.chat("What is my budget?")
    everything = [*sent, memory.get(input="porcelain elephant savings budget"), memory.get_all()]
    for messages in everything:
        assert "porcelain elephant under" not in text_of(messages)
        assert SECRET not in text_of(messages) and "8000" not in text_of(messages)
    assert len(memory.get_all()) == 4


def test_bad_input_raises_and_changes_nothing(mem: Memory) -> None:
    user, session = new_id("u"), new_id("s")
    memory = MemstackMemory(mem, user_id=user, session_id=session)
    good = ChatMessage(role="user", content="fine")
    too_big = "x" * (mem.settings.max_message_bytes + 1)
    bad_batches: list[tuple[object, type[Exception]]] = [
        ([good, ChatMessage(role="user", content="   ")], InvalidContent),
        ([good, ChatMessage(role="user", content=too_big)], InvalidContent),
        (
            [good, ChatMessage(role="user", content="hi", additional_kwargs={"name": "a:b"})],
            InvalidContent,
        ),
        ([good, "not a message"], ValidationError),
        ("a string", ValidationError),
    ]
    for batch, error in bad_batches:
        with pytest.raises(error):
            memory.put_messages(batch)  # type: ignore[arg-type]
        with pytest.raises(error):
            memory.set(batch)  # type: ignore[arg-type]
    with pytest.raises(InvalidContent):
        memory.put(ChatMessage(role="tool", content=""))
    with pytest.raises(ValidationError):
        memory.get(input=42)  # type: ignore[arg-type]
    assert mem.window(user, session) == []
    with pytest.raises(InvalidId):
        MemstackMemory(mem, user_id="not ok!", session_id=session)
    with pytest.raises(TypeError, match=r"memstack\.Memory"):
        MemstackMemory(mem.aio, user_id=user, session_id=session)  # type: ignore[arg-type]
    # A chat whose message is refused writes nothing either.
    engine, _, _ = engine_for(mem, user, session)
    with pytest.raises(InvalidContent):
        engine.chat(" ")
    assert mem.window(user, session) == []


def test_roles_names_and_tool_turns(mem: Memory) -> None:
    user, session = new_id("u"), new_id("s")
    memory = MemstackMemory(mem, user_id=user, session_id=session)
    memory.put_messages(
        [
            ChatMessage(role="developer", content="Answer briefly."),
            ChatMessage(role="user", content="Weather?", additional_kwargs={"name": "Tim"}),
            ChatMessage(role="assistant", content=None),  # only a tool call: nothing to keep
            ChatMessage(role="tool", content="Sunny, 24C."),
            ChatMessage(role="chatbot", content="It is sunny."),
        ]
    )
    window = mem.window(user, session)
    assert [(m.role, m.content, m.name) for m in window] == [
        ("system", "Answer briefly.", None),
        ("user", "Weather?", "Tim"),
        ("tool", "Sunny, 24C.", None),
        ("assistant", "It is sunny.", None),
    ]
    assert memory.get_all()[1].additional_kwargs == {"name": "Tim"}
    assert memory.get_all()[2].role == MessageRole.TOOL
    # For the LLM a tool result without its call id goes as a labelled assistant turn,
    # with or without a question to recall for.
    assert [m.role.value for m in memory.get()] == ["system", "user", "assistant", "assistant"]
    assert memory.get()[2].content == "[tool] Sunny, 24C."
    for_llm = memory.get(input="And tomorrow?")
    assert all(m.role != MessageRole.TOOL for m in for_llm)
    assert "[tool] Sunny, 24C." in text_of(for_llm)


def test_history_beyond_the_recent_window(mem: Memory) -> None:
    """get_all() is the whole session, before and after ingest, though context() shows
    only the recent turns."""
    user, session = new_id("u"), new_id("s")
    memory = MemstackMemory(mem, user_id=user, session_id=session)
    turns = [f"Message number {i}." for i in range(mem.settings.recent_window_read + 5)]
    memory.put_messages([ChatMessage(role="user", content=t) for t in turns])
    assert [m.content for m in memory.get_all()] == turns
    mem.drain()
    memory.put(ChatMessage(role="user", content="One more."))
    assert [m.content for m in memory.get_all()] == [*turns, "One more."]
    # A question already put comes back once, last; one not yet put is left to the engine.
    assert [m.content for m in memory.get(input="One more.")][-2:] == [turns[-1], "One more."]
    assert memory.get(input="Something else?")[-1].content == "One more."


def test_set_appends_to_its_own_history_or_replaces(mem: Memory) -> None:
    user, session = new_id("u"), new_id("s")
    engine, memory, _ = engine_for(mem, user, session)
    engine.chat("First question.")
    history = engine.chat_history
    # The usual call: the engine's own history passed back; nothing is recorded twice.
    engine.chat("Second question.", chat_history=history)
    assert [m.content for m in mem.window(user, session)] == [
        "First question.",
        "text text text",
        "Second question.",
        "text text text",
    ]
    memory.set([ChatMessage(role="user", content="Another story.")])
    assert [(m.role, m.content) for m in mem.window(user, session)] == [("user", "Another story.")]
    mem.drain()
    assert stored(mem, user, session) == [("user", "Another story.")]


def test_reset_erases_the_session(mem: Memory) -> None:
    user, session = new_id("u"), new_id("s")
    engine, memory, _ = engine_for(mem, user, session)
    engine.chat(BUDGET)
    mem.drain()
    assert mem.facts(user)  # the budget, extracted by the rules
    engine.reset()
    assert memory.get_all() == [] and mem.window(user, session) == []
    assert mem.messages(user, session) == []
    recalled = MemstackMemory(mem, user_id=user, session_id=new_id("s")).get(input="budget?")
    assert BUDGET not in text_of(recalled)
    assert [f.key for f in mem.facts(user)] == ["budget_limit"]  # facts are the user's


async def test_async_chat(mem: Memory) -> None:
    user = new_id("u")
    mem.remember(user, "old", "user", BUDGET)
    mem.drain()
    engine, memory, sent = engine_for(mem, user, new_id("s"))
    response = await engine.achat("What was my budget?")
    assert response.response == "text text text"
    assert "8000" in text_of(sent[-1])
    assert [m.content for m in await memory.aget_all()] == ["What was my budget?", "text text text"]
    await memory.aput(ChatMessage(role="user", content="Thanks."))
    assert (await memory.aget())[-1].content == "Thanks."


def test_context_chat_engine(mem: Memory) -> None:
    """The engine that passes ``get(input=...)`` and puts the turn afterwards."""
    user = new_id("u")
    mem.remember(user, "old", "user", BUDGET)
    mem.drain()
    index = VectorStoreIndex.from_documents(
        [Document(text="Lisbon trams run every ten minutes.")],
        embed_model=MockEmbedding(embed_dim=8),
    )
    llm, sent = recording_llm()
    session = new_id("s")
    memory = MemstackMemory(mem, user_id=user, session_id=session)
    engine = index.as_chat_engine(chat_mode=ChatMode.CONTEXT, llm=llm, memory=memory)
    engine.chat("Can I afford a tram pass with my budget?")
    engine.chat("And how often do trams run?")
    prompt = text_of(sent[-1])
    assert "8000" in prompt and "ten minutes" in prompt
    assert prompt.count("Can I afford a tram pass") == 1  # the earlier turn, once
    assert [m.role for m in mem.window(user, session)] == ["user", "assistant"] * 2


async def test_memory_block(mem: Memory) -> None:
    """LlamaIndex's own Memory, with memstack as the block its old turns flow into."""
    user, session = new_id("u"), new_id("s")
    mem.remember(user, "old", "user", BUDGET)
    mem.drain()
    block = MemstackMemoryBlock(mem, user_id=user, session_id=session)
    memory = LlamaMemory.from_defaults(
        session_id=session, token_limit=60, token_flush_size=20, memory_blocks=[block]
    )
    for i in range(8):
        await memory.aput(ChatMessage(role="user", content=f"Turn {i}: tell me about trams."))
        await memory.aput(ChatMessage(role="assistant", content=f"Answer {i} about trams."))
    # Every turn the Memory evicted is in memstack, in order; the newest stay with it.
    evicted = [m.content for m in mem.window(user, session, mem.settings.window_max_messages)]
    kept = [m.content for m in await memory.aget_all()]
    assert evicted and evicted[0] == "Turn 0: tell me about trams."
    assert evicted + kept[len(evicted) :] == kept
    messages = await memory.aget(input="What is my budget?")
    system = messages[0]
    assert system.role == MessageRole.SYSTEM and "8000" in (system.content or "")
    with pytest.raises(TypeError):
        MemstackMemoryBlock(mem.aio, user_id=user, session_id=session)  # type: ignore[arg-type]
    assert await block.aget([]) == ""
