"""The MCP server: memstack's memory as tools for any MCP client (official ``mcp`` SDK).

``create_server(settings)`` builds an :class:`~mcp.server.mcpserver.MCPServer` whose
lifespan opens one :class:`~memstack.memory.AsyncMemory` and closes it at the end;
``memstack mcp`` runs it over stdio. Tools answer with the HTTP API's models
(:mod:`memstack.server.schemas`), so both entry points speak the same shapes.

The tool functions live at module level, here and in :mod:`memstack.server.mcp_review`
(fact candidates, the user's names): the SDK finds the ``Context`` parameter through
``typing.get_type_hints``, which resolves names in module globals only. A tool nested in
``create_server`` would silently get ``ctx`` as a tool argument instead.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations
from pydantic import Field

from memstack import AsyncMemory
from memstack.core.ids import DEFAULT_NAMESPACE, validate_id
from memstack.core.messages import MAX_BATCH
from memstack.core.settings import Locale, Settings, load_settings
from memstack.server import mcp_review
from memstack.server.batch_schemas import (
    BatchMessageIn,
    RememberBatchOut,
    RememberedOut,
    batch_item,
)
from memstack.server.manage_schemas import (
    FactValueArg,
    SearchHitOut,
    SearchHitsOut,
    SearchLimit,
    StoredMessageOut,
)
from memstack.server.mcp_base import (
    Served,
    SessionId,
    ToolContext,
    UserId,
    as_tool_errors,
    lifespan_of,
)
from memstack.server.schemas import (
    FactOut,
    FactsOut,
    ForgetOut,
    ForgetUserOut,
    IntegrationNamespace,
    KBHitOut,
    KBHitsOut,
    LedgerOut,
    Moment,
    MomentText,
    RememberOut,
    SessionOut,
    SessionsOut,
    UserOut,
    UsersOut,
)

INSTRUCTIONS = (
    "Long-term memory of users across sessions. Call `remember` with every user and "
    "assistant turn (`remember_many` for many at once); call `recall_context` with the "
    "user's new message to get what memory "
    "knows (facts, related history, recent dialogue) as prompt text; `facts` lists what "
    "the user has stated (with `as_of`, what held at an earlier time); `list_users`, "
    "`list_sessions`, `read_messages` and `get_message` read what was stored; `delete_message` "
    "erases one message; `search_memory` finds the stored "
    "messages that answer a question; `set_fact` and `delete_fact` correct a fact the user "
    "states or withdraws; `forget_session` erases one conversation, `forget_user` a user "
    "everywhere; `knowledge_search` searches the document knowledge base. Facts read "
    "with too little confidence wait as `candidates` until the user confirms "
    "(`confirm_candidate`) or rejects (`reject_candidate`) them; `identity` and "
    "`set_identity` read and bind the names the user speaks under when several people talk."
)


# --- tools -----------------------------------------------------------------------------------


async def remember(
    user_id: UserId,
    session_id: SessionId,
    role: Annotated[str, Field(description="user, assistant, system or tool.")],
    content: Annotated[str, Field(description="The message text.")],
    ctx: ToolContext,
    msg_id: Annotated[
        str | None, Field(description="Idempotency key: a retry with the same one is a no-op.")
    ] = None,
    name: Annotated[
        str | None,
        Field(
            description="Who said it, when several people share the conversation "
            "(OpenAI's message name): 1-64 characters, no line break or colon."
        ),
    ] = None,
) -> RememberOut:
    """Record one message of a conversation in memory; returns its stored id."""
    with as_tool_errors():
        stored = await lifespan_of(ctx).memory.remember(
            user_id, session_id, role, content, msg_id=msg_id, name=name
        )
    return RememberOut(msg_id=stored)


async def remember_many(
    user_id: UserId,
    session_id: SessionId,
    messages: Annotated[
        list[BatchMessageIn],
        Field(
            min_length=1,
            max_length=MAX_BATCH,
            description="The messages, in order, each with its own msg_id (required: "
            "sending the same batch again stores nothing twice).",
        ),
    ],
    ctx: ToolContext,
) -> RememberBatchOut:
    """Record many messages of a conversation at once; one result per message: ok,
    duplicate (already stored) or error (nothing of it stored, and why)."""
    with as_tool_errors():
        results = await lifespan_of(ctx).memory.remember_many(
            user_id, session_id, [batch_item(m) for m in messages]
        )
    return RememberBatchOut(
        results=[RememberedOut.model_validate(r, from_attributes=True) for r in results]
    )


async def recall_context(
    user_id: UserId,
    session_id: SessionId,
    query: Annotated[str, Field(description="The user's new message.")],
    ctx: ToolContext,
    budget_tokens: Annotated[
        int | None, Field(description="Token budget of the text; default from settings.")
    ] = None,
    locale: Annotated[Locale | None, Field(description="Label language: zh or en.")] = None,
    namespaces: Annotated[
        list[IntegrationNamespace] | None,
        Field(
            description="Memory an integration keeps to recall as well: langgraph (store "
            "items), llama_index (its chat turns). Default: the user's conversation only."
        ),
    ] = None,
) -> str:
    """What memory knows for this message, as prompt text: known facts, related history
    and recent dialogue, within a token budget."""
    served = lifespan_of(ctx)
    with as_tool_errors():
        await served.catch_up()
        result = await served.memory.context(
            user_id,
            session_id,
            query,
            budget_tokens=budget_tokens,
            locale=locale,
            namespaces=namespaces or (),
        )
    return result.text


async def facts(
    user_id: UserId,
    ctx: ToolContext,
    as_of: Annotated[
        MomentText | None,
        Field(
            description="The facts current at this moment instead of now: an RFC 3339 "
            "date-time with its timezone offset, e.g. 2025-03-01T10:00:00+08:00."
        ),
    ] = None,
) -> FactsOut:
    """The user's current facts (budget, preferences, …), most confident first; with
    ``as_of``, what was current at that moment (values since changed or withdrawn)."""
    served = lifespan_of(ctx)
    with as_tool_errors():
        await served.catch_up()
        found = await served.memory.facts(user_id, as_of=as_of)
    return FactsOut(facts=[FactOut.model_validate(f) for f in found])


async def list_sessions(user_id: UserId, ctx: ToolContext) -> SessionsOut:
    """The user's sessions, oldest first, with message counts and first and last times."""
    served = lifespan_of(ctx)
    with as_tool_errors():
        await served.catch_up()
        found = await served.memory.sessions(user_id)
    return SessionsOut(sessions=[SessionOut.model_validate(s) for s in found])


async def read_messages(
    user_id: UserId,
    session_id: SessionId,
    ctx: ToolContext,
    limit: Annotated[int, Field(ge=1, le=1000, description="Messages per page.")] = 100,
    offset: Annotated[int, Field(ge=0, description="Messages to skip.")] = 0,
) -> LedgerOut:
    """One page of a session's messages as stored, oldest first."""
    served = lifespan_of(ctx)
    with as_tool_errors():
        await served.catch_up()
        found = await served.memory.messages(user_id, session_id, limit=limit, offset=offset)
    return LedgerOut.page(found, limit=limit, offset=offset)


async def list_users(
    ctx: ToolContext,
    limit: Annotated[int, Field(ge=1, le=1000, description="Users per page.")] = 100,
    offset: Annotated[int, Field(ge=0, description="Users to skip.")] = 0,
) -> UsersOut:
    """Users with stored messages, by id, with their session and message counts and the
    time of their last message. (Not offered by a server pinned to one user.)"""
    served = lifespan_of(ctx)
    with as_tool_errors():
        await served.catch_up()
        found = await served.memory.users(limit=limit, offset=offset)
    return UsersOut(users=[UserOut.model_validate(u) for u in found])


async def get_message(
    user_id: UserId,
    msg_id: Annotated[str, Field(description="The id `remember` returned.")],
    ctx: ToolContext,
) -> StoredMessageOut:
    """One message of the user by its id, with its session."""
    served = lifespan_of(ctx)
    with as_tool_errors():
        return StoredMessageOut.of(await served.memory.get_message(user_id, msg_id))


async def delete_message(
    user_id: UserId,
    msg_id: Annotated[str, Field(description="The id `remember` returned.")],
    ctx: ToolContext,
) -> ForgetOut:
    """Erase one message in every layer; the facts it stated stay, marked as from a
    deleted source. Cannot be undone."""
    with as_tool_errors():
        deleted = await lifespan_of(ctx).memory.delete_message(user_id, msg_id)
    return ForgetOut(deleted=deleted)


async def forget_user(user_id: UserId, ctx: ToolContext) -> ForgetUserOut:
    """Erase everything memory holds about the user, in every layer, and revoke the
    user's API keys (their ids in ``revoked_keys``). Cannot be undone."""
    with as_tool_errors():
        erased = await lifespan_of(ctx).memory.forget_user(user_id)
    return ForgetUserOut(deleted=erased, revoked_keys=list(erased.revoked_keys))


async def search_memory(
    user_id: UserId,
    query: Annotated[str, Field(description="What to look for in the user's history.")],
    ctx: ToolContext,
    limit: Annotated[SearchLimit, Field(description="Most hits.")] = 10,
    since: Annotated[
        Moment | None, Field(description="Only messages from this moment on (RFC 3339).")
    ] = None,
    until: Annotated[
        Moment | None, Field(description="Only messages up to this moment (RFC 3339).")
    ] = None,
) -> SearchHitsOut:
    """The user's stored messages that best answer the query, best first, each with its
    session, time and score; ``since``/``until`` bound their times."""
    served = lifespan_of(ctx)
    with as_tool_errors():
        await served.catch_up()
        hits = await served.memory.search(user_id, query, limit=limit, since=since, until=until)
    return SearchHitsOut(hits=[SearchHitOut.model_validate(h) for h in hits])


async def set_fact(
    user_id: UserId,
    key: Annotated[str, Field(description="The fact's key, e.g. city, diet, budget_limit.")],
    value: FactValueArg,
    ctx: ToolContext,
) -> FactOut:
    """Set a fact about the user by hand (the user said so): a different current value is
    superseded and kept in the history. Returns the current fact."""
    served = lifespan_of(ctx)
    with as_tool_errors():
        await served.catch_up()
        fact = await served.memory.set_fact(user_id, key, value)
    return FactOut.model_validate(fact)


async def delete_fact(
    user_id: UserId,
    key: Annotated[str, Field(description="The fact's key.")],
    ctx: ToolContext,
) -> FactOut:
    """End the user's current value of a fact, with nothing in its place; it stays in the
    history. Fails if the fact has no current value."""
    served = lifespan_of(ctx)
    with as_tool_errors():
        await served.catch_up()
        fact = await served.memory.delete_fact(user_id, key)
    return FactOut.model_validate(fact)


async def forget_session(user_id: UserId, session_id: SessionId, ctx: ToolContext) -> ForgetOut:
    """Erase one session of the user in every layer (its messages, window, state,
    summaries); the user's facts stay. Cannot be undone."""
    with as_tool_errors():
        deleted = await lifespan_of(ctx).memory.forget_session(user_id, session_id)
    return ForgetOut(deleted=deleted)


async def knowledge_search(
    query: Annotated[str, Field(description="What to look for.")],
    ctx: ToolContext,
    top_k: Annotated[int | None, Field(description="Hits; default from settings.")] = None,
    namespace: Annotated[str, Field(description="Knowledge base (tenant).")] = DEFAULT_NAMESPACE,
) -> KBHitsOut:
    """Search the document knowledge base; hits carry their text and cosine score."""
    with as_tool_errors():
        hits = await lifespan_of(ctx).memory.kb_search(query, top_k, namespace=namespace)
    return KBHitsOut(hits=[KBHitOut.model_validate(h) for h in hits])


# Hints for clients that ask before a tool writes or erases; memory is a closed world.
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
ERASING = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)
TOOLS = (
    (remember, ADDITIVE),
    (remember_many, ADDITIVE),
    (recall_context, READ_ONLY),
    (facts, READ_ONLY),
    (list_users, READ_ONLY),
    (list_sessions, READ_ONLY),
    (read_messages, READ_ONLY),
    (get_message, READ_ONLY),
    (delete_message, ERASING),
    (forget_user, ERASING),
    (search_memory, READ_ONLY),
    (set_fact, ADDITIVE),
    (delete_fact, ERASING),
    (forget_session, ERASING),
    (knowledge_search, READ_ONLY),
    (mcp_review.candidates, READ_ONLY),
    (mcp_review.confirm_candidate, ADDITIVE),
    (mcp_review.reject_candidate, ADDITIVE),
    (mcp_review.identity, READ_ONLY),
    (mcp_review.set_identity, ADDITIVE),
)

# Tools that reach every user without naming one: never on a server pinned to one user.
ACROSS_USERS = frozenset({list_users})

PINNED = (
    " This server serves the memory of one user only: tools take no user_id, and no "
    "other user's memory can be reached."
)


def destructive(hints: ToolAnnotations | None) -> bool:
    """Whether a tool may destroy, read as MCP defines its hints: one not read-only is
    destructive unless it says otherwise."""
    if hints is None:
        return True
    return not hints.read_only_hint and hints.destructive_hint is not False


def pinned(tool: Callable[..., Any], user_id: str) -> Callable[..., Any]:
    """``tool`` with its ``user_id`` parameter fixed to ``user_id`` and gone from its
    signature, so from the tool's schema: a model can neither see nor name another user.
    A tool without ``user_id`` is returned as it is. Generic over the tool table: the
    wrapper takes its signature and hints from the tool (evaluated, since the SDK reads
    them from the wrapper), less ``user_id``."""
    signature = inspect.signature(tool, eval_str=True)
    if "user_id" not in signature.parameters:
        return tool
    kept = [p for p in signature.parameters.values() if p.name != "user_id"]

    async def for_the_user(**arguments: Any) -> Any:
        # The SDK passes only the declared arguments; a user_id a client sends anyway
        # is dropped by its argument model and could not override this one.
        result = tool(**{**arguments, "user_id": user_id})
        return await result if inspect.isawaitable(result) else result

    for_the_user.__name__ = tool.__name__
    for_the_user.__qualname__ = tool.__qualname__
    for_the_user.__doc__ = tool.__doc__
    for_the_user.__signature__ = signature.replace(parameters=kept)  # type: ignore[attr-defined]
    hints = {p.name: p.annotation for p in kept if p.annotation is not inspect.Parameter.empty}
    if signature.return_annotation is not inspect.Signature.empty:
        hints["return"] = signature.return_annotation
    for_the_user.__annotations__ = hints
    return for_the_user


def create_server(
    settings: Settings | None = None,
    *,
    inline_ingest: bool | None = None,
    user_id: str | None = None,
    allow_forget: bool | None = None,
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "WARNING",
) -> MCPServer[Served]:
    """The MCP server over one ``AsyncMemory`` opened by its lifespan.

    ``inline_ingest`` (default: on for the embedded Redis) drains pending ingest jobs
    before ``recall_context`` and ``facts``; with a Redis server a ``memstack worker``
    does that work instead.

    ``user_id`` pins the server to one user: every tool's ``user_id`` is that user and
    is no parameter of the tool. ``allow_forget`` registers the destructive tools
    (those annotated ``destructive_hint``, such as ``forget_user``); by default they
    are left out of a pinned server and offered by an unpinned one.

    ``log_level`` is the level of the logging the server sets up on stderr: WARNING
    keeps an MCP client's log free of a line per migration and per HTTP request.
    """
    settings = settings or load_settings()
    drain = settings.embedded_redis if inline_ingest is None else inline_ingest
    if user_id is not None:
        validate_id("user_id", user_id)
    erasing = user_id is None if allow_forget is None else allow_forget

    @asynccontextmanager
    async def lifespan(_: MCPServer[Served]) -> AsyncIterator[Served]:
        memory = await AsyncMemory.open(settings)
        try:
            await memory.prepare()
            yield Served(memory=memory, inline_ingest=drain)
        finally:
            await memory.close()

    instructions = INSTRUCTIONS if user_id is None else INSTRUCTIONS + PINNED
    server: MCPServer[Served] = MCPServer(
        "memstack",
        instructions=instructions,
        version="0.1.0",
        lifespan=lifespan,
        log_level=log_level,
    )
    for tool, hints in TOOLS:
        if (destructive(hints) and not erasing) or (user_id is not None and tool in ACROSS_USERS):
            continue
        server.add_tool(tool if user_id is None else pinned(tool, user_id), annotations=hints)
    return server
