"""The lexical channel of recall: BM25 over the message ledger, always for one user.

Embeddings are weak on what makes a memory specific: names, numbers, rare words (an
embedding is insensitive to rare words next to frequent ones). A keyword channel over the
ledger recovers them, and fusing it with the vector channel recalls clearly more evidence
than either alone.

The ledger's ``search_terms`` column holds client-side terms (:func:`lexical_terms`,
jieba for Chinese), so PostgreSQL's ``'simple'`` configuration indexes Chinese as well as
English. PostgreSQL selects the candidate rows through the GIN index on
``to_tsvector('simple', search_terms)``; the BM25 arithmetic happens here, because
``ts_rank`` has no inverse document frequency and ranks a common word as high as a rare
one. On SQLite (the embedded default) the user's rows are scored in Python.

Every query carries ``user_id``: no path of this module can read another user's rows.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import bindparam, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from memstack.errors import ExtractionError
from memstack.ids import validate_id
from memstack.models import MessageRow
from memstack.tokens import STOPWORDS, has_cjk, lexical_terms

if TYPE_CHECKING:
    from memstack.extraction.chat import ChatJSON
    from memstack.settings import Settings

log = logging.getLogger("memstack.lexical")

# Okapi BM25 constants; the usual values, fine for chat turns of a few lines.
K1 = 1.2
B = 0.75
# Candidate rows read per query: a term that occurs everywhere would otherwise drag
# the user's whole history out of the database. The newest rows win the cut.
MAX_CANDIDATES = 3000
# Corpus statistics (row count, mean length) change slowly; recomputing them on every
# query would scan all the user's rows.
STATS_TTL_S = 30.0

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
_TSQUERY_TERM = re.compile(r"^\w+$")


@dataclass(frozen=True)
class Rewrite:
    """The query as the retrieval channels see it."""

    original: str
    terms: tuple[str, ...]
    weights: Mapping[str, float]
    entities: tuple[str, ...] = ()
    temporal: bool = False
    # "date": the question asks when something happened; "latest": the newest state.
    time_intent: Literal["date", "latest"] | None = None
    source: Literal["rules", "llm"] = "rules"
    # Terms added for the query's words by their neighbours (memstack.word_neighbours).
    expanded: tuple[str, ...] = ()

    @property
    def keywords(self) -> str:
        """Entities and terms as one string: a second, denser query for the embedder."""
        seen: list[str] = []
        for w in (*self.entities, *self.terms):
            if w.casefold() not in {s.casefold() for s in seen}:
                seen.append(w)
        return " ".join(seen)


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


@dataclass(frozen=True)
class LexicalHit:
    msg_id: str
    session_id: str
    role: str
    content: str
    created_at: datetime
    score: float


@dataclass(frozen=True)
class _Doc:
    msg_id: str
    session_id: str
    role: str
    content: str
    created_at: datetime
    terms: Counter[str]
    length: int


def bm25(
    weights: Mapping[str, float],
    docs: Sequence[Counter[str]],
    *,
    n_docs: int,
    avgdl: float,
    df: Mapping[str, int],
    lengths: Sequence[int],
) -> list[float]:
    """Okapi BM25 of each doc for weighted query terms (idf with the +1 that keeps it > 0)."""
    idf = {t: math.log(1.0 + (n_docs - df.get(t, 0) + 0.5) / (df.get(t, 0) + 0.5)) for t in weights}
    avgdl = avgdl or 1.0
    scores = []
    for tf, length in zip(docs, lengths, strict=True):
        s = 0.0
        norm = K1 * (1.0 - B + B * length / avgdl)
        for term, w in weights.items():
            f = tf.get(term, 0)
            if f:
                s += w * idf[term] * f * (K1 + 1.0) / (f + norm)
        scores.append(s)
    return scores


def _rank(
    docs: list[_Doc], weights: Mapping[str, float], n_docs: int, avgdl: float, limit: int
) -> list[LexicalHit]:
    df: Counter[str] = Counter()
    for d in docs:
        df.update(t for t in weights if t in d.terms)
    scores = bm25(
        weights,
        [d.terms for d in docs],
        n_docs=max(n_docs, len(docs)),
        avgdl=avgdl,
        df=df,
        lengths=[d.length for d in docs],
    )
    ranked = sorted(
        ((s, d) for s, d in zip(scores, docs, strict=True) if s > 0),
        key=lambda p: (-p[0], -p[1].created_at.timestamp(), p[1].msg_id),
    )
    return [
        LexicalHit(d.msg_id, d.session_id, d.role, d.content, d.created_at, s)
        for s, d in ranked[:limit]
    ]


@dataclass
class _StatsCache:
    ttl_s: float = STATS_TTL_S
    entries: dict[str, tuple[float, int, float]] = field(default_factory=dict)

    def get(self, user_id: str) -> tuple[int, float] | None:
        hit = self.entries.get(user_id)
        if hit is None or time.monotonic() - hit[0] > self.ttl_s:
            return None
        return hit[1], hit[2]

    def put(self, user_id: str, n: int, avgdl: float) -> None:
        if len(self.entries) > 10000:
            self.entries.clear()
        self.entries[user_id] = (time.monotonic(), n, avgdl)


_stats = _StatsCache()


def _tsquery(terms: Iterable[str]) -> str:
    safe = [t for t in terms if _TSQUERY_TERM.match(t)]
    return " | ".join(f"'{t}'" for t in safe)


def _doc(row: Any) -> _Doc:
    terms = row.search_terms.split() if row.search_terms else []
    return _Doc(
        row.msg_id,
        row.session_id,
        row.role,
        row.content,
        row.created_at,
        Counter(terms),
        len(terms),
    )


async def _pg_stats(session: AsyncSession, user_id: str) -> tuple[int, float]:
    cached = _stats.get(user_id)
    if cached is not None:
        return cached
    row = (
        await session.execute(
            text(
                "SELECT count(*) AS n, coalesce(avg(array_length("
                "string_to_array(nullif(search_terms, ''), ' '), 1)), 0) AS avgdl "
                "FROM memory_message WHERE user_id = :u"
            ),
            {"u": user_id},
        )
    ).one()
    n, avgdl = int(row.n), float(row.avgdl)
    _stats.put(user_id, n, avgdl)
    return n, avgdl


_ROW_COLUMNS = (
    MessageRow.msg_id,
    MessageRow.session_id,
    MessageRow.role,
    MessageRow.content,
    MessageRow.created_at,
    MessageRow.search_terms,
)
# Built once: building a statement costs more CPU per call than running this one.
# PostgreSQL: the newest MAX_CANDIDATES of the user's messages matching the query, found
# by the full-text index. SQLite: all of the user's messages, scored in Python.
_PG_MATCHES = (
    select(*_ROW_COLUMNS)
    .where(
        MessageRow.user_id == bindparam("user_id"),
        text("to_tsvector('simple', search_terms) @@ to_tsquery('simple', :q)"),
    )
    .order_by(MessageRow.created_at.desc())
    .limit(MAX_CANDIDATES)
)
_ALL_ROWS = (
    select(*_ROW_COLUMNS)
    .where(MessageRow.user_id == bindparam("user_id"))
    .order_by(MessageRow.created_at.desc())
)


async def search(
    session: AsyncSession, user_id: str, rewrite: Rewrite, *, limit: int = 50
) -> list[LexicalHit]:
    """The user's best ``limit`` ledger messages for the rewritten query, by BM25."""
    validate_id("user_id", user_id)
    if not rewrite.weights or limit <= 0:
        return []
    if session.get_bind().dialect.name == "postgresql":
        query = _tsquery(rewrite.weights)
        if not query:
            return []
        n_docs, avgdl = await _pg_stats(session, user_id)
        rows = (await session.execute(_PG_MATCHES, {"user_id": user_id, "q": query})).all()
        docs = [_doc(r) for r in rows]
    else:
        rows = (await session.execute(_ALL_ROWS, {"user_id": user_id})).all()
        all_docs = [_doc(r) for r in rows]
        n_docs = len(all_docs)
        avgdl = sum(d.length for d in all_docs) / n_docs if n_docs else 0.0
        docs = [d for d in all_docs if any(t in d.terms for t in rewrite.weights)]
    return _rank(docs, rewrite.weights, n_docs, avgdl, limit)


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
        from memstack.extraction.chat import ChatJSON, shared_breaker

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
