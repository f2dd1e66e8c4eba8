"""The lexical channel of recall: the query rewritten into weighted terms (rules, or an
LLM's keywords merged in); ``stores.sql.lexical`` scores the ledger's messages for them.

Embeddings are weak on what makes a memory specific: names, numbers, rare words (an
embedding is insensitive to rare words next to frequent ones). A keyword channel over the
ledger recovers them, and fusing it with the vector channel recalls clearly more evidence
than either alone.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from memstack.core.errors import ExtractionError
from memstack.text.terms import STOPWORDS, has_cjk, lexical_terms
from memstack.types import Rewrite as Rewrite

if TYPE_CHECKING:
    from memstack.core.settings import Settings
    from memstack.ml.chat import ChatJSON

log = logging.getLogger("memstack.recall.lexical")

# Words of a question that say "remember something" but are about no topic: they
# would pull in every message that talks about remembering or mentioning.
QUERY_STOPWORDS = frozenset(
    """remember recall mention mentioned mentions tell told say said talk talked discuss
    discussed ask asked know knew think thought ever anything something thing things
    previous previously earlier before again please kind sort type one ones much many
    did does do doing done get got going go went would could should any some
    记得 记不记得 说过 提到 提过 聊过 聊 讨论 讨论过 问过 告诉 上次 之前 以前 那个 这个
    多少 哪个 哪些 是否 有没有 还 还有 吗 呢 一下 一些 请问""".split()
)
# Time in a question points two ways. "When did…", "how long ago", "the first…" ask for
# a date: the answer is as likely old as new, so recency must not rank it. "Latest",
# "currently", "最近" ask for the newest state: recency is exactly right.
_ASKS_DATE = re.compile(
    r"\bwhen\b|\bwhat (?:date|day|time|year|month)\b|\bhow long\b|\bhow many (?:days|weeks|"
    r"months|years)\b|\bago\b|\bfirst\b|\bearliest\b|\bbefore\b|\bafter\b"
    r"|什么时候|哪天|哪一天|几号|几月|哪年|多久|多长时间|第一次|最早|之前|之后",
    re.IGNORECASE,
)
_ASKS_LATEST = re.compile(
    r"\blatest\b|\bmost recent(?:ly)?\b|\bcurrent(?:ly)?\b|\bnow\b|\bthese days\b"
    r"|最近|最新|目前|现在|最后一次",
    re.IGNORECASE,
)
# A capitalised word inside a sentence, an acronym, or a run of them ("Lake Michigan").
_ENTITY = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*)*")
_QUOTED = re.compile(r"[\"“「『]([^\"”」』]{1,60})[\"”」』]")


def rewrite_query(query: str) -> Rewrite:
    """Rule-based rewrite: topic terms and entities, question scaffolding removed.

    "上次那个方案还有没有改进空间" keeps 方案 / 改进 / 空间; "When did Caroline go to the
    LGBTQ support group?" keeps caroline / lgbtq / support / group, entities Caroline
    and LGBTQ, and marks the question temporal.
    """
    entities: list[str] = []
    for m in _QUOTED.finditer(query):
        entities.append(m.group(1).strip())
    if not has_cjk(query):
        for m in _ENTITY.finditer(query):
            words = [w for w in m.group(0).split() if w.casefold() not in STOPWORDS]
            if words:
                entities.append(" ".join(words))
    weights: dict[str, float] = {}
    for term in lexical_terms(query):
        if term in QUERY_STOPWORDS or term in STOPWORDS:
            continue
        weights[term] = 1.0
    # Names and quoted phrases are what the user is really pointing at.
    for entity in entities:
        for term in lexical_terms(entity):
            if term in weights:
                weights[term] = 1.5
    if not weights:
        # Nothing but scaffolding ("what did I say?"): search with what there is.
        for term in lexical_terms(query):
            weights[term] = 1.0
    return Rewrite(
        original=query,
        terms=tuple(weights),
        weights=weights,
        entities=tuple(dict.fromkeys(entities)),
        temporal=bool(_ASKS_DATE.search(query) or _ASKS_LATEST.search(query)),
        time_intent=(
            "latest" if _ASKS_LATEST.search(query) else "date" if _ASKS_DATE.search(query) else None
        ),
    )


def merge_rewrite(base: Rewrite, keywords: Iterable[str], weight: float = 0.8) -> Rewrite:
    """Add an LLM's keywords to a rule rewrite; the user's own words keep their weight."""
    weights = dict(base.weights)
    for kw in keywords:
        for term in lexical_terms(kw):
            if term not in QUERY_STOPWORDS and term not in weights:
                weights[term] = weight
    return Rewrite(
        original=base.original,
        terms=tuple(weights),
        weights=weights,
        entities=base.entities,
        temporal=base.temporal,
        time_intent=base.time_intent,
        source="llm",
    )


# --- BM25 ------------------------------------------------------------------------------------


# --- optional LLM rewrite -------------------------------------------------------------------

_LLM_PROMPT = (
    "You turn a user's question to a memory system into search keywords. Reply with JSON "
    '{"keywords": [...]}: the named entities, the topic words, and two or three close '
    "synonyms, in the language of the question. No explanation."
)


class LLMRewriter:
    """Asks an OpenAI-compatible chat endpoint for keywords; ``None`` on any failure.

    It talks to the endpoint through the extractor's client: the answer is bounded in
    size and checked, and the endpoint's circuit breaker is shared, so while the LLM is
    known to hang, ``context()`` does not wait for it at all.
    """

    def __init__(self, chat: ChatJSON) -> None:
        self._chat = chat

    @classmethod
    def from_settings(cls, settings: Settings) -> LLMRewriter:
        # Imported here: the openai SDK loads only when a rewrite is configured.
        from memstack.ml.chat import ChatJSON, shared_breaker

        assert settings.llm_url
        chat = ChatJSON(
            base_url=settings.llm_url,
            model=settings.llm_model,
            api_key=settings.llm_api_key,
            # On the read path: no longer than a store may take.
            timeout_s=settings.store_timeout_s,
            breaker=shared_breaker(settings.llm_url),
        )
        return cls(chat)

    async def keywords(self, query: str) -> list[str] | None:
        try:
            return await self._chat.complete(_LLM_PROMPT, query, parse_keywords)
        except ExtractionError as exc:
            # The rules rewrite is always there: a failing endpoint costs quality, not the call.
            log.warning("LLM query rewrite failed: %s", exc)
            return None

    async def aclose(self) -> None:
        await self._chat.aclose()


def parse_keywords(content: str) -> list[str] | None:
    """``{"keywords": [...]}`` (possibly in a code fence) → the keywords; None if malformed."""
    m = re.search(r"\{.*\}", content, re.DOTALL)
    if not m:
        return None
    try:
        data = json.loads(m.group(0))
    except (json.JSONDecodeError, RecursionError):
        return None
    kws = data.get("keywords") if isinstance(data, dict) else None
    if not isinstance(kws, list):
        return None
    return [str(k).strip() for k in kws if isinstance(k, str | int | float) and str(k).strip()][:20]
