"""The LLM extractor: any OpenAI-compatible chat endpoint, falling back to the rules.

An LLM finds facts rules cannot phrase, but it is slow, fallible and sometimes
"reasonable" in the wrong way (seed 002 §6.3: it turns "五千……其实八千" into "五千到八千").
So the prompt forbids compromises, every answer is validated and normalised through
the same vocabulary as the rules, and anything unusable costs one retry at most before
the offline rules answer instead. Nothing here connects before the first call.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import openai
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memstack.errors import ExtractionError
from memstack.extraction.base import Extractor, Fact, FactSource, FactType
from memstack.extraction.rules import RulesExtractor, has_turn_word
from memstack.extraction.vocabulary import (
    VOCABULARY,
    canonical_key,
    default_currency,
    normalise_fact,
    normalise_known,
    reconcile,
)

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

    from memstack.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class LLMStats:
    """Counters for the metrics exporter; plain ints so nothing registers at import."""

    calls: int = 0  # requests sent, retries included
    retries: int = 0  # second attempts after malformed output
    malformed: int = 0  # answers that failed JSON parsing or validation
    timeouts: int = 0  # requests that ran out of time
    errors: int = 0  # connection errors and error statuses
    fallbacks: int = 0  # results served by the offline fallback instead


_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


def json_payload(content: str) -> Any:
    """The JSON object in a model's answer, tolerating ```json fences and prose around it."""
    m = _FENCE.search(content)
    text = (m.group(1) if m else content).strip()
    if not text.startswith("{"):
        start, end = text.find("{"), text.rfind("}")
        if start < 0 or end <= start:
            raise ValueError("no JSON object in the answer")
        text = text[start : end + 1]
    return json.loads(text)


class ChatJSON:
    """One OpenAI-compatible chat endpoint asked for JSON, with the retry policy.

    Malformed output gets one retry that shows the model its mistake; a timeout or a
    connection error gets none, because the fallback answers faster than a second wait.
    Either way the caller receives :class:`ExtractionError` and falls back.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 20.0,
        json_mode: bool = False,
    ) -> None:
        self.model = model
        self.timeout_s = timeout_s
        # Off by default: not every OpenAI-compatible server accepts response_format.
        self.json_mode = json_mode
        self.stats = LLMStats()
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key or "none", timeout=timeout_s, max_retries=0
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> ChatJSON:
        if not settings.llm_url:
            raise ExtractionError("no LLM endpoint configured (MEMSTACK_LLM_URL)")
        return cls(
            base_url=settings.llm_url,
            model=settings.llm_model,
            api_key=settings.llm_api_key,
            timeout_s=settings.llm_timeout_s,
        )

    async def complete(self, system: str, user: str, parse: Callable[[str], T]) -> T:
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ]
        for attempt in (1, 2):
            content = await self._ask(messages)
            try:
                return parse(content)
            except ValueError as exc:  # json.JSONDecodeError and pydantic's ValidationError
                self.stats.malformed += 1
                if attempt == 2:
                    raise ExtractionError(f"LLM output unusable twice: {exc}") from exc
                self.stats.retries += 1
                messages += [
                    {"role": "assistant", "content": content},
                    {
                        "role": "user",
                        "content": f"That answer was not usable ({str(exc)[:300]}). "
                        "Reply again with only the JSON object described above.",
                    },
                ]
        raise AssertionError("unreachable")

    async def _ask(self, messages: list[ChatCompletionMessageParam]) -> str:
        self.stats.calls += 1
        extra: dict[str, Any] = (
            {"response_format": {"type": "json_object"}} if self.json_mode else {}
        )
        try:
            # The SDK timeout bounds each read; this bounds the whole call, so a server that
            # trickles bytes cannot hold the worker.
            async with asyncio.timeout(self.timeout_s):
                resp = await self._client.chat.completions.create(
                    model=self.model, messages=messages, temperature=0, **extra
                )
        except (TimeoutError, openai.APITimeoutError) as exc:
            self.stats.timeouts += 1
            raise ExtractionError(f"LLM call timed out after {self.timeout_s}s") from exc
        except openai.OpenAIError as exc:
            self.stats.errors += 1
            raise ExtractionError(f"LLM endpoint failed: {exc}") from exc
        if not resp.choices:
            return ""
        return resp.choices[0].message.content or ""

    async def aclose(self) -> None:
        await self._client.close()


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

    @field_validator("type", "source", mode="before")
    @classmethod
    def _lower(cls, v: Any) -> Any:
        return v.strip().lower() if isinstance(v, str) else v

    @model_validator(mode="after")
    def _complete(self) -> RawFact:
        if self.value is None or self.value in ("", [], {}):
            raise ValueError(f"fact {self.key!r} has no value")
        if self.type is None and canonical_key(self.key) not in VOCABULARY:
            raise ValueError(f"fact {self.key!r} needs a type")
        return self


class FactsPayload(BaseModel):
    facts: list[RawFact]


def to_facts(raw: list[RawFact], *, text: str, known: Mapping[str, Any]) -> list[Fact]:
    """Normalise the model's facts and relate them to ``known`` exactly as the rules do."""
    budget = known.get("budget_limit")
    currency = (budget.get("currency") if isinstance(budget, dict) else None) or default_currency(
        text
    )
    turn = has_turn_word(text)
    out: dict[str, Fact] = {}
    for r in raw:
        fact = normalise_fact(
            Fact(
                key=r.key,
                value=r.value,
                type=r.type or "preference",  # replaced by the vocabulary's type (validated)
                confidence=r.confidence,
                source=r.source,
                supersedes=r.supersedes,
                override=turn if r.override is None else r.override,
            ),
            default_currency=currency,
        )
        if fact is None:
            log.debug("dropped LLM fact with an unusable value: %r", r)
            continue
        out[fact.key] = reconcile(fact, known)
    return list(out.values())


# --- the extractor ---------------------------------------------------------------------------

EXTRACT_PROMPT = """\
You extract durable facts about the USER from one chat message, for a long-term memory.
Reply with ONE JSON object and nothing else: {"facts": [...]}. Each fact has the fields
  "key": string, "value": JSON, "type": "preference" | "profile" | "task" | "constraint",
  "confidence": number 0..1, "source": "user_stated" | "extract" | "inferred",
  "supersedes": the old value this one replaces, or null,
  "override": true | false.

Use these keys when they fit:
  budget_limit (constraint): {"amount": number, "currency": ISO code such as "CNY", "USD"}
  likes, dislikes, focus (preference): list of short strings
  do_not_recommend (constraint): list of things the user does not want recommended
  name, city, occupation (profile): string
  language (preference): ISO 639-1 code of the language the user wants answers in
  goal (task): what the user is trying to get done, a short string
  anything else durable: a short snake_case English key.

Rules:
1. Current values only. When the user changes their mind the value is the NEW value,
   never a range, average or compromise: "预算五千……其实我可以到八千" gives 8000,
   not "5000-8000" and not 6500.
2. If known_facts holds the key with a different value, put that old value in
   "supersedes". If the message itself names the old value ("从五千改到八千"), use it.
3. "override" is true when the message carries a turn word: 其实, 不过, 改一下, 改成, 还是,
   算了, actually, instead, changed my mind, on second thought, scratch that.
4. Keep free-text values in the user's own language and words; never translate:
   "重点关注续航和重量" gives focus ["续航", "重量"].
5. Keep negations: "不要推荐游戏本" is do_not_recommend ["游戏本"], never likes.
6. source is "user_stated" for what the user said outright, "inferred" for anything you
   conclude that the user did not say, "extract" for stated facts that needed reading
   between the lines. Only the user's own statements count; no facts from small talk.
   Nothing to extract: {"facts": []}.

Examples:
known_facts {}, message "我预算不超过五千，重点关注续航和重量" →
{"facts": [{"key": "budget_limit", "value": {"amount": 5000, "currency": "CNY"},
"type": "constraint", "confidence": 0.95, "source": "user_stated", "supersedes": null,
"override": false}, {"key": "focus", "value": ["续航", "重量"], "type": "preference",
"confidence": 0.9, "source": "user_stated", "supersedes": null, "override": false}]}

known_facts {"budget_limit": {"amount": 5000, "currency": "CNY"}},
message "其实我可以到八千，别再推荐游戏本了" →
{"facts": [{"key": "budget_limit", "value": {"amount": 8000, "currency": "CNY"},
"type": "constraint", "confidence": 0.95, "source": "user_stated",
"supersedes": {"amount": 5000, "currency": "CNY"}, "override": true},
{"key": "do_not_recommend", "value": ["游戏本"], "type": "constraint",
"confidence": 0.95, "source": "user_stated", "supersedes": null, "override": true}]}
"""


def _parse_facts(content: str) -> list[RawFact]:
    return FactsPayload.model_validate(json_payload(content)).facts


class LLMExtractor:
    """Facts from an LLM; the rule extractor answers whenever the LLM cannot."""

    name = "llm"

    def __init__(self, chat: ChatJSON, *, fallback: Extractor | None = None) -> None:
        self.chat = chat
        self.fallback: Extractor = fallback or RulesExtractor()

    @classmethod
    def from_settings(cls, settings: Settings) -> LLMExtractor:
        return cls(ChatJSON.from_settings(settings))

    @property
    def stats(self) -> LLMStats:
        return self.chat.stats

    async def extract(
        self, text: str, *, role: str = "user", known: Mapping[str, Any] | None = None
    ) -> list[Fact]:
        # Only the user states user facts; an assistant's suggestion is not one, and
        # skipping it halves the calls.
        if role != "user" or not text.strip():
            return []
        known_n = normalise_known(known)
        request = json.dumps({"known_facts": known_n, "message": text}, ensure_ascii=False)
        try:
            raw = await self.chat.complete(EXTRACT_PROMPT, request, _parse_facts)
        except ExtractionError as exc:
            self.stats.fallbacks += 1
            log.warning("LLM extraction failed, using %s: %s", self.fallback.name, exc)
            return await self.fallback.extract(text, role=role, known=known)
        return to_facts(raw, text=text, known=known_n)

    async def aclose(self) -> None:
        await self.chat.aclose()
