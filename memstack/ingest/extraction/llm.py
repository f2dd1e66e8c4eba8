"""The LLM extractor: any OpenAI-compatible chat endpoint, falling back to the rules.

An LLM finds facts rules cannot phrase, but it is slow, fallible and sometimes
"reasonable" in the wrong way: it turns "五千……其实八千" into "五千到八千".
So the prompt forbids compromises, and every answer is distrusted: the transport bounds
and checks the response (:mod:`memstack.ml.chat`), every fact must have a key
of the vocabulary or a safe id and a value that passes
:func:`memstack.core.facts.checks.check_fact_value`, and is then normalised through the
same vocabulary as the rules. A message whose answer holds a fact that fails, or that
the answer leaves out, gets the rules' facts instead; an answer that is no JSON at all
costs one retry at most. Nothing raises into ingest.

Ingest reads a batch with :meth:`LLMExtractor.prepare`: one request per user of the
batch (a prompt never holds two users' messages), all sent at once, so a batch costs at
most one timeout however many messages it holds.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from memstack.core import metrics
from memstack.core.errors import ExtractionError
from memstack.core.errors import ValidationError as InvalidInput
from memstack.core.facts.checks import DEFAULT_MAX_VALUE_BYTES, check_fact_key, check_fact_value
from memstack.core.facts.fact import BatchMessage, Extractor, Fact, FactSource, FactType
from memstack.core.facts.vocabulary import (
    VOCABULARY,
    canonical_key,
    default_currency,
    normalise_fact,
    normalise_known,
    reconcile,
)
from memstack.core.inputs import safe_text
from memstack.ingest.extraction.prompts import BATCH_PROMPT, EXTRACT_PROMPT
from memstack.ingest.extraction.rules import RulesExtractor, has_turn_word
from memstack.ml.chat import ChatJSON, LLMCallFailed, LLMStats, json_payload

if TYPE_CHECKING:
    from memstack.core.settings import Settings

log = logging.getLogger(__name__)

__all__ = [
    "BATCH_PROMPT",
    "EXTRACT_PROMPT",
    "ChatJSON",
    "LLMExtractor",
    "LLMStats",
    "RawFact",
    "json_payload",
    "message_facts",
    "to_facts",
]


# --- the model's fact shape ----------------------------------------------------------------


class RawFact(BaseModel):
    """A fact as the model writes it, before the vocabulary has its say."""

    model_config = ConfigDict(extra="ignore")

    key: str = Field(min_length=1)
    value: Any
    type: FactType | None = None
    confidence: float = Field(default=0.8, ge=0.0, le=1.0)
    source: FactSource = "extract"
    supersedes: Any | None = None
    override: bool | None = None
    # A withdrawal (Fact.retracts); null is read as false.
    retracts: bool | None = None

    @field_validator("type", "source", mode="before")
    @classmethod
    def _lower(cls, v: Any) -> Any:
        return v.strip().lower() if isinstance(v, str) else v

    @model_validator(mode="after")
    def _complete(self) -> RawFact:
        if self.value is None or self.value in ("", [], {}):
            if not self.retracts:
                raise ValueError(f"fact {safe_text(self.key, 60)!r} has no value")
            self.value = None  # a withdrawal need not name what it withdraws
        # A retraction's type does not matter: it stores no value.
        if (
            self.type is None
            and not self.retracts
            and canonical_key(self.key[:512]) not in VOCABULARY
        ):
            raise ValueError(f"fact {safe_text(self.key, 60)!r} needs a type")
        return self


class _Rejected(Exception):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field = field


def _checked(raw: RawFact, max_value_bytes: int) -> RawFact:
    """``raw`` with its canonical key if its key and values pass the checks."""
    try:
        key = check_fact_key(raw.key)
    except InvalidInput as exc:
        raise _Rejected("key", str(exc)) from None
    try:
        check_fact_value(raw.value, max_bytes=max_value_bytes)
        if raw.supersedes is not None:
            check_fact_value(raw.supersedes, max_bytes=max_value_bytes, kind="supersedes")
    except InvalidInput as exc:
        raise _Rejected("value", str(exc)) from None
    # A vocabulary key keeps its spelling for normalise_fact, which canonicalises it
    # again: a relation or animal key ("wife") labels the value it carries.
    return raw if key in VOCABULARY else raw.model_copy(update={"key": key})


def _to_fact(r: RawFact, *, text: str, known: Mapping[str, Any], currency: str) -> Fact | None:
    fact = normalise_fact(
        Fact(
            key=r.key,
            value=r.value,
            type=r.type or "preference",  # replaced by the vocabulary's type (validated)
            confidence=r.confidence,
            source=r.source,
            supersedes=r.supersedes,
            override=has_turn_word(text) if r.override is None else r.override,
            retracts=bool(r.retracts),
        ),
        default_currency=currency,
    )
    return None if fact is None else reconcile(fact, known)


def _currency(text: str, known: Mapping[str, Any]) -> str:
    budget = known.get("budget_limit")
    code = budget.get("currency") if isinstance(budget, dict) else None
    return code if isinstance(code, str) and code else default_currency(text)


def _keep(out: dict[str, Fact], fact: Fact) -> None:
    """One fact per key, the later one; but a withdrawal never undoes a value the same
    message states ("not vegetarian anymore, vegan now" is a new diet, not none)."""
    earlier = out.get(fact.key)
    if fact.retracts and earlier is not None and not earlier.retracts:
        return
    out[fact.key] = fact


def to_facts(
    raw: list[RawFact],
    *,
    text: str,
    known: Mapping[str, Any],
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
) -> list[Fact]:
    """Normalise the model's facts and relate them to ``known`` exactly as the rules do;
    a fact failing the checks, or with an unusable value, is left out."""
    currency = _currency(text, known)
    out: dict[str, Fact] = {}
    for r in raw:
        try:
            fact = _to_fact(_checked(r, max_value_bytes), text=text, known=known, currency=currency)
        except _Rejected as exc:
            metrics.LLM_FACTS_REJECTED.labels(exc.field).inc()
            log.warning("dropped an LLM fact: %s", safe_text(exc))
            continue
        except Exception as exc:  # the vocabulary choked on it
            metrics.LLM_FACTS_REJECTED.labels("value").inc()
            log.warning("dropped an LLM fact: %s: %s", type(exc).__name__, safe_text(exc))
            continue
        if fact is None:
            log.debug("dropped LLM fact with an unusable value: %s", safe_text(repr(r)))
            continue
        _keep(out, fact)
    return list(out.values())


def message_facts(
    items: object, *, text: str, known: Mapping[str, Any], max_value_bytes: int
) -> list[Fact]:
    """The facts of one message from the model's list for it, all or nothing:
    :class:`_Rejected` when the list, or any fact in it, fails validation (the model
    misread this message, so the rules read it instead). A fact whose value the
    vocabulary cannot use (an amount without a number) is only left out, as ever."""
    if isinstance(items, dict) and set(items) == {"facts"}:
        items = items["facts"]  # {"0": {"facts": [...]}} instead of {"0": [...]}
    if not isinstance(items, list):
        raise _Rejected("shape", f"the facts of a message are a {type(items).__name__}")
    currency = _currency(text, known)
    out: dict[str, Fact] = {}
    for item in items:
        try:
            raw = RawFact.model_validate(item)
        except ValidationError as exc:
            raise _Rejected("shape", safe_text(exc)) from None
        try:
            fact = _to_fact(
                _checked(raw, max_value_bytes), text=text, known=known, currency=currency
            )
        except _Rejected:
            raise
        except Exception as exc:  # the vocabulary choked on it: distrust the answer
            raise _Rejected("value", f"{type(exc).__name__}: {safe_text(exc)}") from None
        if fact is not None:
            _keep(out, fact)
    return list(out.values())


# --- answers -------------------------------------------------------------------------------


def _parse_single(content: str) -> object:
    payload = json_payload(content)
    if not isinstance(payload, dict) or "facts" not in payload:
        raise ValueError('the answer is not an object with "facts"')
    return payload["facts"]


def _parse_batch(content: str, count: int) -> dict[int, object]:
    """Each message's fact list by index, from ``{"facts_by_message": {"0": [...]}}``
    (a list in message order and, for one message, ``{"facts": [...]}`` are read too)."""
    payload = json_payload(content)
    if not isinstance(payload, dict):
        raise ValueError("the answer is not a JSON object")
    by_message = payload.get("facts_by_message")
    if by_message is None and count == 1 and "facts" in payload:
        return {0: payload["facts"]}
    if isinstance(by_message, list) and len(by_message) == count:
        return dict(enumerate(by_message))
    if not isinstance(by_message, dict):
        raise ValueError('the answer has no "facts_by_message" object keyed by message index')
    out: dict[int, object] = {}
    for k, v in by_message.items():
        k = k.strip()
        if k.isascii() and k.isdigit() and len(k) < 6 and int(k) < count:
            out[int(k)] = v
    return out


def _reason(exc: ExtractionError) -> str:
    return exc.reason if isinstance(exc, LLMCallFailed) else "error"


# --- the extractor ---------------------------------------------------------------------------


@dataclass
class _LLMBatch:
    """The model's answers for a batch; messages without a usable one get the rules'."""

    extractor: LLMExtractor
    messages: Sequence[BatchMessage]
    answers: dict[int, object] = field(default_factory=dict)
    failures: dict[int, str] = field(default_factory=dict)  # index -> why there is none

    async def extract(self, index: int, *, known: Mapping[str, Any]) -> list[Fact]:
        m = self.messages[index]
        if m.role != "user" or not m.text.strip():
            return []
        if index not in self.answers:
            if index in self.failures:  # the request failed: logged once, for the batch
                return await self.extractor.fall_back(m.text, known, self.failures[index])
            return await self.extractor.fall_back(
                m.text, known, "missing", "the answer left this message out"
            )
        return await self.extractor.read_answer(self.answers[index], m.text, known)


class LLMExtractor:
    """Facts from an LLM; the rule extractor answers whenever the LLM cannot."""

    name = "llm"

    def __init__(
        self,
        chat: ChatJSON,
        *,
        fallback: Extractor | None = None,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
    ) -> None:
        self.chat = chat
        self.fallback: Extractor = fallback or RulesExtractor()
        self.max_value_bytes = max_value_bytes

    @classmethod
    def from_settings(cls, settings: Settings) -> LLMExtractor:
        return cls(ChatJSON.from_settings(settings), max_value_bytes=settings.max_fact_value_bytes)

    @property
    def stats(self) -> LLMStats:
        return self.chat.stats

    def _known(self, known: Mapping[str, Any] | None) -> dict[str, Any]:
        """The known facts fit to send: canonical, and only those that pass the checks."""
        out: dict[str, Any] = {}
        for key, value in normalise_known(known).items():
            try:
                check_fact_value(value, max_bytes=self.max_value_bytes)
                out[check_fact_key(key)] = value
            except InvalidInput:
                continue
        return out

    async def fall_back(
        self, text: str, known: Mapping[str, Any] | None, reason: str, why: object = None
    ) -> list[Fact]:
        """The fallback's facts for one message, counted (and logged when ``why``)."""
        self.stats.fallbacks += 1
        metrics.LLM_EXTRACTION_FALLBACKS.labels(reason).inc()
        if why is not None:
            log.warning(
                "LLM extraction unusable (%s), using %s: %s",
                reason,
                self.fallback.name,
                safe_text(why),
            )
        return await self.fallback.extract(text, role="user", known=known)

    async def read_answer(
        self, items: object, text: str, known: Mapping[str, Any] | None
    ) -> list[Fact]:
        """The facts of one message from the model's answer for it, or the rules' facts."""
        try:
            return message_facts(
                items, text=text, known=normalise_known(known), max_value_bytes=self.max_value_bytes
            )
        except _Rejected as exc:
            self.stats.dropped_facts += 1
            metrics.LLM_FACTS_REJECTED.labels(exc.field).inc()
            return await self.fall_back(text, known, "invalid_fact", exc)

    async def extract(
        self, text: str, *, role: str = "user", known: Mapping[str, Any] | None = None
    ) -> list[Fact]:
        # Only the user states user facts; an assistant's suggestion is not one, and
        # skipping it halves the calls.
        if role != "user" or not text.strip():
            return []
        request = json.dumps(
            {"known_facts": self._known(known), "message": text}, ensure_ascii=False
        )
        try:
            items = await self.chat.complete(EXTRACT_PROMPT, request, _parse_single)
        except ExtractionError as exc:
            return await self.fall_back(text, known, _reason(exc), exc)
        return await self.read_answer(items, text, known)

    async def prepare(
        self, messages: Sequence[BatchMessage], known: Mapping[str, Mapping[str, Any]]
    ) -> _LLMBatch:
        """Ask for the facts of every user message of a batch: one request per user, all
        at once; whatever fails leaves its messages to the rules."""
        groups: dict[str, list[int]] = {}
        for i, m in enumerate(messages):
            if m.role == "user" and m.text.strip():
                groups.setdefault(m.owner, []).append(i)
        batch = _LLMBatch(self, messages)
        await asyncio.gather(
            *(self._ask_group(batch, idx, known.get(owner)) for owner, idx in groups.items())
        )
        return batch

    async def _ask_group(
        self, batch: _LLMBatch, indexes: list[int], known: Mapping[str, Any] | None
    ) -> None:
        request = json.dumps(
            {
                "known_facts": self._known(known),
                "messages": [
                    {"index": n, "text": batch.messages[i].text} for n, i in enumerate(indexes)
                ],
            },
            ensure_ascii=False,
        )
        try:
            answers = await self.chat.complete(
                BATCH_PROMPT, request, lambda content: _parse_batch(content, len(indexes))
            )
        except ExtractionError as exc:
            batch.failures.update(dict.fromkeys(indexes, _reason(exc)))
            log.warning("LLM extraction of %d messages failed: %s", len(indexes), safe_text(exc))
            return
        except Exception as exc:  # never into ingest: the rules read these messages
            batch.failures.update(dict.fromkeys(indexes, "error"))
            log.exception("LLM extraction of %d messages failed: %s", len(indexes), safe_text(exc))
            return
        for n, i in enumerate(indexes):
            if n in answers:
                batch.answers[i] = answers[n]

    async def aclose(self) -> None:
        await self.chat.aclose()
