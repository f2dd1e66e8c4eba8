"""Scoring recall candidates: channel fusion, answer propagation, recency.

Candidates are messages. Their relevance fuses the channels (one or two dense searches
and BM25) by reciprocal rank; a message also inherits half the score of the message it
answers (the answer to "what did you do at the picnic?" rarely says "picnic"); messages
with almost no words are discounted; when the question names an author of the
candidates ("What books has Tim read?"), the other authors' messages count less; when
it names a period ("in January 2024", "yesterday"), that period's messages count more.
Recency halves every ``recency_half_life_days`` before ``now``.

A dense hit is an exchange unit: the user's turn and the replies after it, embedded as
one text. Its rank says the unit matched, not which of its messages did, so the turn
that opens it (the user's words, which is what questions about a person ask for) takes
the full credit and the replies a share, unless the question names their author. A
reply never also inherits the credit of the turn before it for the same hit: that
would count one match twice and put the reply above the turn that matched.

The specification's score is ``0.7·relevance + 0.3·recency``. Added like that, recency lets a
fresh message nobody asked about outrank the old one that answers the question: on
LoCoMo dev the sum cost 0.05 of evidence recall (0.696 against 0.745). The default
blend multiplies instead, ``relevance·(0.7 + 0.3·recency)``: the same weights and the
same end points (a fresh best match scores 1, an old one 0.7), but an irrelevant item
stays near 0 however fresh it is. ``recency_blend="add"`` restores the sum.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from memstack.core.settings import Settings
from memstack.recall.snippets import contains_word
from memstack.text.periods import Period
from memstack.text.terms import STOPWORDS, has_cjk, lexical_terms

# Fusion constants, chosen on the LoCoMo dev split as a whole (docs/benchmarks.md).
# A small k lets a channel's top hit beat items that are only mediocre in every channel.
RRF_K = 5
CHANNEL_WEIGHTS = {"vector": 1.0, "vector_rewrite": 1.0, "lexical": 1.5}
# Share of the score of the message a candidate answers (the one before it in its session).
ANSWER_PROPAGATION = 0.5
# Messages with fewer lexical terms than this are discounted in proportion: "ok, see you!"
# is almost never what a question is about.
MIN_CONTENT_TERMS = 6
# Factor on messages by another author when the question names one ("What books has Tim
# read?" is about Tim's messages). Not 0: the other side's "Tim, you said…" can answer.
# On LoCoMo dev: 0.5 → +0.023 evidence recall, 0.3 → +0.030, 0.1 → +0.019.
OTHER_AUTHOR = 0.3
# Factor on a Chinese question's lexical credit. jieba's search terms split a paraphrase
# into words its answer need not share, and e5 reads Chinese; chosen on the Chinese sets
# (docs/benchmarks.md).
CJK_LEXICAL = 0.3
# Share of an exchange unit's dense credit for its messages after the first: the unit
# matched, most likely for the words of the turn that opens it.
UNIT_TAIL = 0.3
# Factor on messages of the period a question names ("on 11 December 2023"), with a day
# of slack each side for time zones and late-night talk. On LoCoMo dev (80 of 760
# questions name a date; offline): x2 → +0.005, x3 → +0.006, x5 → +0.006.
PERIOD_MATCH = 3.0
PERIOD_SLACK_S = 86400.0


def recency(age_s: float, half_life_days: float) -> float:
    """Exponential decay: 1 now, 0.5 after one half-life; the future counts as now."""
    return float(0.5 ** (max(age_s, 0.0) / (half_life_days * 86400.0)))


_NAME = re.compile(r"\b[A-Z][a-z]+(?:'s)?\b")


def dense_rewrite(query: str) -> str | None:
    """The second dense query: the question without title-case words.

    Names and question words pull a query towards every message that merely contains
    them (an embedding is insensitive to rare words next to frequent ones);
    the rewrite keeps the topic. None when the rewrite would be the query itself, and
    for Chinese, which has no case: its keywords embedded as a bag of words ranked the
    answer lower than the question itself does (the question leaves out the user's
    names instead, :func:`without_names`).
    """
    if has_cjk(query):
        return None
    removed = _NAME.findall(query)
    if all(w.lower().split("'")[0] in STOPWORDS for w in removed):
        # Only "What"/"When"/"Did" at the start: the same question, embedded twice
        # for nothing (one more embedding and one more vector query per call).
        return None
    text = re.sub(r"\s+", " ", _NAME.sub(" ", query)).strip(" ?!.,")
    if not text or text == query or not lexical_terms(text):
        return None
    return text


def without_names(query: str, names: Iterable[str]) -> str | None:
    """A Chinese question without the names the user speaks under, for the dense search.

    A dense hit's text opens with its author ("李娜: 我家猫…"), so a question about the
    user in the third person ("李娜的猫得了什么病？") matches every unit of theirs by the
    name, the short ones best, and its topic weighs little. Without the name the topic
    decides; the lexical channel still matches the name. None when the
    question names none of them, or is nothing else. English questions keep their
    names here: their second dense query already leaves them out (:func:`dense_rewrite`).
    A one-character name is left alone (芳 is also part of 芳香), and a Latin name is
    removed only as a whole word (Ann, not the "ann" of "annual").
    """
    if not has_cjk(query):
        return None
    text = query
    for name in sorted({n.strip() for n in names if len(n.strip()) > 1}, key=len, reverse=True):
        pattern = re.escape(name)
        if name.isascii():
            pattern = rf"(?<![A-Za-z0-9]){pattern}(?![A-Za-z0-9])"
        text = re.sub(pattern, "", text, flags=re.IGNORECASE)
    text = re.sub(r"\s+", " ", text).strip()
    if text == query or not lexical_terms(text):
        return None
    return text


@dataclass
class Candidate:
    msg_id: str
    ranks: dict[str, int] = field(default_factory=dict)
    similarity: float | None = None
    chunk_text: str = ""
    chunk_msg_ids: tuple[str, ...] = ()
    created_at: float | None = None
    role: str = "user"
    name: str | None = None
    content: str | None = None
    prev_id: str | None = None
    # Channels whose rank came from an exchange unit this message does not open.
    unit_tail: set[str] = field(default_factory=set)
    lexical_share: float | None = None
    fused: float = 0.0
    relevance: float = 0.0
    recency: float = 0.0
    score: float = 0.0
    text: str = ""
    tokens: int = 0
    header: str = ""
    header_tokens: int = 0
    body: str = ""
    body_tokens: int = 0


def fuse(
    candidates: dict[str, Candidate],
    *,
    settings: Settings,
    now_s: float,
    lengths: Mapping[str, int],
    time_intent: str | None = None,
    query: str = "",
    period: Period | None = None,
) -> list[Candidate]:
    """Score candidates in place and return them best first (see the module docstring)."""
    named = named_authors(query, candidates.values())
    by_share = weak_lexical_counts_less(query)
    credit = {m: channel_credit(c, lengths.get(m), named, by_share) for m, c in candidates.items()}
    for m, c in candidates.items():
        c.fused = sum(credit[m].values())
        prev = candidates.get(c.prev_id) if c.prev_id is not None else None
        if prev is not None:
            # Only what the message it answers earned elsewhere: a rank both hold in a
            # channel is one hit, already counted here.
            c.fused += ANSWER_PROPAGATION * sum(
                v for ch, v in credit[prev.msg_id].items() if c.ranks.get(ch) != prev.ranks[ch]
            )
    if named:
        for c in candidates.values():
            if c.name is not None and c.name.casefold() not in named:
                c.fused *= OTHER_AUTHOR
    if period is not None:
        for c in candidates.values():
            if c.created_at is not None and period.contains(c.created_at, PERIOD_SLACK_S):
                c.fused *= PERIOD_MATCH
    top = max((c.fused for c in candidates.values()), default=0.0) or 1.0
    w_rel, w_rec = settings.weight_relevance, settings.weight_recency
    if period is not None or time_intent == "date":
        # "When did I…?" is as likely about last year as last week, and a named period
        # says when by itself: recency says nothing.
        w_rel, w_rec = 1.0, 0.0
    for c in candidates.values():
        c.relevance = c.fused / top
        c.recency = (
            recency(now_s - c.created_at, settings.recency_half_life_days)
            if c.created_at is not None
            else 0.0
        )
        if settings.recency_blend == "add":
            c.score = w_rel * c.relevance + w_rec * c.recency
        else:
            c.score = c.relevance * (w_rel + w_rec * c.recency)
    return sorted(candidates.values(), key=lambda c: (-c.score, c.msg_id))


def weak_lexical_counts_less(query: str) -> bool:
    """Whether a lexical match counts by the share of the question it matches, not by
    its rank alone, and by :data:`CJK_LEXICAL` of it.

    Chinese queries are segmented into many common words and single characters that
    carry no topic ("这次", "哪"), so a message matching only those still takes a rank.
    English terms are stemmed content words without stopwords: there a weak match still
    helps, and scaling it lost LoCoMo evidence (docs/benchmarks.md)."""
    return has_cjk(query)


def channel_credit(
    c: Candidate, n_terms: int | None, named: set[str], by_share: bool
) -> dict[str, float]:
    """What each channel's rank is worth to ``c``: reciprocal rank, weighted; a reply's
    share of its unit's dense hits; a Chinese lexical match by the share of the
    question it matches, and less."""
    credit: dict[str, float] = {}
    short = max(n_terms, 1) / MIN_CONTENT_TERMS if n_terms is not None else 1.0
    for ch, r in c.ranks.items():
        w = CHANNEL_WEIGHTS.get(ch, 1.0) / (RRF_K + r) * min(short, 1.0)
        if ch in c.unit_tail and (c.name is None or c.name.casefold() not in named):
            w *= UNIT_TAIL
        if ch == "lexical" and by_share:
            w *= CJK_LEXICAL * (c.lexical_share if c.lexical_share is not None else 1.0)
        credit[ch] = w
    return credit


def named_authors(query: str, candidates: Iterable[Candidate]) -> set[str]:
    """Authors of the candidates (casefolded) that the query names as a word."""
    low = query.casefold()
    authors = {c.name.casefold() for c in candidates if c.name}
    return {a for a in authors if contains_word(low, a)}
