"""LlamaIndex memory backed by memstack: ``pip install 'memstack[llama-index]'``.

Two adapters, for LlamaIndex's two memory interfaces:

* :class:`MemstackMemory` is a ``BaseMemory``, the interface chat engines
  (``SimpleChatEngine``, ``ContextChatEngine``, ``CondensePlusContextChatEngine``) and
  agents take as ``memory=``. memstack *is* the memory: every message the engine puts is
  recorded with ``remember()``, and what the engine gets back for the LLM is memstack's
  assembled context (known facts, related history from this and earlier sessions, the
  recent dialogue), within a token budget.
* :class:`MemstackMemoryBlock` is a block for LlamaIndex's newer ``Memory``: that class
  keeps the short-term chat itself and hands the messages it evicts to its blocks; the
  block records them in memstack and adds memstack's facts and recalled history to the
  system message.

Both record in the ``llama_index`` namespace (:mod:`memstack.core.namespaces`): the
user's own ``context()`` leaves those turns out unless asked; these adapters ask.

Both wrap the synchronous :class:`memstack.Memory` (one ``AsyncMemory`` on a private
loop thread). LlamaIndex calls memory both synchronously (``chat``) and from coroutines
(``achat``); ``Memory`` serves both: the sync methods call it directly, and the async
ones run those calls on a worker thread (``asyncio.to_thread``, BaseMemory's own
default), so the caller's event loop never blocks on a store. An ``AsyncMemory`` alone
could not serve the sync methods: it is bound to the loop it was opened on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from memstack import ContextResult, InvalidContent, Memory, Message, Section, ValidationError
from memstack.core.ids import validate_id
from memstack.core.messages import validate_message, validate_name
from memstack.core.namespaces import LLAMA_INDEX, tagged_msg_id

try:
    from llama_index.core.base.llms.types import ChatMessage, MessageRole
    from llama_index.core.bridge.pydantic import PrivateAttr
    from llama_index.core.memory import BaseMemory, BaseMemoryBlock
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "memstack.integrations.llama_index needs LlamaIndex: "
        "pip install 'memstack[llama-index]' (or llama-index-core)"
    ) from exc

__all__ = ["MemstackMemory", "MemstackMemoryBlock"]

# LlamaIndex's roles onto memstack's four (memstack.core.messages.ROLES). Developer
# instructions are system text; "chatbot" and "model" are other vendors' names for the
# assistant; a legacy function result is a tool result.
_ROLES: dict[str, str] = {
    MessageRole.USER.value: "user",
    MessageRole.ASSISTANT.value: "assistant",
    MessageRole.CHATBOT.value: "assistant",
    MessageRole.MODEL.value: "assistant",
    MessageRole.SYSTEM.value: "system",
    MessageRole.DEVELOPER.value: "system",
    MessageRole.TOOL.value: "tool",
    MessageRole.FUNCTION.value: "tool",
}

# context() reports, in its manifest, that the window's last message was the query
# itself (memstack.recall.result.CURRENT_INPUT): that message has already been put.
_CURRENT_INPUT = "current_input"

# The sections of context() a memory block adds: everything but the system text (the
# LlamaIndex Memory has its own) and the input (the Memory's chat history ends with it).
_BLOCK_SECTIONS = ("facts", "knowledge", "history", "recent")


def _to_memstack(message: object, *, max_bytes: int) -> tuple[str, str, str | None] | None:
    """``(role, content, name)`` to record for a LlamaIndex ``ChatMessage``, checked as
    ``remember()`` checks it; None for an assistant turn without text.

    memstack records text: an assistant message that only calls tools (or an empty
    reply) has nothing to recall and is skipped, so agents that put such turns keep
    working; any other message without text is refused (:class:`InvalidContent`).
    Images and other non-text blocks are not recorded. The author's ``name`` is read
    from ``additional_kwargs["name"]``, where OpenAI-style integrations keep it.
    """
    if not isinstance(message, ChatMessage):
        raise ValidationError(f"expected a llama_index ChatMessage, got {type(message).__name__}")
    role_value = message.role.value if isinstance(message.role, MessageRole) else message.role
    role = _ROLES.get(str(role_value))
    if role is None:
        raise InvalidContent(f"role {role_value!r} has no memstack equivalent")
    content = message.content or ""
    if not content.strip():
        if role == "assistant":
            return None
        raise InvalidContent(f"a {role} message has no text; memstack records text only")
    validate_message(role, content, max_bytes=max_bytes)
    name = validate_name(message.additional_kwargs.get("name"))
    return role, content, name


def _checked(messages: Sequence[object], max_bytes: int) -> list[tuple[str, str, str | None]]:
    """Every message checked before any is written, so a bad one changes nothing."""
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise ValidationError(f"expected a list of ChatMessage, got {type(messages).__name__}")
    checked = [_to_memstack(m, max_bytes=max_bytes) for m in messages]
    return [c for c in checked if c is not None]


def _record(
    memory: Memory, user_id: str, session_id: str, role: str, content: str, name: str | None
) -> None:
    """``remember()`` a checked message in LlamaIndex's namespace: the user's own
    ``context()`` leaves it out unless asked (:mod:`memstack.core.namespaces`), this
    memory's recall asks."""
    msg_id = tagged_msg_id(LLAMA_INDEX)
    memory.remember(user_id, session_id, role, content, name=name, msg_id=msg_id)


def _from_dict(message: dict[str, str]) -> ChatMessage:
    """One of ``context().messages`` (OpenAI chat format) as a ChatMessage."""
    extra = {"name": message["name"]} if "name" in message else {}
    return ChatMessage(role=message["role"], content=message["content"], additional_kwargs=extra)


def _from_stored(message: Message) -> ChatMessage:
    """A stored message as a ChatMessage, its role unchanged (for ``get_all``)."""
    extra = {"name": message.name} if message.name is not None else {}
    return ChatMessage(role=message.role, content=message.content, additional_kwargs=extra)


def _for_llm(message: Message) -> ChatMessage:
    """A stored message as the LLM may read it. A chat ``tool`` message must answer a
    tool call id memstack does not keep, so it goes as a labelled assistant turn, as
    ``context().messages`` does."""
    if message.role == "tool":
        label = message.name or "tool"
        return ChatMessage(role=MessageRole.ASSISTANT, content=f"[{label}] {message.content}")
    return _from_stored(message)


class MemstackMemory(BaseMemory):
    """A LlamaIndex ``BaseMemory`` over one memstack user's session.

    ``MemstackMemory(mem, user_id="alice", session_id="s1")`` with a
    :class:`memstack.Memory`; pass it as a chat engine's or agent's ``memory=``.

    * ``put`` / ``put_messages`` record messages with ``remember()``: the window at
      once, the ledger, vectors and facts when the worker (or ``drain()``) ingests them.
      All messages of one call are checked before any is recorded.
    * ``get(input)`` is what the LLM reads: memstack's ``context()`` for the question
      (``input``, or else the session's last user message, which is how
      ``SimpleChatEngine`` calls it), as chat messages: one system message with the
      user's known facts and the related history recalled from every session of the
      user, then the recent turns that fit the budget. The stored messages come back
      as stored; the question itself only if it was already put (the engines that pass
      ``input`` append it themselves).
    * ``get_all`` is the session's transcript: the ledger, then the window's messages
      not yet ingested.
    * ``reset`` erases the session everywhere (``forget_session``); ``set`` replaces
      the session's messages (see their docstrings).

    ``budget_tokens`` bounds what ``get`` returns (memstack's default budget if None).
    """

    user_id: str
    session_id: str
    budget_tokens: int | None = None
    _memory: Memory = PrivateAttr()

    def __init__(
        self,
        memory: Memory,
        user_id: str,
        session_id: str,
        *,
        budget_tokens: int | None = None,
    ) -> None:
        if not isinstance(memory, Memory):
            raise TypeError(
                f"memory must be a memstack.Memory, got {type(memory).__name__} "
                "(an AsyncMemory cannot serve LlamaIndex's synchronous calls)"
            )
        validate_id("user_id", user_id)
        validate_id("session_id", session_id)
        # Passed as a dict: mypy (without pydantic's plugin) types BaseMemory's __init__
        # from BaseMemory's own fields, which are none.
        fields: dict[str, Any] = {
            "user_id": user_id,
            "session_id": session_id,
            "budget_tokens": budget_tokens,
        }
        super().__init__(**fields)
        self._memory = memory

    @classmethod
    def class_name(cls) -> str:
        return "MemstackMemory"

    @classmethod
    def from_defaults(  # type: ignore[override]
        cls,
        memory: Memory,
        user_id: str,
        session_id: str,
        *,
        chat_history: list[ChatMessage] | None = None,
        budget_tokens: int | None = None,
    ) -> MemstackMemory:
        """As the constructor; ``chat_history`` (if given) is recorded in the session
        after what it already holds."""
        made = cls(memory, user_id, session_id, budget_tokens=budget_tokens)
        if chat_history:
            made.put_messages(chat_history)
        return made

    # --- writing ------------------------------------------------------------------------
    def put(self, message: ChatMessage) -> None:
        """Record one message in the session."""
        self.put_messages([message])

    def put_messages(self, messages: list[ChatMessage]) -> None:
        """Record messages in order; all are checked first, so a bad one writes nothing."""
        for role, content, name in _checked(messages, self._max_bytes):
            _record(self._memory, self.user_id, self.session_id, role, content, name)

    def set(self, messages: list[ChatMessage]) -> None:
        """Make ``messages`` the session's history.

        Engines call this when a caller passes ``chat_history=``, most often the
        engine's own history with nothing or a few turns added: when the session's
        messages are the start of ``messages``, only the rest is recorded, and nothing
        is erased. Any other list replaces the session: it is erased as by
        :meth:`reset`, then ``messages`` are recorded (timestamped now).
        """
        checked = _checked(messages, self._max_bytes)
        current = [(m.role, m.content, m.name) for m in self._stored_messages()]
        if checked[: len(current)] == current:
            new = checked[len(current) :]
        else:
            self.reset()
            new = checked
        for role, content, name in new:
            _record(self._memory, self.user_id, self.session_id, role, content, name)

    def reset(self) -> None:
        """Erase this session in every memstack layer (``forget_session``): window,
        queued jobs, ledger, vectors, summaries, task state. Afterwards nothing of it is
        recalled, in this session or any other.

        This is what ``chat_engine.reset()`` promises ("clear the conversation") held
        to memstack's standard: an erased conversation is erased, not merely hidden.
        The user's facts stay (memstack keeps them per user, marked ``source_deleted``
        when their messages are erased; ``Memory.delete_fact`` removes one). To start a
        new conversation and keep remembering the old one, use a new ``session_id``.
        """
        self._memory.forget_session(self.user_id, self.session_id)

    # --- reading ------------------------------------------------------------------------
    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        """The chat history for the LLM, with memstack's context for ``input``.

        ``kwargs`` (``initial_token_count`` from the engines) are accepted and ignored:
        ``budget_tokens`` bounds the result instead.
        """
        if input is not None and not isinstance(input, str):
            raise ValidationError(f"input must be a string, got {type(input).__name__}")
        last: Message | None = None
        if input is None:
            tail = self._memory.window(self.user_id, self.session_id, 1)
            last = tail[-1] if tail else None
            if last is None or last.role != "user":
                # No question to recall for: the recent window as it is.
                return [_for_llm(m) for m in self._memory.window(self.user_id, self.session_id)]
            input = last.content
        ctx = self._memory.context(
            self.user_id,
            self.session_id,
            input,
            budget_tokens=self.budget_tokens,
            namespaces=(LLAMA_INDEX,),
        )
        return self._chat_messages(ctx, last)

    def get_all(self) -> list[ChatMessage]:
        """Every message of the session, oldest first, roles as stored."""
        return [_from_stored(m) for m in self._stored_messages()]

    async def aget(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        """:meth:`get` on a worker thread, so the caller's loop is not blocked."""
        return await asyncio.to_thread(self.get, input, **kwargs)

    @staticmethod
    def _chat_messages(ctx: ContextResult, last: Message | None) -> list[ChatMessage]:
        messages = [_from_dict(m) for m in ctx.messages]
        # context() ends with the query as a user message; it belongs in the history
        # only when the session's last message was that question (already put).
        if not any(item.reason == _CURRENT_INPUT for item in ctx.manifest):
            return messages[:-1]
        if last is not None:
            messages[-1] = _from_stored(last)  # keep its author's name
        return messages

    def _stored_messages(self) -> list[Message]:
        """The ledger's messages of the session, then those of the window the worker has
        not stored yet (the ledger lags the window until ingest)."""
        page_size = 1000  # the most one messages() page holds
        stored: list[Message] = []
        while True:
            page = self._memory.messages(
                self.user_id, self.session_id, limit=page_size, offset=len(stored)
            )
            stored.extend(page)
            if len(page) < page_size:
                break
        seen = {m.msg_id for m in stored}
        # The whole window (not the recent_window_read that context() shows): the ledger
        # may lag it by more than that many messages.
        whole = self._memory.settings.window_max_messages
        window = self._memory.window(self.user_id, self.session_id, whole)
        return stored + [m for m in window if m.msg_id not in seen]

    @property
    def _max_bytes(self) -> int:
        return self._memory.settings.max_message_bytes


class MemstackMemoryBlock(BaseMemoryBlock[str]):
    """A block for LlamaIndex's ``Memory`` (``memory_blocks=[...]``).

    ``Memory`` keeps the recent chat itself and, when it outgrows its token limit,
    hands the oldest messages to its blocks: :meth:`_aput` records them in memstack
    (user ``user_id``, session ``session_id``). :meth:`_aget` returns memstack's
    context for the latest user message: known facts, knowledge, history recalled from
    every session of the user, and the messages evicted last (memstack's recent
    window, which the ``Memory`` no longer shows), inserted into its system message.
    """

    name: str = "memstack"
    user_id: str
    session_id: str
    budget_tokens: int | None = None
    _memory: Memory = PrivateAttr()

    def __init__(self, memory: Memory, user_id: str, session_id: str, **fields: Any) -> None:
        if not isinstance(memory, Memory):
            raise TypeError(f"memory must be a memstack.Memory, got {type(memory).__name__}")
        validate_id("user_id", user_id)
        validate_id("session_id", session_id)
        super().__init__(**{"user_id": user_id, "session_id": session_id, **fields})
        self._memory = memory

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        query = next(
            (m.content for m in reversed(messages or []) if m.role == MessageRole.USER),
            None,
        )
        if query is None or not query.strip():
            return ""
        ctx = await asyncio.to_thread(
            self._memory.context,
            self.user_id,
            self.session_id,
            query,
            budget_tokens=self.budget_tokens,
            namespaces=(LLAMA_INDEX,),
        )
        parts = [s.text for n in _BLOCK_SECTIONS if isinstance(s := ctx.sections.get(n), Section)]
        return "\n\n".join(p for p in parts if p)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        checked = _checked(messages, self._memory.settings.max_message_bytes)
        for role, content, name in checked:
            await asyncio.to_thread(
                _record, self._memory, self.user_id, self.session_id, role, content, name
            )
