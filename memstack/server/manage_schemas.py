"""Wire models of the reading and correcting verbs that both network entry points
answer with (the HTTP API's ``manage_routes`` and the MCP tools): search hits, the
limits of a search and of a fact set by hand, fact candidates and the user's names."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, JsonValue

from memstack import Message
from memstack.core.identity import MAX_ALIASES
from memstack.core.ids import MAX_MSG_ID_LEN, MSG_ID_PATTERN
from memstack.server.schemas import NAME_PATTERN, PATTERN_MEANING, MessageOut, _json_integer

# memstack.verbs.reading.MAX_SEARCH: hits of one search.
MAX_SEARCH = 100
# Fact keys as check_fact_key takes them: an id with something besides "_", "." and "-",
# which its canonical form (snake_case) drops.
FACT_KEY_PATTERN = r"^[A-Za-z0-9_.:@-]*[A-Za-z0-9:@][A-Za-z0-9_.:@-]*$"


# How a refusal of these patterns reads (the error handler's table of meanings).
PATTERN_MEANING.update(
    {
        MSG_ID_PATTERN: f"must be a message id as remember() returns it: 1-{MAX_MSG_ID_LEN} "
        "characters of [A-Za-z0-9_.:@-], not only dots, in one part or two joined by '/'",
        FACT_KEY_PATTERN: "must be a fact key: characters of [A-Za-z0-9_.:@-], at least one "
        "of them a letter, digit, ':' or '@'",
    }
)
SearchLimit = Annotated[int, Field(ge=1, le=MAX_SEARCH), BeforeValidator(_json_integer)]


def not_null(value: object) -> object:
    if value is None:
        raise ValueError("must not be null (deleting the fact ends it)")
    return value


# What set_fact takes: any JSON but null (the library checks size, depth and NUL).
FactValueArg = Annotated[
    JsonValue,
    BeforeValidator(not_null),
    Field(
        description="The value: any JSON but null, nested at most 8 deep, at most "
        "MEMSTACK_MAX_FACT_VALUE_BYTES as JSON. A key of the vocabulary shapes it as "
        "extraction does (budget_limit reads an amount from '8000元')."
    ),
]


class SearchHitOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    msg_id: str
    session_id: str
    role: str
    text: str = Field(description="The message as stored.")
    name: str | None = Field(default=None, description="The author, when one was given.")
    created_at: datetime
    score: float = Field(description="The read path's score: relevance blended with recency.")
    relevance: float
    recency: float
    ranks: dict[str, int] = Field(
        description="Its place in each channel: vector, vector_rewrite, lexical, rerank."
    )


class SearchHitsOut(BaseModel):
    hits: list[SearchHitOut] = Field(description="Best first.")


class StoredMessageOut(MessageOut):
    """A message with its session: what get_message answers, found by its id alone."""

    session_id: str

    @classmethod
    def of(cls, m: Message) -> StoredMessageOut:
        return cls(**MessageOut.of(m).model_dump(), session_id=m.session_id)


# --- fact candidates and the user's names ------------------------------------------------------

CandidateStatus = Literal["pending", "confirmed", "rejected", "superseded"]
# What a listing asks for: one status, or every candidate.
CandidateFilter = Literal["pending", "confirmed", "rejected", "superseded", "all"]


class CandidateOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    user_id: str
    session_id: str
    msg_id: str = Field(description="The message it was read from.")
    key: str
    value: JsonValue
    type: str
    confidence: float = Field(
        description="The extractor's, below MEMSTACK_FACT_MIN_CONFIDENCE when it was read."
    )
    source: str
    said_at: datetime
    status: CandidateStatus = Field(
        description="pending until decided; confirmed (fact_id is the fact it became), "
        "rejected, or superseded (the user stated the key again after it)."
    )
    decided_at: datetime | None
    fact_id: int | None


class CandidatesOut(BaseModel):
    candidates: list[CandidateOut] = Field(description="Newest first.")


Name = Annotated[str, Field(pattern=NAME_PATTERN)]


class IdentityIn(BaseModel):
    display_name: Name | None = Field(
        default=None, description="The name the user speaks under; null for none."
    )
    aliases: list[Name] = Field(
        default_factory=list,
        max_length=MAX_ALIASES,
        description="Other names of the user, each given once (compared ignoring case "
        "and width, the display name included).",
    )


class IdentityOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    user_id: str
    display_name: str | None
    aliases: list[str]
