"""Routes that read one message back and correct memory by hand: a message by id and its
deletion, a search of the user's history, facts set and deleted, a session erased, fact
candidates listed, confirmed and rejected, the user's names read and bound."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query
from pydantic import BaseModel, BeforeValidator, Field, JsonValue, WithJsonSchema
from starlette.convertors import Convertor, register_url_convertor

from memstack.core.ids import MAX_CANDIDATE_ID, MAX_MSG_ID_LEN, MSG_ID_PATTERN
from memstack.server.http.params import SESSION, MemoryDep, Route, SessionId, UserId
from memstack.server.manage_schemas import (
    FACT_KEY_PATTERN,
    CandidateFilter,
    CandidateOut,
    CandidatesOut,
    IdentityIn,
    IdentityOut,
    SearchHitOut,
    SearchHitsOut,
    SearchLimit,
    StoredMessageOut,
    not_null,
)
from memstack.server.schemas import (
    TEXT_PATTERN,
    ErrorOut,
    FactOut,
    ForgetOut,
    Id,
    Moment,
    MomentText,
    NotBlank,
)

MsgId = Annotated[
    str,
    Path(
        pattern=MSG_ID_PATTERN,
        min_length=1,
        max_length=MAX_MSG_ID_LEN,
        description="A message id as `remember` returned it (it may hold one `/`).",
    ),
]
FactKey = Annotated[
    str,
    Path(
        pattern=FACT_KEY_PATTERN,
        min_length=1,
        max_length=128,
        description="A fact key; a synonym of the vocabulary's names its key (budget: "
        "budget_limit). Not `history`, which is the facts' history here (use the library).",
    ),
]

CandidateId = Annotated[
    int, Path(ge=1, le=MAX_CANDIDATE_ID, description="A fact candidate, as listed.")
]


# Any JSON but null, without NUL characters; size (MEMSTACK_MAX_FACT_VALUE_BYTES) and
# depth (8) are beyond JSON Schema and checked by the library. Nested values reuse the
# task state's schema (routes.STATE_VALUE).
_NESTED: dict[str, Any] = {"$ref": "#/components/schemas/StateValue"}
FactValue = Annotated[
    JsonValue,
    BeforeValidator(not_null),
    WithJsonSchema(
        {
            "description": "Any JSON value but null, without NUL characters, nested at most 8 "
            "deep, at most MEMSTACK_MAX_FACT_VALUE_BYTES as JSON. A key of the vocabulary "
            "(docs/facts.md) shapes it as extraction does: budget_limit reads an amount.",
            "anyOf": [
                {"type": "string", "pattern": TEXT_PATTERN},
                {"type": "number"},
                {"type": "boolean"},
                {"type": "array", "items": _NESTED},
                {
                    "type": "object",
                    "propertyNames": {"pattern": TEXT_PATTERN},
                    "additionalProperties": _NESTED,
                },
            ],
        }
    ),
]


class _FactKeyPath(Convertor[str]):
    """A fact key in a path, never ``history``: ``.../facts/history`` is the history's
    route, and would otherwise also be a key's (its OPTIONS would offer PUT, DELETE)."""

    regex = r"(?!history$)[^/]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("memstack_fact_key", _FactKeyPath())


class SearchIn(BaseModel):
    query: NotBlank = Field(
        description="At most MEMSTACK_MAX_MESSAGE_BYTES (default 64 KiB) of UTF-8."
    )
    limit: SearchLimit = 10
    since: Moment | None = Field(
        default=None, description="Messages created at or after this moment only."
    )
    until: Moment | None = Field(
        default=None,
        description="Messages created at or before this moment only; not before since.",
    )


class FactIn(BaseModel):
    value: FactValue


async def get_message(user_id: UserId, msg_id: MsgId, mem: MemoryDep) -> StoredMessageOut:
    """One message of the user: from the ledger, or the window while not yet stored. 404
    for a message the user does not have."""
    return StoredMessageOut.of(await mem.get_message(user_id, msg_id))


async def delete_message(user_id: UserId, msg_id: MsgId, mem: MemoryDep) -> ForgetOut:
    """Erase one message in every layer (window, queued job, ledger, vectors, summaries
    that include it); the facts it stated stay, marked `source_deleted`."""
    return ForgetOut(deleted=await mem.delete_message(user_id, msg_id))


async def search(user_id: UserId, body: SearchIn, mem: MemoryDep) -> SearchHitsOut:
    """The user's messages that best answer `query`, ranked as `context` ranks them,
    without its filters or budget; `since` and `until` bound their times."""
    hits = await mem.search(
        user_id, body.query, limit=body.limit, since=body.since, until=body.until
    )
    return SearchHitsOut(hits=[SearchHitOut.model_validate(h) for h in hits])


async def set_fact(user_id: UserId, key: FactKey, body: FactIn, mem: MemoryDep) -> FactOut:
    """Set a fact by hand (source user_stated, confidence 1): a different current value is
    superseded and kept in the history. Answers the current row."""
    return FactOut.model_validate(await mem.set_fact(user_id, key, body.value))


async def delete_fact(user_id: UserId, key: FactKey, mem: MemoryDep) -> FactOut:
    """End the current value of a fact; it stays in the history. 404 if it has none."""
    return FactOut.model_validate(await mem.delete_fact(user_id, key))


async def forget_session(user_id: UserId, session_id: SessionId, mem: MemoryDep) -> ForgetOut:
    """Erase one session in every layer; the user's facts stay, those it stated marked
    `source_deleted`."""
    return ForgetOut(deleted=await mem.forget_session(user_id, session_id))


async def candidates(
    user_id: UserId,
    mem: MemoryDep,
    status: Annotated[
        CandidateFilter,
        Query(description="pending (default), confirmed, rejected, superseded, or all."),
    ] = "pending",
    as_of: Annotated[
        MomentText | None,
        Query(
            description="Those pending at this moment (RFC 3339 with its offset), whatever "
            "became of them since; only with status pending."
        ),
    ] = None,
    key: Annotated[Id | None, Query(description="One fact key; default: all.")] = None,
) -> CandidatesOut:
    """The user's fact candidates, newest first: values extraction read with a confidence
    below MEMSTACK_FACT_MIN_CONFIDENCE, never served as the user's until confirmed."""
    found = await mem.candidates(user_id, status=status, as_of=as_of, key=key)
    return CandidatesOut(candidates=[CandidateOut.model_validate(c) for c in found])


async def confirm_candidate(user_id: UserId, candidate_id: CandidateId, mem: MemoryDep) -> FactOut:
    """A pending candidate becomes the user's current fact now (confidence 1), superseding
    the current value with its history kept. Answers the fact. 404 for a candidate the
    user does not have, 409 for one already decided."""
    return FactOut.model_validate(await mem.confirm_candidate(user_id, candidate_id))


async def reject_candidate(
    user_id: UserId, candidate_id: CandidateId, mem: MemoryDep
) -> CandidateOut:
    """A pending candidate is kept as rejected and never served. Answers the candidate;
    404 and 409 as confirming."""
    return CandidateOut.model_validate(await mem.reject_candidate(user_id, candidate_id))


async def identity(user_id: UserId, mem: MemoryDep) -> IdentityOut:
    """The names the user speaks under: only messages of role user that name no author,
    or one of these names, feed the user's facts. 404 for a user with nothing stored."""
    return IdentityOut.model_validate(await mem.identity(user_id))


async def set_identity(user_id: UserId, body: IdentityIn, mem: MemoryDep) -> IdentityOut:
    """Bind the user's names, replacing those bound before (an empty body unbinds them);
    applies to messages ingested from now on. 404 for a user with nothing stored."""
    bound = await mem.set_identity(user_id, display_name=body.display_name, aliases=body.aliases)
    return IdentityOut.model_validate(bound)


CANDIDATE = "/users/{user_id}/candidates/{candidate_id}"
DECIDED: dict[str, Any] = {"responses": {409: {"model": ErrorOut}}}
ROUTES: list[Route] = [
    ("GET", "/users/{user_id}/messages/{msg_id:path}", get_message, {}),
    ("DELETE", "/users/{user_id}/messages/{msg_id:path}", delete_message, {}),
    ("POST", "/users/{user_id}/search", search, {}),
    ("PUT", "/users/{user_id}/facts/{key:memstack_fact_key}", set_fact, {}),
    ("DELETE", "/users/{user_id}/facts/{key:memstack_fact_key}", delete_fact, {}),
    ("DELETE", SESSION, forget_session, {}),
    ("GET", "/users/{user_id}/candidates", candidates, {}),
    ("POST", f"{CANDIDATE}/confirm", confirm_candidate, DECIDED),
    ("POST", f"{CANDIDATE}/reject", reject_candidate, DECIDED),
    ("GET", "/users/{user_id}/identity", identity, {}),
    ("PUT", "/users/{user_id}/identity", set_identity, {}),
]
