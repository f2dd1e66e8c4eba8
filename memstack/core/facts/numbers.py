"""Numbers as people write them: digits, Chinese numerals and chat shorthand.

Part of the fact vocabulary (:mod:`memstack.core.facts.vocabulary` re-exports it):
amounts are read here, so 五千, "5,000" and "5k" are one number wherever they appear.
"""

from __future__ import annotations

import math
import re

_CN_DIGITS = {ch: i for i, ch in enumerate("零一二三四五六七八九")} | {"〇": 0, "两": 2, "俩": 2}
_CN_UNITS = {"十": 10, "百": 100, "千": 1000}
_CN_BIG = (("亿", 100_000_000), ("万", 10_000))
_ARABIC = re.compile(r"\d+(?:\.\d+)?")
_SUFFIX_MULT = {"k": 1000, "K": 1000, "w": 10_000}

# One token of a number as people type it. Chinese numerals must start with a digit or
# 十, so 千万 ("by all means") and 万一 ("in case") are not amounts; lowercase w is the
# chat shorthand for 万 (2w = 20 000), uppercase W is watts.
NUMBER_PATTERN = (
    r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
    # 1w5 = 15 000 and 2k5 = 2 500: as with 万, a digit after the unit counts one unit down
    r"(?:\s*(?:thousand|grand|million|mn)\b|[kKw千](?:\d(?![\d.,]))?(?![A-Za-z])"
    # 3万5 = 35 000 and 3万5千: a digit after 万 counts in thousands
    r"|万(?:\d千?(?![\d万千百十.]))?)?"
    r"|[一二两俩三四五六七八九十][零〇一二两俩三四五六七八九十百千万亿]*"
)


# Two digits side by side before a unit are a rough range: 三四百 is 300 to 400, 七八千
# 7000 to 8000; as a limit it is the larger.
_ROUGH = re.compile(r"([一二两三四五六七八九])([一二两三四五六七八九])(?=[十百千万])")


def _small_cn(text: str) -> float | None:
    """A number below 10 000: 三千五 → 3500, 八千零五 → 8005, 十 → 10, 1.5 → 1.5,
    三四百 → 400."""
    if not text:
        return None
    text = _ROUGH.sub(lambda m: max(m.group(1), m.group(2), key=_CN_DIGITS.__getitem__), text)
    if _ARABIC.fullmatch(text):
        return float(text)
    total = 0.0
    pending: float | None = None
    last_unit = 0
    after_unit = False  # a digit right after a unit is the shorthand 三千五 = 3500
    zero_seen = False
    i = 0
    while i < len(text):
        m = _ARABIC.match(text, i)
        if m:
            pending, i = float(m.group()), m.end()
            after_unit = False
            continue
        ch = text[i]
        i += 1
        if ch in _CN_DIGITS:
            if _CN_DIGITS[ch] == 0:
                zero_seen = True
            pending = float(_CN_DIGITS[ch])
        elif ch in _CN_UNITS:
            unit = _CN_UNITS[ch]
            total += (pending if pending is not None else 1.0) * unit
            pending, last_unit, after_unit, zero_seen = None, unit, True, False
            continue
        else:
            return None
        after_unit = after_unit and not zero_seen and pending is not None and last_unit > 0
    if pending is not None:
        total += pending * (last_unit // 10) if after_unit and last_unit >= 10 else pending
    return total


def _cn_number(text: str, shorthand: int = 0) -> float | None:
    for char, mult in _CN_BIG:
        if char in text:
            left, right = text.split(char, 1)
            high = _cn_number(left) if left else 1.0
            if high is None:
                return None
            # 一万二 = 12 000: a lone digit after a big unit counts in the next unit down.
            low = _cn_number(right, shorthand=mult // 10) if right else 0.0
            return None if low is None else high * mult + low
    if shorthand and len(text) == 1 and (text in _CN_DIGITS or text.isdigit()):
        return float((_CN_DIGITS[text] if text in _CN_DIGITS else int(text)) * shorthand)
    return _small_cn(text.lstrip("零〇"))


# Longest number parse_number reads (digits, separators, numerals and suffixes).
MAX_NUMBER_CHARS = 40


def parse_number(text: str) -> float | None:
    """Read a number written in digits, Chinese numerals or a mix.

    五千 → 5000, 两万 → 20000, 一万二 → 12000, 三千五 → 3500, 1.5万 → 15000,
    十万 → 100000, "5,000" → 5000, "3k" → 3000, "2w" → 20000, "1.2 million" → 1200000.
    Returns None when ``text`` is not a number.
    """
    s = text.strip().replace(",", "").replace("，", "")
    if len(s) > MAX_NUMBER_CHARS:
        # Nobody writes an amount this long; "一万万万…" would also recurse once per 万.
        return None
    n = _parse_number(s)
    return n if n is None or math.isfinite(n) else None


def _parse_number(s: str) -> float | None:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(thousand|grand|million|mn|m)", s, re.IGNORECASE)
    if m:
        mult = 1000 if m.group(2).lower() in ("thousand", "grand") else 1_000_000
        return float(m.group(1)) * mult
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKw千])(\d)", s)
    if m:
        unit = _SUFFIX_MULT.get(m.group(2), 1000)
        return float(m.group(1)) * unit + int(m.group(3)) * unit // 10
    if s and s[-1] in _SUFFIX_MULT and _ARABIC.fullmatch(s[:-1].strip()):
        return float(s[:-1].strip()) * _SUFFIX_MULT[s[-1]]
    if s and s[-1] in "万千" and _ARABIC.fullmatch(s[:-1].strip()):
        return float(s[:-1].strip()) * (10_000 if s[-1] == "万" else 1000)
    if not s or not re.fullmatch(r"[\d.零〇一二两俩三四五六七八九十百千万亿]+", s):
        return None
    return _cn_number(s)


def tidy_number(x: float) -> int | float:
    """8000.0 → 8000, so stored JSON reads the way people write amounts."""
    return int(x) if float(x).is_integer() else round(x, 2)


# --- numbers in English words ----------------------------------------------------------------

_ONES = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen".split()
    )
} | {"a": 1, "an": 1}
_TENS = {
    w: 10 * i
    for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split())
    if w != "_"
}
_SCALES = {"hundred": 100, "thousand": 1000, "grand": 1000, "k": 1000, "million": 1_000_000}
_WORD = "|".join(sorted([*_ONES, *_TENS], key=len, reverse=True))
# "twelve hundred", "two grand", "twenty-five hundred", "a thousand", "three hundred and
# fifty", "one and a half thousand": at least one number word with a scale word after it.
_SPELLED = re.compile(
    rf"(?i:\b(?:{_WORD})(?:[\s-]+(?:and\s+)?(?:{_WORD}|hundred|thousand|grand|million|a\s+half))*"
    r"[\s-]+(?:hundred|thousand|grand|million)\b(?:[\s-]+(?:and\s+)?(?:"
    rf"{_WORD})(?![\s-]+(?:hundred|thousand|grand|million)))*(?:[\s-]+(?:{_WORD}))?)"
)


# "fifty bucks", "ninety-nine dollars": number words without a scale, named as money.
_SPELLED_MONEY = re.compile(
    rf"(?i:\b(?:{_WORD})(?:[\s-]+(?:{_WORD}))?(?=\s+(?:dollars?|bucks?|euros?|pounds?|quid|yuan)\b))"
)


def _spelled_value(words: str) -> float | None:
    total = current = 0.0
    for w in re.split(r"[\s-]+", re.sub(r"(?i)\band\s+a\s+half\b", "half", words).casefold()):
        if w == "and":
            continue
        if w == "half":
            current += 0.5
        elif w in _ONES:
            current += _ONES[w]
        elif w in _TENS:
            current += _TENS[w]
        elif w in _SCALES and _SCALES[w] == 100:
            current = max(current, 1) * 100
        elif w in _SCALES:
            total += max(current, 1) * _SCALES[w]
            current = 0
    value = total + current
    return value or None


_HALF_A = re.compile(r"(?i:\bhalf\s+an?\s+(grand|thousand|k|million)\b)")


def spelled_out(text: str) -> str:
    """``text`` with amounts written in English words in digits: "twelve hundred bucks" →
    "1200 bucks", "two grand" → "2000", "twenty-five hundred" → "2500"."""

    def digits(m: re.Match[str]) -> str:
        value = _spelled_value(m.group())
        return m.group() if value is None else str(tidy_number(value))

    text = _HALF_A.sub(lambda m: str(tidy_number(_SCALES[m.group(1).casefold()] / 2)), text)
    return _SPELLED_MONEY.sub(digits, _SPELLED.sub(digits, text))
