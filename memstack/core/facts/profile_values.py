"""Value shapes of the personal keys: birthday, family, pets, allergies.

:mod:`memstack.core.facts.vocabulary` applies these; they live apart only to keep that
module within its size. Each shape is the one docs/facts.md promises, so a value reads
the same whichever extractor produced it and however the user wrote it.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "LABEL_KEYS",
    "allergen",
    "item_matches",
    "label_items",
    "named_item",
    "normalise_date",
    "split_named",
]

# --- birthday ----------------------------------------------------------------------------

_MONTHS = {
    name: n
    for n, names in enumerate(
        (
            "january jan",
            "february feb",
            "march mar",
            "april apr",
            "may",
            "june jun",
            "july jul",
            "august aug",
            "september sep sept",
            "october oct",
            "november nov",
            "december dec",
        ),
        start=1,
    )
    for name in names.split()
}
_MONTH = r"(?P<mname>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?:,?\s*(?P<year>\d{4}))?"
_CN_NUM = r"[\d一二三四五六七八九十〇零两]{1,3}"
_CN_DIGIT = {ch: i for i, ch in enumerate("零一二三四五六七八九")} | {"〇": 0, "两": 2}

# Tried in order on the whole text (after trimming); the first that matches decides.
_DATE_FORMS = (
    # 1990-10-08, 1990/10/8, 1990.10.08, an ISO timestamp's date
    re.compile(r"(?P<year>\d{4})[-/.](?P<month>\d{1,2})[-/.](?P<day>\d{1,2})(?:[T ].*)?"),
    # 10/08, 10-08, --10-08 (ISO without a year), 10/08/1990; a day over 12 first is D/M
    re.compile(r"-*(?P<month>\d{1,2})[-/.](?P<day>\d{1,2})(?:[-/.](?P<year>\d{4}|\d{2}))?"),
    # March 3, Mar. 3rd, March 3, 1990
    re.compile(_MONTH + r"\s+(?:the\s+)?" + _DAY + _YEAR, re.IGNORECASE),
    # 3 March, 3rd of March 1990
    re.compile(_DAY + r"\s+(?:of\s+)?" + _MONTH + _YEAR, re.IGNORECASE),
    # 1990年10月8日, 十月八号, 3月3日
    re.compile(
        rf"(?:(?:(?P<year>\d{{4}})|(?P<yy>\d{{2}}))\s*年\s*)?(?P<month>{_CN_NUM})\s*月"
        rf"\s*(?P<day>{_CN_NUM})\s*[日号]?"
    ),
)


def _small_int(text: str) -> int | None:
    """1-99 in digits or Chinese numerals (八, 十, 十二, 二十, 二十五); None otherwise."""
    if text.isdigit():
        return int(text)
    if "十" in text:
        tens, _, ones = text.partition("十")
        high = _CN_DIGIT.get(tens, -1) if tens else 1
        low = _CN_DIGIT.get(ones, -1) if ones else 0
        return None if high < 0 or low < 0 else high * 10 + low
    return _CN_DIGIT.get(text) if len(text) == 1 else None


def _valid_date(year: int | None, month: int, day: int) -> str | None:
    if not 1 <= month <= 12:
        return None
    # Without a year 29 February is a birthday like any other.
    last = calendar.monthrange(year if year is not None else 2000, month)[1]
    if not 1 <= day <= last:
        return None
    return f"{year:04d}-{month:02d}-{day:02d}" if year is not None else f"{month:02d}-{day:02d}"


def _from_match(m: re.Match[str]) -> str | None:
    parts = m.groupdict()
    month = _MONTHS[parts["mname"].casefold()] if parts.get("mname") else None
    if month is None:
        month = _small_int(parts["month"])
    day = _small_int(parts["day"])
    if month is None or day is None:
        return None
    raw_year = parts.get("year")
    # A two-digit year ("10/08/90") names no century: the day and month are still sure.
    year = int(raw_year) if raw_year and len(raw_year) == 4 else None
    if parts.get("yy"):
        # "98年" said of a birth: the latest year with those two digits that has passed.
        year = 1900 + int(parts["yy"])
        if year + 100 <= datetime.now(UTC).year:
            year += 100
    if year is not None and not 1800 <= year <= 2200:
        return None
    if parts.get("mname") is None and month > 12 and day <= 12:
        month, day = day, month  # 25/12: only the day can be over 12
    return _valid_date(year, month, day)


def normalise_date(value: Any) -> str:
    """A birthday as "MM-DD", or "YYYY-MM-DD" when the year is given.

    "1990-10-08", "10/08" (month first, unless the first number cannot be a month),
    "March 3", "3rd of March 1990", "十月八号", "1990年10月8日" and ``{"month": 3,
    "day": 3}`` are read; anything else raises ValueError (a lunar date cannot be
    placed on the calendar)."""
    if isinstance(value, Mapping):
        try:
            year = value.get("year")
            y = int(year) if year is not None else None
            found = _valid_date(y, int(value["month"]), int(value["day"]))
        except (KeyError, TypeError, ValueError, OverflowError):
            found = None
        if found is None:
            raise ValueError("no calendar date in a mapping")
        return found
    if not isinstance(value, str):
        raise ValueError(f"cannot read a date from {type(value).__name__}")
    text = value.strip().strip("。.!！")
    if len(text) <= 40 and "农历" not in text and "阴历" not in text:
        for form in _DATE_FORMS:
            m = form.fullmatch(text)
            if m and (found := _from_match(m)) is not None:
                return found
    raise ValueError(f"no calendar date in {text[:40]!r}")


# --- named list items: family and pets ----------------------------------------------------

_COLON = re.compile(r"\s*[:：]\s*")
_STRONG_SEP = re.compile(r"\s*(?:、|，|,|；|;|/)\s*")
_CONJUNCTION = re.compile(r"\s*(?:以及|和|与|及|跟|或者|或|&|\band\b|\bor\b)\s*", re.IGNORECASE)
_BRACKETED_NAME = re.compile(r"^(?P<what>[^(（]+?)\s*[(（](?P<name>[^)）]+)[)）]$")


def named_item(item: str) -> str:
    """ "wife:Anna", "姐姐：小雨", "dog (Rex)" → "wife: Anna", "姐姐: 小雨", "dog: Rex"."""
    s = item.strip()
    m = _BRACKETED_NAME.match(s)
    if m:
        s = f"{m['what'].strip()}: {m['name'].strip()}"
    what, colon, name = _split_colon(s)
    return f"{what}: {name}" if colon and what and name else s


def _split_colon(s: str) -> tuple[str, str, str]:
    parts = _COLON.split(s, maxsplit=1)
    return (parts[0], ":", parts[1]) if len(parts) == 2 else (s, "", "")


def split_named(text: str) -> list[str]:
    """Split a family or pets text into items without cutting a name list apart.

    "wife and two kids" → ["wife", "two kids"]; "wife: Anna and son: Tom" → ["wife: Anna",
    "son: Tom"]; but "kids: Anna and Tom" stays one item: a conjunction after a named item
    joins names unless what follows names a relation of its own."""
    items: list[str] = []
    for chunk in _STRONG_SEP.split(text):
        pieces = _CONJUNCTION.split(chunk)
        joins = _CONJUNCTION.findall(chunk)
        current = pieces[0]
        for joint, piece in zip(joins, pieces[1:], strict=True):
            if _COLON.search(current) and not _COLON.search(piece):
                current = f"{current}{joint}{piece}"
            else:
                items.append(current)
                current = piece
        items.append(current)
    return items


# Keys an LLM may use for one relation or one animal ("wife": "Anna"): the key is the
# label the value lacks, so {"wife": "Anna"} is kept as family "wife: Anna".
LABEL_KEYS: dict[str, tuple[str, ...]] = {
    "family": (
        "wife",
        "husband",
        "spouse",
        "partner",
        "son",
        "daughter",
        "kids",
        "children",
        "mother",
        "father",
        "mom",
        "dad",
        "sister",
        "brother",
        "妻子",
        "老婆",
        "丈夫",
        "老公",
        "儿子",
        "女儿",
        "孩子",
        "妈妈",
        "爸爸",
        "姐姐",
        "妹妹",
        "哥哥",
        "弟弟",
    ),
    "pets": ("dog", "cat", "狗", "猫"),
}


def label_items(label: str, items: list[str]) -> list[str]:
    """``items`` of a value given under a relation or animal key, each carrying ``label``
    unless it already names it or another one: {"wife": "Anna"} → ["wife: Anna"]."""
    low = label.casefold()
    return [item if ":" in item or low in item.casefold() else f"{label}: {item}" for item in items]


def item_matches(known: str, withdrawn: str) -> bool:
    """Whether ``withdrawn`` names the list item ``known``: the whole item, its label or its
    name ("cat" and "Tom" both name "cat: Tom"), or a text of two or more characters
    either contains ("the cat" was cleaned to "cat"; "retriever" ~ "golden retriever")."""
    w = withdrawn.casefold().strip()
    k = known.casefold().strip()
    if not w or not k:
        return False
    what, _, name = _split_colon(k)
    if w in (k, what, name):
        return True
    return len(w) >= 2 and any(len(p) >= 2 and (w in p or p in w) for p in (k, what, name))


# --- allergies ------------------------------------------------------------------------------

_ALLERGY_WORDS = re.compile(
    r"^(?:(?:an?|severe|mild)\s+)*(?:allergy|allergies|allergic)(?:\s+(?:to|of))?\s+"
    r"|\s+(?:allergy|allergies)$"
    r"|^对|过敏$|^过敏[:：]?",
    re.IGNORECASE,
)


def allergen(item: str) -> str:
    """The allergen alone: "peanut allergy" → "peanut", "对芒果过敏" → "芒果"; an item that
    would be left empty keeps its words."""
    trimmed = _ALLERGY_WORDS.sub("", item).strip()
    if trimmed != item:
        trimmed = _ALLERGY_WORDS.sub("", trimmed).strip()
    return trimmed or item
