"""Times as the viewer reads them: one format per language, in the viewer's own zone,
used both for what a page shows and for what its time fields take.

The zone is the browser's (the page's script puts its IANA name in a cookie); without it,
UTC. English reads ``1 Nov 2026, 17:00:00 UTC+8``, Chinese ``2026年11月1日 17:00:00
UTC+8``: neither can be misread as another day, as ``01/11/2026`` can. A field takes the
text a page shows (so a time can be copied from a row into the as-of field), with or
without its seconds, time or zone, and ISO 8601 besides.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from starlette.requests import Request

ZONE_COOKIE = "memstack_ui_tz"
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# An IANA name ("Asia/Shanghai", "America/Argentina/Buenos_Aires", "UTC"): anything else
# in the cookie is not looked up, so no path outside the zone database is ever opened.
_ZONE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+){0,2}")

_EN_DATE = r"(?P<day>\d{1,2})\s+(?P<month>[A-Za-z]{3,9})\.?\s+(?P<year>\d{4})"
_ZH_DATE = r"(?P<year>\d{4})\s*年\s*(?P<month>\d{1,2})\s*月\s*(?P<day>\d{1,2})\s*日"
_CLOCK = r"(?:\s*,?\s*(?P<hour>\d{1,2}):(?P<minute>\d{2})(?::(?P<second>\d{2}))?)?"
_OFFSET = r"(?:\s*(?:UTC|GMT)(?:\s*(?P<sign>[+\-−])(?P<oh>\d{1,2})(?::?(?P<om>\d{2}))?)?)?"
_SHOWN = [re.compile(rf"^\s*{date}{_CLOCK}{_OFFSET}\s*$", re.I) for date in (_EN_DATE, _ZH_DATE)]


def zone_of(request: Request) -> tzinfo:
    """The viewer's zone from the cookie the script sets; UTC when it is missing or
    names no zone this server knows."""
    name = request.cookies.get(ZONE_COOKIE, "")
    if len(name) > 64 or not _ZONE_NAME.fullmatch(name):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return UTC


def zone_name(zone: tzinfo) -> str:
    """The name the page tells its script, which compares it with the browser's."""
    return zone.key if isinstance(zone, ZoneInfo) else "UTC"


def offset_label(offset: timedelta | None) -> str:
    """``UTC``, ``UTC+8``, ``UTC-3``, ``UTC+5:30``."""
    minutes = round((offset or timedelta()).total_seconds() / 60)
    if minutes == 0:
        return "UTC"
    sign = "+" if minutes > 0 else "-"
    hours, rest = divmod(abs(minutes), 60)
    return f"UTC{sign}{hours}" + (f":{rest:02d}" if rest else "")


def show(moment: datetime, lang: str, zone: tzinfo) -> str:
    """``moment`` in the viewer's zone and language (a moment without a zone is UTC)."""
    local = (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(zone)
    clock = f"{local:%H:%M:%S} {offset_label(local.utcoffset())}"
    if lang == "zh":
        return f"{local.year}年{local.month}月{local.day}日 {clock}"
    return f"{local.day} {MONTHS[local.month - 1]} {local.year}, {clock}"


def _month(text: str) -> int | None:
    if text.isdigit():
        return int(text)
    prefix = text[:3].title()
    return MONTHS.index(prefix) + 1 if prefix in MONTHS else None


def _shown(text: str, zone: tzinfo) -> datetime | None:
    for pattern in _SHOWN:
        found = pattern.match(text)
        if found is None:
            continue
        parts = found.groupdict()
        month = _month(parts["month"])
        if month is None:
            return None
        if parts["sign"]:
            sign = -1 if parts["sign"] in "-−" else 1
            shift = timedelta(hours=int(parts["oh"]), minutes=int(parts["om"] or 0))
            zone = timezone(sign * shift)
        elif re.search(r"(UTC|GMT)\s*$", text, re.I):
            zone = UTC
        try:
            return datetime(
                int(parts["year"]),
                month,
                int(parts["day"]),
                int(parts["hour"] or 0),
                int(parts["minute"] or 0),
                int(parts["second"] or 0),
                tzinfo=zone,
            )
        except ValueError:
            return None  # 31 Feb, 25:00
    return None


def parse(text: str, zone: tzinfo) -> datetime | None:
    """The moment ``text`` names, read as a page shows times (either language) or as ISO
    8601; a time without a zone is the viewer's. None when it names no moment."""
    text = text.strip()
    moment = _shown(text, zone)
    if moment is None:
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    return moment.astimezone(UTC)
