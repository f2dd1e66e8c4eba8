"""MCP tools that let a person review what memory takes as the user's: fact candidates
(values read with too little confidence to be served) listed, confirmed or rejected, and
the names the user speaks under in a conversation of several people.

:mod:`memstack.server.mcp` registers them with its own; like those, they live at module
level, their annotations resolved in this module's globals.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from memstack.core.ids import MAX_CANDIDATE_ID
from memstack.server.manage_schemas import (
    CandidateFilter,
    CandidateOut,
    CandidatesOut,
    IdentityOut,
)
from memstack.server.mcp_base import ToolContext, UserId, as_tool_errors, lifespan_of
from memstack.server.schemas import FactOut, MomentText

CandidateId = Annotated[
    int,
    Field(ge=1, le=MAX_CANDIDATE_ID, description="The candidate's id, as `candidates` lists it."),
]


async def candidates(
    user_id: UserId,
    ctx: ToolContext,
    status: Annotated[
        CandidateFilter,
        Field(
            description="pending (waiting for a decision), confirmed, rejected, superseded, all."
        ),
    ] = "pending",
    as_of: Annotated[
        MomentText | None,
        Field(
            description="Those pending at this moment (RFC 3339 with its offset), whatever "
            "became of them since; only with status pending."
        ),
    ] = None,
    key: Annotated[str | None, Field(description="One fact key; default: all.")] = None,
) -> CandidatesOut:
    """Facts memory read from the user with too little confidence to count as the user's,
    newest first. They are never served until confirmed: ask the user, then confirm or
    reject them."""
    served = lifespan_of(ctx)
    with as_tool_errors():
        await served.catch_up()
        found = await served.memory.candidates(user_id, status=status, as_of=as_of, key=key)
    return CandidatesOut(candidates=[CandidateOut.model_validate(c) for c in found])


async def confirm_candidate(
    user_id: UserId, candidate_id: CandidateId, ctx: ToolContext
) -> FactOut:
    """The user confirmed a pending candidate: it becomes the user's current fact now,
    superseding the current value (kept in the history). Returns the fact. Fails for a
    candidate already decided."""
    with as_tool_errors():
        fact = await lifespan_of(ctx).memory.confirm_candidate(user_id, candidate_id)
    return FactOut.model_validate(fact)


async def reject_candidate(
    user_id: UserId, candidate_id: CandidateId, ctx: ToolContext
) -> CandidateOut:
    """The user rejected a pending candidate: it is kept as rejected and never served.
    Fails for a candidate already decided."""
    with as_tool_errors():
        rejected = await lifespan_of(ctx).memory.reject_candidate(user_id, candidate_id)
    return CandidateOut.model_validate(rejected)


async def identity(user_id: UserId, ctx: ToolContext) -> IdentityOut:
    """The names the user speaks under (display name, aliases): in a conversation of
    several people, only the user's messages unnamed or under these names feed the
    user's facts."""
    served = lifespan_of(ctx)
    with as_tool_errors():
        await served.catch_up()
        return IdentityOut.model_validate(await served.memory.identity(user_id))


async def set_identity(
    user_id: UserId,
    ctx: ToolContext,
    display_name: Annotated[
        str | None,
        Field(description="The name the user speaks under (1-64 characters, no colon)."),
    ] = None,
    aliases: Annotated[
        tuple[str, ...], Field(description="Other names of the user, each once (at most 32).")
    ] = (),
) -> IdentityOut:
    """Bind the names the user speaks under, replacing those bound before (none given:
    none bound). Messages ingested from now on under one of them count as the user's
    own; others' words never become the user's facts."""
    served = lifespan_of(ctx)
    with as_tool_errors():
        # A user is known once a message of theirs is stored: store what is waiting.
        await served.catch_up()
        bound = await served.memory.set_identity(
            user_id, display_name=display_name, aliases=aliases
        )
    return IdentityOut.model_validate(bound)
