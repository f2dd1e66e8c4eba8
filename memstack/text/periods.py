"""The calendar period a question names: "on 11 December 2023", "in May", "last week",
"昨天", "2023年5月".

A question that names when ("What did John share with Tim in January 2024?") is about
messages of that period, however well other messages match its words; ranking favours
them (``ranking.PERIOD_MATCH``) and drops recency, which the named period replaces.
Periods are calendar days, weeks (Monday first), months and years in the time zone of
``now``, half-open. A date without a year is the latest such date not after ``now``.
Only numerals are read: "五月" and "the fifth of May" name nothing here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

_MONTHS = (
    "january february march april may june july august september october november december"
).split()
_MONTH = "|".join([*_MONTHS, *(m[:3] for m in _MONTHS), "sept"])
_MONTH_TITLE = "|".join(m.title() for m in _MONTHS)
_DAY = r"(?P<d>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<y>(?:19|20)\d\d)"

# Most specific first; the first pattern that matches names the period.
_DAYS = (
    re.compile(r"\b(?P<y>(?:19|20)\d\d)-(?P<m>\d{1,2})-(?P<d>\d{1,2})\b"),
    re.compile(rf"\b{_DAY}\s+(?:of\s+)?(?P<m>{_MONTH})\.?(?:,?\s+{_YEAR})?\b", re.I),
    re.compile(rf"\b(?P<m>{_MONTH})\.?\s+{_DAY}\b(?:,?\s+{_YEAR}\b)?", re.I),
    re.compile(r"(?:(?P<y>\d{4})\s*年\s*)?(?P<m>\d{1,2})\s*月\s*(?P<d>\d{1,2})\s*[日号]"),
)
_MONTHS_NAMED = (
    re.compile(rf"\b(?P<m>{_MONTH})\.?,?\s+{_YEAR}\b", re.I),
    re.compile(r"(?P<y>\d{4})\s*年\s*(?P<m>\d{1,2})\s*月(?!\s*\d)"),
    # A month without a year only after a preposition and capitalised: "may" is a verb.
    re.compile(rf"\b(?:in|during|last|this|of)\s+(?P<m>{_MONTH_TITLE})\b"),
)
_YEARS = (
    re.compile(rf"\b(?:in|during|of)\s+{_YEAR}\b", re.I),
    re.compile(r"(?P<y>\d{4})\s*年(?!\s*\d)"),
)
_DAYS_AGO = re.compile(r"\b(?P<n>\d{1,3})\s+days?\s+ago\b|(?P<zh>\d{1,3})\s*天前", re.I)
# (pattern, unit, how many units back): "last week" is the calendar week before this one.
_RELATIVE = (
    (re.compile(r"\bthe day before yesterday\b|前天", re.I), "day", 2),
    (re.compile(r"\byesterday\b|昨天|昨日", re.I), "day", 1),
    (re.compile(r"\btoday\b|今天|今日", re.I), "day", 0),
    (re.compile(r"\blast week\b|上周|上星期|上个星期|上礼拜", re.I), "week", 1),
    (re.compile(r"\bthis week\b|这周|本周|这个星期|这星期", re.I), "week", 0),
    (re.compile(r"\blast month\b|上个月|上月", re.I), "month", 1),
    (re.compile(r"\bthis month\b|这个月|本月", re.I), "month", 0),
    (re.compile(r"\blast year\b|去年", re.I), "year", 1),
    (re.compile(r"\bthis year\b|今年", re.I), "year", 0),
)


@dataclass(frozen=True)
class Period:
    """``[start, end)`` as epoch seconds, and the words that named it."""

    start: float
    end: float
    text: str

    def contains(self, epoch_s: float, slack_s: float = 0.0) -> bool:
        return self.start - slack_s <= epoch_s < self.end + slack_s


def named_period(query: str, now: datetime) -> Period | None:
    """The period ``query`` names, read in ``now``'s time zone (which must be aware);
    None when it names none. An impossible day ("30 February 2023") names its month."""
    today = now.date()
    for pattern in _DAYS:
        for m in pattern.finditer(query):
            if _verb(m["m"]) and m["y"] is None:
                continue
            day = _date(m["y"], _month(m["m"]), int(m["d"]), today)
            if day is not None:
                return _span(day, day + timedelta(days=1), now, m.group(0))
    for pattern in _MONTHS_NAMED:
        for m in pattern.finditer(query):
            first = _date(m.groupdict().get("y"), _month(m["m"]), 1, today)
            if first is not None:
                return _span(first, _add_months(first, 1), now, m.group(0))
    for pattern in _YEARS:
        if year := pattern.search(query):
            y = int(year["y"])
            return _span(date(y, 1, 1), date(y + 1, 1, 1), now, year.group(0))
    if ago := _DAYS_AGO.search(query):
        day = today - timedelta(days=int(ago["n"] or ago["zh"]))
        return _span(day, day + timedelta(days=1), now, ago.group(0))
    for pattern, unit, back in _RELATIVE:
        if relative := pattern.search(query):
            start, end = _relative(unit, back, today)
            return _span(start, end, now, relative.group(0))
    return None


def _verb(month: str | None) -> bool:
    """Lower-case "may 5" or "march 20" is more likely a verb than a date."""
    return month in ("may", "march", "mar")


def _month(text: str) -> int:
    if text.isdigit():
        return int(text)
    low = text.lower()
    return next(i for i, name in enumerate(_MONTHS, 1) if name.startswith(low[:3]))


def _date(year: str | None, month: int, day: int, today: date) -> date | None:
    """The date, or without a year the latest one not after ``today``."""
    try:
        if year is not None:
            return date(int(year), month, day)
        found = date(today.year, month, day)
        return found if found <= today else date(today.year - 1, month, day)
    except ValueError:
        return None


def _add_months(first: date, n: int) -> date:
    months = first.year * 12 + first.month - 1 + n
    return date(months // 12, months % 12 + 1, 1)


def _relative(unit: str, back: int, today: date) -> tuple[date, date]:
    if unit == "day":
        start = today - timedelta(days=back)
        return start, start + timedelta(days=1)
    if unit == "week":
        start = today - timedelta(days=today.weekday() + 7 * back)
        return start, start + timedelta(days=7)
    if unit == "month":
        start = _add_months(today.replace(day=1), -back)
        return start, _add_months(start, 1)
    return date(today.year - back, 1, 1), date(today.year - back + 1, 1, 1)


def _span(start: date, end: date, now: datetime, text: str) -> Period:
    tz = now.tzinfo
    return Period(
        datetime.combine(start, time(), tz).timestamp(),
        datetime.combine(end, time(), tz).timestamp(),
        text,
    )
