"""Session summaries: structured JSON made from raw messages.

Input is always the session's raw messages, never an older summary, so numbers and
names cannot drift through a chain of summaries. Two summarisers share one protocol:
an extractive one (offline, the default) that only selects the user's own sentences,
and an LLM one that falls back to it. Neither may report "五千到八千" when the user moved
from 5000 to 8000: facts hold current values, with the old one in ``supersedes``.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, Field, field_validator

from memstack.core.errors import ExtractionError
from memstack.core.facts.fact import Fact
from memstack.core.facts.vocabulary import (
    NUMBER_PATTERN,
    VOCABULARY,
    normalise_known,
    parse_number,
    same_value,
)
from memstack.core.identity import UserIdentity
from memstack.core.messages import Message
from memstack.ingest.extraction.llm import ChatJSON, LLMStats, RawFact, json_payload, to_facts
from memstack.ingest.extraction.rules import (
    RulesExtractor,
    has_turn_word,
    is_question,
    split_sentences,
)
from memstack.text.locales import text_locale

if TYPE_CHECKING:
    from memstack.core.settings import Settings

log = logging.getLogger(__name__)


class SessionSummary(BaseModel):
    facts: list[Fact] = Field(default_factory=list)
    summary: str = ""
    open_questions: list[str] = Field(default_factory=list)
    topic: str = ""


class Summariser(Protocol):
    name: str

    async def summarise(
        self,
        messages: Sequence[Message],
        *,
        known: Mapping[str, Any] | None = None,
        speaker: UserIdentity | None = None,
    ) -> SessionSummary:
        """``speaker``: whose words are the user's (another participant's statements
        are never the user's facts); None: every unnamed user message."""
        ...


def own_words(messages: Sequence[Message], speaker: UserIdentity | None) -> list[str]:
    """The texts of the messages that are the user's own words."""
    who = speaker or UserIdentity("")
    return [m.content for m in messages if who.speaks(m.role, m.name)]


# --- topics ---------------------------------------------------------------------------------

# code → (zh label, en label, cues). Ties go to the earlier row: a budget talk that also
# states likes is still a plan discussion (the specification's own example).
TOPICS: dict[str, tuple[str, str, re.Pattern[str]]] = {
    "issue": (
        "问题反馈", "issue report",
        re.compile(r"问题|报错|错误|故障|坏了|失败|投诉|不能用|用不了|崩溃|卡顿|退款"
                   r"|(?i:\berror|\bbug|\bbroken\b|\bcrash|doesn't work|does not work"
                   r"|\bissue|\bfail)"),
    ),
    "plan": (
        "方案讨论", "plan discussion",
        re.compile(r"方案|选型|推荐|对比|比较|配置|预算|买|选|型号|规格"
                   r"|(?i:\bplan|\boption|\bcompar|\brecommend|\bbudget|\bbuy|\bchoose|\bmodel|\bspec)"),
    ),
    "preference": (
        "偏好声明", "preference statement",
        re.compile(r"喜欢|讨厌|偏好|关注|在意|不要推荐|别推荐"
                   r"|(?i:\blike|\bprefer|\bhate|\blove|care about|\bfavou?rite)"),
    ),
    "chitchat": ("闲聊", "small talk", re.compile(r"(?!x)x")),
}  # fmt: skip


def topic_label(code: str, locale: str) -> str:
    zh, en, _ = TOPICS[code]
    return zh if locale == "zh" else en


def topic_code(label: str) -> str | None:
    """The code of a label in either language (for metadata filters and retention)."""
    for code, (zh, en, _) in TOPICS.items():
        if label.strip().casefold() in (zh, en, code):
            return code
    return None


def classify_topic(user_text: str, facts: Sequence[Fact], locale: str) -> str:
    scores = {code: len(cue.findall(user_text)) for code, (_, _, cue) in TOPICS.items()}
    scores["plan"] += sum(f.type in ("constraint", "task") for f in facts)
    scores["preference"] += sum(f.type == "preference" for f in facts)
    best = max(TOPICS, key=lambda code: scores[code])  # first of equals wins
    return topic_label(best if scores[best] > 0 else "chitchat", locale)


# --- the extractive summariser -------------------------------------------------------------

_NUMBER = re.compile(r"\d|[一二两三四五六七八九十][十百千万亿]")
_NEGATION = re.compile(
    r"不(?!过|错|客气|好意思)|没有?|别|勿|未|"
    r"(?i:\bnot\b|n't\b|\bnever\b|\bno\b|\bwithout\b|\bavoid|\bstop\b)"
)
_PROPER = re.compile(r"(?<=[\s\u4e00-\u9fff])[A-Z][A-Za-z0-9]+|[A-Za-z]+\d+\w*")
_SMALL_TALK = re.compile(
    r"^(?:你好|您好|谢谢|多谢|好的|好|嗯|哈哈|行|可以"
    r"|ok|okay|thanks|thank you|hello|hi|bye|great|cool)"
    r"[\s!！。.,，~～呀啊哦]*$",
    re.IGNORECASE,
)
_DEFERRAL = re.compile(
    r"不确定|不清楚|不知道|稍后|回头|需要确认|待确认|暂时无法|查一下再|"
    r"(?i:not sure|don't know|do not know|get back to you|let me check|will check|can't say)"
)


def _sentence_score(sentence: str, keys: int) -> int:
    if _SMALL_TALK.match(sentence):
        return 0
    score = 2 * keys
    score += 3 if _NUMBER.search(sentence) else 0
    score += 3 if _NEGATION.search(sentence) else 0
    score += 2 if _PROPER.search(sentence) else 0
    score += 1 if has_turn_word(sentence) else 0
    return score - (2 if is_question(sentence) else 0)


class ExtractiveSummariser:
    """Selects, never writes: rule facts, the user's key sentences, open questions, a topic."""

    name = "extractive"

    def __init__(self, *, extractor: RulesExtractor | None = None, max_chars: int = 300) -> None:
        self.rules = extractor or RulesExtractor()
        self.max_chars = max_chars

    async def summarise(
        self,
        messages: Sequence[Message],
        *,
        known: Mapping[str, Any] | None = None,
        speaker: UserIdentity | None = None,
    ) -> SessionSummary:
        return self.summarise_sync(messages, known=known, speaker=speaker)

    def summarise_sync(
        self,
        messages: Sequence[Message],
        *,
        known: Mapping[str, Any] | None = None,
        speaker: UserIdentity | None = None,
    ) -> SessionSummary:
        # It quotes the user: another participant's sentences would read as the user's.
        user = own_words(messages, speaker)
        locale = text_locale(" ".join(user))
        facts = self.current_facts(user, known)
        return SessionSummary(
            facts=facts,
            summary=self._summary(user, facts, locale),
            open_questions=open_questions(messages),
            topic=classify_topic("\n".join(user), facts, locale),
        )

    def current_facts(
        self, user_messages: Sequence[str], known: Mapping[str, Any] | None
    ) -> list[Fact]:
        """Rule facts over the user's messages in order; only the last value of a key stays."""
        running = normalise_known(known)
        current: dict[str, Fact] = {}
        for text in user_messages:
            for fact in self.rules.extract_sync(text, known=running):
                if fact.retracts:
                    # A withdrawn value is no current fact of the session.
                    current.pop(fact.key, None)
                    running.pop(fact.key, None)
                    continue
                earlier = current.get(fact.key)
                if earlier is not None and same_value(earlier.value, fact.value):
                    # A restatement keeps the record of what the value replaced.
                    fact = fact.model_copy(
                        update={
                            "supersedes": fact.supersedes or earlier.supersedes,
                            "override": fact.override or earlier.override,
                        }
                    )
                current[fact.key] = fact
                running[fact.key] = fact.value
        return list(current.values())

    def _summary(self, user_messages: Sequence[str], facts: Sequence[Fact], locale: str) -> str:
        final = {f.key: f.value for f in facts}
        scored: list[tuple[int, int, str]] = []
        for sentence in (s for text in user_messages for s in split_sentences(text)):
            stated = self.rules.extract_sync(sentence)
            # A sentence whose every fact was later replaced would reintroduce the old value
            # (a stale snippet); its value lives on in supersedes.
            if stated and all(_stale(f, final.get(f.key)) for f in stated):
                continue
            score = _sentence_score(sentence, len(stated))
            if score > 0:
                scored.append((score, len(scored), sentence))
        chosen: list[tuple[int, str]] = []
        used = 0
        for _score, order, sentence in sorted(scored, key=lambda t: (-t[0], t[1])):
            piece = _terminated(sentence, locale)
            if used + len(piece) > self.max_chars:
                if not chosen:
                    chosen.append((order, piece[: self.max_chars - 1] + "…"))
                    break
                continue
            chosen.append((order, piece))
            used += len(piece) + (1 if locale == "en" else 0)
        return ("" if locale == "zh" else " ").join(p for _, p in sorted(chosen))


def _stale(fact: Fact, final: Any) -> bool:
    if final is None:
        return False
    spec = VOCABULARY.get(fact.key)
    if spec is not None and spec.kind == "list" and isinstance(final, list):
        return not any(same_value(item, kept) for item in fact.value for kept in final)
    return not same_value(fact.value, final)


def _terminated(sentence: str, locale: str) -> str:
    s = sentence.strip()
    if s.endswith(("。", "！", "？", ".", "!", "?", "；", ";")):
        return s
    return s + ("。" if locale == "zh" else ".")


def open_questions(messages: Sequence[Message]) -> list[str]:
    """User questions no later assistant message answered (a deferral is no answer)."""
    pending: list[str] = []
    for m in messages:
        role, content = m.role, m.content
        if role == "user":
            pending += [s for s in split_sentences(content) if is_question(s)]
        elif role == "assistant" and not _DEFERRAL.search(content):
            pending = []
    return list(dict.fromkeys(pending))


# --- the LLM summariser ----------------------------------------------------------------------

SUMMARY_PROMPT = """\
You summarise one chat session for a long-term memory. The input holds the user's facts
known before the session and the session's raw messages, oldest first. A message's
"name", when present, is its author (several people may share one role): say who said what.
Reply with ONE JSON object and nothing else:
{"facts": [...], "summary": "...", "open_questions": ["..."], "topic": "..."}

facts: the user's CURRENT facts from this session, each
  {"key", "value", "type": "preference"|"profile"|"task"|"constraint", "confidence": 0..1,
   "source": "user_stated"|"extract"|"inferred", "supersedes": old value or null,
   "override": true|false}
  Keys: budget_limit {"amount": number, "currency": "CNY"|"USD"|...}; likes, dislikes,
  focus, do_not_recommend, allergies (the allergen alone), family ("wife: Anna"),
  pets ("柯基: 豆豆") (lists of short strings); name, city, occupation, goal, diet
  (strings); birthday ("MM-DD" or "YYYY-MM-DD"); language (ISO 639-1 code); anything
  else a short snake_case key. Only the user's own facts, nothing from questions,
  hypotheticals or quotes.
summary: at most 300 characters, in the conversation's language. Keep every number,
  amount, name, product and negation exactly as said ("不要推荐游戏本" stays a negation).
open_questions: questions the user asked that the assistant has not answered, verbatim.
topic: one of 方案讨论, 偏好声明, 问题反馈, 闲聊 for a Chinese conversation; one of
  plan discussion, preference statement, issue report, small talk for an English one.

When the user changed their mind, report the NEW value and put the old one in
"supersedes" with "override": true. Never a range, an average or a compromise:
"预算五千……其实我可以到八千" is budget_limit 8000 superseding 5000, and the summary
says 八千, NEVER "五千到八千" or "大约六七千". source is "user_stated" only for what the
user said; "inferred" for what you conclude. Never invent facts. Keep values in the
user's language.

Example answer:
{"facts": [{"key": "budget_limit", "value": {"amount": 8000, "currency": "CNY"},
"type": "constraint", "confidence": 0.95, "source": "user_stated",
"supersedes": {"amount": 5000, "currency": "CNY"}, "override": true},
{"key": "do_not_recommend", "value": ["游戏本"], "type": "constraint",
"confidence": 0.95, "source": "user_stated", "supersedes": null, "override": false}],
"summary": "用户选购笔记本，预算从五千改为八千，重点关注续航和重量，不要推荐游戏本。",
"open_questions": ["是否需要支持扩展存储？"], "topic": "方案讨论"}
"""

_RANGE_JOIN = re.compile(r"^\s*(?:到|至|-|–|—|~|～|or|to|and|或|和)\s*$", re.IGNORECASE)


def compromise_in(summary: str, facts: Sequence[Fact]) -> str | None:
    """The "五千到八千" a model wrote where the user replaced one value by the other."""
    numbers = [
        (m, n) for m in re.finditer(NUMBER_PATTERN, summary) if (n := parse_number(m.group()))
    ]
    for f in facts:
        if not (isinstance(f.value, dict) and isinstance(f.supersedes, dict)):
            continue
        pair = {f.value.get("amount"), f.supersedes.get("amount")}
        for (m1, a), (m2, b) in itertools.pairwise(numbers):
            if {a, b} == pair and _RANGE_JOIN.match(summary[m1.end() : m2.start()]):
                return summary[m1.start() : m2.end()]
    return None


class _SummaryPayload(BaseModel):
    facts: list[RawFact] = Field(default_factory=list)
    summary: str = Field(min_length=1)
    open_questions: list[str] = Field(default_factory=list)
    topic: str = ""

    @field_validator("open_questions", mode="before")
    @classmethod
    def _drop_nulls(cls, v: Any) -> Any:
        return [q for q in v if q] if isinstance(v, list) else v


def _request_message(m: Message) -> dict[str, str]:
    out = {"id": m.msg_id, "role": m.role, "content": m.content}
    if m.name:
        # Several people may share the user role: the model must know who said what.
        out["name"] = m.name
    return out


class LLMSummariser:
    """Summaries from an LLM, checked for compromises; the extractive one answers otherwise."""

    name = "llm"

    def __init__(self, chat: ChatJSON, *, fallback: ExtractiveSummariser | None = None) -> None:
        self.chat = chat
        self.fallback = fallback or ExtractiveSummariser()

    @classmethod
    def from_settings(cls, settings: Settings) -> LLMSummariser:
        return cls(ChatJSON.from_settings(settings))

    @property
    def stats(self) -> LLMStats:
        return self.chat.stats

    async def summarise(
        self,
        messages: Sequence[Message],
        *,
        known: Mapping[str, Any] | None = None,
        speaker: UserIdentity | None = None,
    ) -> SessionSummary:
        known_n = normalise_known(known)
        users = own_words(messages, speaker)
        user_text = "\n".join(users)
        request = json.dumps(
            {
                "known_facts": known_n,
                "messages": [_request_message(m) for m in messages],
            },
            ensure_ascii=False,
        )

        def parse(content: str) -> tuple[_SummaryPayload, list[Fact]]:
            payload = _SummaryPayload.model_validate(json_payload(content))
            facts = to_facts(payload.facts, text=user_text, known=known_n)
            bad = compromise_in(payload.summary, facts)
            if bad:
                raise ValueError(f"summary reports {bad!r} as a range; the user changed the value")
            return payload, facts

        try:
            payload, facts = await self.chat.complete(SUMMARY_PROMPT, request, parse)
        except ExtractionError as exc:
            self.stats.fallbacks += 1
            log.warning("LLM summary failed, using the extractive one: %s", exc)
            return await self.fallback.summarise(messages, known=known, speaker=speaker)
        # Rules are precise where they fire: a key the model dropped comes back from them.
        have = {f.key for f in facts}
        facts += [f for f in self.fallback.current_facts(users, known) if f.key not in have]
        topic = payload.topic.strip() or classify_topic(user_text, facts, text_locale(user_text))
        return SessionSummary(
            facts=facts,
            summary=payload.summary.strip(),
            open_questions=[q.strip() for q in payload.open_questions],
            topic=topic,
        )

    async def aclose(self) -> None:
        await self.chat.aclose()


def build_summariser(settings: Settings) -> Summariser:
    """``settings.summariser``; ``auto`` is the LLM one when an endpoint is configured."""
    if settings.llm_url and settings.summariser in ("auto", "llm"):
        return LLMSummariser.from_settings(settings)
    return ExtractiveSummariser()
