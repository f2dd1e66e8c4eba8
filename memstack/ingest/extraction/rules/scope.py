"""What no longer holds, or never held here: clauses about the past, where the user comes
from, a trip, or a move still to come.

A fact is the user's *current* state. "I used to live in Leeds", "以前是老师", "本来想买
Switch" describe what was; "originally from Porto", "老家齐齐哈尔" where the user comes
from; "在呼和浩特出差", "in Oslo for a conference" where the user is this week; "下个月搬
去都柏林" where the user will be. Rather than teach every rule each of these, the clause
that carries such a cue is hidden from the rules, as a hypothetical is: the past from
every rule (but budgets, which read their own changes), the rest from the city's.

What a past clause says is not lost: when it names the value the user is known to have
("I was a nurse" with occupation nurse on record), the value has ended and is withdrawn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memstack.ingest.extraction.rules.lexicon import DIETS_EN
from memstack.ingest.extraction.rules.sentences import MASK, clause_starts

# The clause describes a state that has ended.
_PAST = re.compile(
    # ("本来就喜欢" has always liked: not past)
    r"以前|之前|曾经|原来|原先|当年|那时候?|小时候|早年|过去(?!了)|本来(?!就)|退休前|上一份|前东家|前公司"
    r"|(?i:\bused\s+to\b|\bformerly\b|\bpreviously\b|\bback\s+when\b|\bback\s+in\s+(?:the\s+day|\d{4})"
    r"|\bin\s+my\s+(?:past|previous|old)\s+life\b"
    # "I was a nurse", "well, WAS a line cook" ("it was a mess" is about something else)
    r"|(?<!\bit\s)(?<!\bthat\s)(?<!\bthis\s)(?<!\bhe\s)(?<!\bshe\s)(?<!\bwhich\s)(?<!\bwho\s)"
    r"\bwas\s+(?:an?\s+(?!\w+\s+(?:person|kid|fan)\b)|(?=" + DIETS_EN + r")\b)"
    r"|\bI\s+(?:worked|lived)\s+(?:as|in)\b[^,.;]*\b(?:for\s+\w+\s+years|until|before)\b"
    r"|\bmy\s+(?:old|former|previous)\s+(?:job|city|place|home)\b"
    # "we had a hamster named Biscuit": a pet (or a home) that is no more
    r"|\b(?:I|we)\s+(?:once\s+)?had\s+(?:a|an|two|three)\s+(?!\w+\s+(?:idea|time|chat|talk|look)\b))"
)
# The clause is denied by the user: "不是我不喜欢韩餐，是…", "it's not that I hate X, …".
_DENIED = re.compile(
    r"(?:^|(?<=[，,。;；!！]))\s*不是(?:说|因为)?我"
    r"|(?i:\bit'?s\s+not\s+that\s+I\b|(?:^|(?<=[,.;]))\s*not\s+that\s+I\b|\bnot\s+because\s+I\b)"
)
# Where the user comes from, not where they live.
_ORIGIN = re.compile(
    r"老家|祖籍|出生在|出生于|生在|长大|来自|(?:^|[是，,])\S{2,6}人(?=$|[，,。！!]|哈|啊)"
    r"|(?i:\boriginally\b|\bgrew\s+up\b|\bborn\s+(?:in|and)\b|\bhome\s*town\b|\braised\s+in\b"
    r"|\bI'?m\s+from\b|\bI\s+am\s+from\b|\bcome\s+from\b|\bnative\s+of\b)"
)
# Somewhere the user is for a while: a trip, a conference, a stopover.
_TRIP = re.compile(
    r"出差|旅游|旅行|度假|游玩|玩[几两一]?[天趟圈]|去玩|来玩|开会|参会|参加|培训|转机|探亲|看展|考察|一趟|路过"
    r"|(?:去|到|飞)\S{2,6}?玩"
    r"|(?i:\bvisit(?:ing)?\b|\btrip\b|\bvacation\b|\bholiday\b|\bconference\b|\bstopover\b"
    r"|\blayover\b|\btravel(?:l)?ing\b|\bflying\s+(?:to|into|out)\b|\bheading\s+to\b"
    r"|\bgoing\s+to\s+[A-Z]|\bfor\s+(?:a|the)\s+(?:week|weekend|wedding|few days|couple of days)\b"
    r"|\bthis\s+week\b|\bon\s+business\b)"
)
# A move that has not happened yet.
_FUTURE = re.compile(
    r"下(?:个)?月|明年|年底|打算|准备|计划|将要|要去|会去|想搬|考虑"
    r"|(?i:\bnext\s+(?:month|year|week|spring|summer|fall|autumn|winter)\b|\bwill\s+(?:be\s+)?mov"
    r"|\bplan(?:ning)?\s+to\b|\babout\s+to\b|\bthinking\s+(?:of|about)\b|\bconsidering\b"
    r"|\bgoing\s+to\s+move\b|\bmoving\s+to\s+\S+\s+(?:next|in|soon)\b)"
)


@dataclass(frozen=True)
class Views:
    """One sentence as each group of rules may read it."""

    current: str  # past clauses hidden: for every key but the city
    city: str  # also hidden: origin, trips, moves to come
    past: tuple[str, ...]  # the past clauses themselves


def _clauses(sentence: str) -> list[tuple[int, int]]:
    starts = clause_starts(sentence)
    return list(zip(starts, [*starts[1:], len(sentence)], strict=True))


def _hide(sentence: str, spans: list[tuple[int, int]]) -> str:
    for start, end in sorted(spans, reverse=True):
        # The separator that ends the clause stays: rules anchor on clause starts.
        kept = len(sentence[start:end].rstrip("，,；;:： \t"))
        sentence = sentence[:start] + MASK + sentence[start + kept :]
    return sentence


def views(sentence: str) -> Views:
    """The sentence with each kind of clause that is no current statement hidden."""
    clauses = _clauses(sentence)

    def having(*patterns: re.Pattern[str]) -> list[tuple[int, int]]:
        return [c for c in clauses if any(p.search(sentence, c[0], c[1]) for p in patterns)]

    past = having(_PAST, _DENIED)
    elsewhere = having(_PAST, _DENIED, _ORIGIN, _TRIP, _FUTURE)
    return Views(
        current=_hide(sentence, past),
        city=_hide(sentence, elsewhere),
        past=tuple(sentence[a:b] for a, b in past),
    )


_TO_PRESENT = (
    (re.compile(r"以前|之前|曾经|原来|原先|当年|那时候?|小时候|早年|过去|本来|退休前"), ""),
    (re.compile(r"(?i:\bused\s+to\s+be\b)"), "am"),
    (re.compile(r"(?i:\bused\s+to\s+)"), ""),
    (re.compile(r"(?i:(?:\bI\s+)?\bwas\s+(?=an?\b))"), "I'm "),
    (re.compile(rf"(?i:(?:\bI\s+)?\bwas\s+(?=(?:{DIETS_EN})\b))"), "I'm "),
    (re.compile(r"(?i:\bI\s+worked\b)"), "I work"),
    (re.compile(r"(?i:\bI\s+lived\b)"), "I live"),
    (re.compile(r"(?i:\b(?:formerly|previously)\s+)"), ""),
)


def presented(clause: str) -> str:
    """A past clause told in the present ("I was a nurse" → "I'm a nurse"), so the rules
    read which value it names."""
    for pattern, replacement in _TO_PRESENT:
        clause = pattern.sub(replacement, clause)
    return clause
