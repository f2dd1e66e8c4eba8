"""The fact type every extractor returns, and the extractor protocol.

A fact is one normalised key with its current value (seed 002 §2.2). The ingest worker
writes ``user_stated`` and ``extract`` facts to the fact store and keeps ``inferred``
ones out of it (seed §3.2), so ``source`` must be honest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

FactType = Literal["preference", "profile", "task", "constraint"]
FactSource = Literal["user_stated", "extract", "inferred"]

FACT_TYPES: tuple[FactType, ...] = ("preference", "profile", "task", "constraint")
FACT_SOURCES: tuple[FactSource, ...] = ("user_stated", "extract", "inferred")


class Fact(BaseModel):
    """One extracted fact, already passed through :mod:`memstack.extraction.vocabulary`."""

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


class Extractor(Protocol):
    """Turns one message into facts.

    ``known`` is the user's current facts ``{key: value}``; an extractor uses it to fill
    ``supersedes`` and to return list values whole (see docs/facts.md).
    """

    name: str

    async def extract(
        self, text: str, *, role: str = "user", known: Mapping[str, Any] | None = None
    ) -> list[Fact]: ...
