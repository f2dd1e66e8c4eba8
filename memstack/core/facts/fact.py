"""The fact type every extractor returns, and the extractor protocol.

A fact is one normalised key with its current value. The ingest worker
writes ``user_stated`` and ``extract`` facts to the fact store and keeps ``inferred``
ones out of it, so ``source`` must be honest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

FactType = Literal["preference", "profile", "task", "constraint"]
FactSource = Literal["user_stated", "extract", "inferred"]

FACT_TYPES: tuple[FactType, ...] = ("preference", "profile", "task", "constraint")
FACT_SOURCES: tuple[FactSource, ...] = ("user_stated", "extract", "inferred")


class Fact(BaseModel):
    """One extracted fact, already passed through :mod:`memstack.core.facts.vocabulary`."""

    model_config = ConfigDict(frozen=True)

    key: str = Field(min_length=1, description="Normalised key, e.g. budget_limit.")
    value: Any = Field(description="JSON-able value; free text keeps the user's language.")
    type: FactType
    confidence: float = Field(ge=0.0, le=1.0)
    source: FactSource
    supersedes: Any | None = Field(
        default=None,
        description="The old value this one replaces (known value or said in the text).",
    )
    override: bool = Field(
        default=False, description="The sentence carried a turn word (其实, actually, ...)."
    )
    retracts: bool = Field(
        default=False,
        description="The user withdrew the key's current value with nothing in its place "
        '("不过现在不吃素了", "the cat passed away"): the current value ends, none '
        "follows. ``value`` is what was withdrawn when the text names it, else None. (A list "
        "that only shrinks is an ordinary new value: the items that remain.)",
    )


class Extractor(Protocol):
    """Turns one message into facts.

    ``known`` is the user's current facts ``{key: value}``; an extractor uses it to fill
    ``supersedes`` and to return list values whole (see docs/facts.md).
    """

    name: str

    async def extract(
        self, text: str, *, role: str = "user", known: Mapping[str, Any] | None = None
    ) -> list[Fact]: ...


# --- batches -----------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchMessage:
    """One message of an ingest batch. ``owner`` is the user it belongs to: known facts,
    and any request an extractor sends, are per owner, never mixed."""

    owner: str
    text: str
    role: str = "user"


class PreparedBatch(Protocol):
    """The facts of each message of a batch, read in message order."""

    async def extract(self, index: int, *, known: Mapping[str, Any]) -> list[Fact]:
        """Facts of message ``index``; ``known`` is its owner's current facts now (the
        batch's earlier messages included), for ``supersedes`` and whole lists."""
        ...


@runtime_checkable
class BatchExtractor(Protocol):
    """An extractor that reads a whole batch at once (the LLM: one call, not one per
    message). ``known`` is each owner's facts before the batch."""

    async def prepare(
        self, messages: Sequence[BatchMessage], known: Mapping[str, Mapping[str, Any]]
    ) -> PreparedBatch: ...


@dataclass(frozen=True)
class OneByOne:
    """A batch read message by message by an extractor without batches (the rules)."""

    extractor: Extractor
    messages: Sequence[BatchMessage]

    async def extract(self, index: int, *, known: Mapping[str, Any]) -> list[Fact]:
        m = self.messages[index]
        return await self.extractor.extract(m.text, role=m.role, known=known)


async def prepare_batch(
    extractor: Extractor,
    messages: Sequence[BatchMessage],
    known: Mapping[str, Mapping[str, Any]],
) -> PreparedBatch:
    """The batch as ``extractor`` reads it: at once if it can, else one message at a time."""
    if isinstance(extractor, BatchExtractor):
        return await extractor.prepare(messages, known)
    return OneByOne(extractor, messages)
