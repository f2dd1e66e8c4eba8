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
    r"(?:[，,。.…~～\s]|^)(?:啊|呃|哦|额|嗯|诶|欸|唉)?(?:不对不对|不对|不是不是|说错了|打错了|写错了|口误|更正一下|纠正一下"
    r"|我是说|准确地说|(?:啊|呃|哦|额)不(?:是|对)?)[，,。.…!！\s]*"
    r"|(?i:(?:[,.;…]\s*|\s*[-–—]+\s*|\s+)(?:sorry|oops|whoops|typo|correction|no wait|wait no|wait"
    r"|I mean|I meant|or rather|my bad|scratch that)\b[,.:!…\s-]*)"
    # "I'm a pharmacist — well, pharmacy tech": a "well" set off on both sides takes the
    # word back (the dash reaches here as a comma)
    r"|(?:[,;]|\s[-–—]+)\s*(?i:well)\s*,\s*"
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


_NOT_X_BUT_Y = re.compile(
    r"[^，,。]{1,12}[，,]\s*(?:是|而是|应该是|(?i:it's|it is))\s*(?P<y>[^，,。]{1,24})"
)
_SPEAKS = re.compile(r"[我你他她]|(?i:\b(?:I|my|you|is|are|was)\b)")


def _repair_text(after: str, skip: int = 0) -> str | None:
    """The bare value said after the marker (``skip`` clauses on: "sorry, autocorrect,
    Haruko"), or None when the words after it are a statement of their own (which the
    rules read as they are)."""
    clauses = re.split(r"[，,；;。！？!?]|(?<!\d)\.(?!\d)", after, maxsplit=skip + 1)
    if len(clauses) <= skip:
        return None
    clause = clauses[skip]
    v = _REPAIR_CLOSE.sub("", _REPAIR_OPEN.sub("", clause.strip())).strip()
    if not v or len(v) > _MAX_REPAIR_CHARS or _SPEAKS.search(v):
        return None
    return v


def _kind(text: str) -> str:
    """What sort of word a value is: an amount, Chinese, a capitalised name, other."""
    if _NUMBER.fullmatch(text):
        return "number"
    if re.search(r"[\u4e00-\u9fff]", text):
        return "han"
    return "name" if text[:1].isupper() else "word"


def _slip(before: str, repair: str, facts: list[Fact]) -> tuple[int, int] | None:
    """Where in ``before`` the value the repair corrects stands: the nearest value of a
    fact read from it, else the nearest word of the repair's own kind (an amount, a
    language), of the same sort of word as the repair."""
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
    kind = _kind(repair)
    near = [s for s in spans if s[1] > clause_start and _kind(before[s[0] : s[1]]) == kind]
    return max(near, key=lambda s: s[1]) if near else None


def joined(sentences: list[str]) -> list[str]:
    """``sentences`` with a sentence that opens with a repair marker joined to the one
    before it ("reply in French from now on? — wait no, Spanish!!"): it corrects that
    sentence."""
    out: list[str] = []
    for s in sentences:
        m = _MARKER.match(" " + s)
        if out and m is not None and _repair_text(s[m.end() - 1 :]) is not None:
            out[-1] = f"{out[-1]} {s}"
        else:
            out.append(s)
    return out


def repaired(sentence: str, read: Callable[[str], list[Fact]]) -> str:
    """``sentence`` as the user meant it: each slip replaced by its repair. ``read``
    gives the facts the rules read from a text, to find the value a repair corrects. A
    marker followed by no value ("— sorry, typo brain, I mean Gdynia") is an aside, left
    out so the next marker meets the slip."""
    for _ in range(4):  # "A, no, B, sorry, C": each repair in turn
        markers = [m for m in _MARKER.finditer(sentence) if m.start() > 0]
        if not markers:
            return sentence
        m = markers[0]
        repair = _repair_text(sentence[m.end() :])
        before = sentence[: m.start()]
        if repair is not None and repair in before:
            # "我对桃子过敏，哦不是桃子，是李子": the marker names the slip, "是…" the repair
            named = _NOT_X_BUT_Y.match(sentence, m.end())
            repair = _repair_text(named.group("y")) if named else repair
        slip = _slip(before, repair, read(before)) if repair else None
        if slip is None:
            # "I'm Haruto — sorry, autocorrect, Haruko": a word of excuse, then the repair
            second = _repair_text(sentence[m.end() :], skip=1)
            slip = _slip(before, second, read(before)) if second else None
            repair = second if slip is not None else repair
        if slip is None or repair is None:
            aside = sentence[m.end() : markers[1].start()] if len(markers) > 1 else ""
            if not aside or len(aside.split()) > 3 or _SPEAKS.search(aside):
                return sentence
            sentence = before + sentence[markers[1].start() :]
            continue
        rest = sentence[m.end() :]
        end = re.search(r"[，,；;。！？!?]|(?<!\d)\.(?!\d)", rest)
        after = rest[end.start() :] if end else ""
        sentence = before[: slip[0]] + repair + before[slip[1] :] + after
    return sentence


def has_repair(text: str) -> bool:
    """Whether ``text`` corrects a slip somewhere (a repair marker after some words)."""
    return any(m.start() > 0 for m in _MARKER.finditer(text))
