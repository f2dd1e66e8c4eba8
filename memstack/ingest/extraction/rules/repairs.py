"""Slips the user corrects as they type: "I'm in Lyon, sorry, I meant Lille", "以后用日语回复
我吧，啊不，韩语", "预算五百，打错了，六百".

A repair marker ("sorry, I meant", "不对", "说错了", "no wait") followed by a bare value says
what the user meant in place of a value just before it. Instead of a rule per key, the
sentence is read again as the user meant it: the value the marker corrects is replaced
by the repair, and the marker and the repair are dropped. Whatever key the value had
(a city, a language, an amount, a goal), the ordinary rules then read the corrected
words, so a repair works for every key the rules read.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from memstack.core.facts.fact import Fact
from memstack.core.facts.vocabulary import LANGUAGES

# Said just after the slip, before what was meant.
_MARKER = re.compile(
    r"(?:[，,。.…~～\s]|^)(?:啊|呃|哦|额|嗯)?(?:不对不对|不对|不是不是|说错了|打错了|写错了|口误|更正一下|纠正一下"
    r"|我是说|准确地说|(?:啊|呃|哦|额)不)[，,。.…!！\s]*"
    r"|(?i:(?:[,.;…]\s*|\s+-+\s*|\s+)(?:sorry|oops|whoops|typo|correction|no wait|wait no|wait"
    r"|I mean|I meant|or rather|my bad|scratch that)\b[,.:!…\s-]*)"
)
# What opens or closes the repair without being part of it.
_REPAIR_OPEN = re.compile(
    r"^(?:应该是|其实是|是|改成|换成)"
    r"|^(?i:(?:sorry|I meant|I mean|meant|it's|its|it is|that's|that is"
    r"|should be|make (?:it|that)|not\s+\S+\s*,?\s*but)\s+)+"
)
_REPAIR_CLOSE = re.compile(r"(?:才对|吧|啦|了|哈|啊|呀)?[，,。.!！…~～\s]*$|(?i:\s+(?:lol|haha))$")
_MAX_REPAIR_CHARS = 24
_NUMBER = re.compile(
    r"(?:[$¥€£]\s*)?\d[\d,.]*\s*(?:[kKwW万千]|(?i:grand|bucks?))?|[零一二两三四五六七八九十百千万]{1,8}"
)


def _repair_text(after: str) -> str | None:
    """The bare value said after the marker, or None when the words after it are a
    statement of their own (which the rules read as they are)."""
    clause = re.split(r"[，,；;。！？!?]|(?<!\d)\.(?!\d)", after, maxsplit=1)[0]
    v = _REPAIR_CLOSE.sub("", _REPAIR_OPEN.sub("", clause.strip())).strip()
    if not v or len(v) > _MAX_REPAIR_CHARS or re.search(r"[我你他她]|(?i:\b(?:I|my|you)\b)", v):
        return None
    return v


def _slip(before: str, repair: str, facts: list[Fact]) -> tuple[int, int] | None:
    """Where in ``before`` the value the repair corrects stands: the nearest value of a
    fact read from it, else the nearest word of the repair's own kind (an amount, a
    language)."""
    spans: list[tuple[int, int]] = []
    for f in facts:
        values = f.value if isinstance(f.value, list) else [f.value]
        for v in values:
            text = v.split(": ")[-1] if isinstance(v, str) else None
            if text and (at := before.rfind(text)) >= 0:
                spans.append((at, at + len(text)))
    if _NUMBER.fullmatch(repair):
        spans += [m.span() for m in _NUMBER.finditer(before)]
    elif repair.casefold() in LANGUAGES:
        spans += [
            m.span()
            for m in re.finditer("|".join(map(re.escape, LANGUAGES)), before, re.IGNORECASE)
        ]
    # The slip stands in the clause the marker closes: "1996年11月4号出生的，双子座…啊不对，
    # 是天蝎座" corrects the star sign, not the birthday of the clause before.
    clause_start = max((m.end() for m in re.finditer(r"[，,；;:：]", before)), default=0)
    near = [s for s in spans if s[1] > clause_start]
    return max(near, key=lambda s: s[1]) if near else None


def repaired(sentence: str, read: Callable[[str], list[Fact]]) -> str:
    """``sentence`` as the user meant it: each slip replaced by its repair. ``read``
    gives the facts the rules read from a text, to find the value a repair corrects."""
    for _ in range(3):  # "A, no, B, sorry, C": each repair in turn
        m = next((m for m in _MARKER.finditer(sentence) if m.start() > 0), None)
        if m is None:
            return sentence
        repair = _repair_text(sentence[m.end() :])
        before = sentence[: m.start()]
        slip = _slip(before, repair, read(before)) if repair else None
        if repair is None or slip is None:
            return sentence
        rest = sentence[m.end() :]
        end = re.search(r"[，,；;。！？!?]|(?<!\d)\.(?!\d)", rest)
        after = rest[end.start() :] if end else ""
        sentence = before[: slip[0]] + repair + before[slip[1] :] + after
    return sentence
