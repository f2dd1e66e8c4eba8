"""Checks of what callers send, applied at every boundary before anything is written.

Text that a store would refuse later must be refused now, with a clear error: a NUL
character (PostgreSQL's text type cannot hold one, and the job would fail on every
delivery), a lone surrogate (not encodable as UTF-8, so Redis, SQL and the HTTP
response all fail on it), or more bytes than the limit of its kind. Structured values
(task state, fact values) are bounded in size and nesting depth, so that reading them
back can neither blow the stack nor take seconds.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

from memstack.core.errors import InvalidContent, ValidationError

# Deepest nesting of a JSON value memstack stores: task state and fact values are
# records, not trees; rendering and comparing them recurse.
MAX_DEPTH = 16


def check_text(kind: str, value: object, *, max_bytes: int | None = None) -> str:
    """``value`` if it is a string without NUL or lone surrogates and within
    ``max_bytes`` (UTF-8), else :class:`InvalidContent` naming ``kind``."""
    if not isinstance(value, str):
        raise InvalidContent(f"{kind} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise InvalidContent(f"{kind} contains a NUL character (\\u0000), which cannot be stored")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidContent(
            f"{kind} is not valid Unicode text: a lone surrogate at position {exc.start}"
        ) from None
    if max_bytes is not None and size > max_bytes:
        raise InvalidContent(f"{kind} is {size} bytes; the limit is {max_bytes}")
    return value


def check_json(kind: str, value: object, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> str:
    """The JSON text of ``value`` if it is plain JSON (objects with string keys, arrays,
    strings, finite numbers, booleans, null) no deeper than ``max_depth`` and within
    ``max_bytes``; every string checked as :func:`check_text` does."""
    _walk(kind, value, max_depth, max_depth)
    encoded = json.dumps(value, ensure_ascii=False)
    size = len(encoded.encode("utf-8"))
    if size > max_bytes:
        raise InvalidContent(f"{kind} is {size} bytes as JSON; the limit is {max_bytes}")
    return encoded


def _walk(kind: str, value: object, depth_left: int, max_depth: int) -> None:
    # Iterative: a value nested 100,000 deep must be refused, not crash the checker.
    stack: list[tuple[Any, int]] = [(value, depth_left)]
    while stack:
        item, left = stack.pop()
        if isinstance(item, str):
            check_text(kind, item)
        elif isinstance(item, bool) or item is None or isinstance(item, int):
            continue
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidContent(f"{kind} holds {item!r}, which JSON cannot carry")
        elif isinstance(item, dict | list | tuple):
            if left <= 0:
                raise InvalidContent(f"{kind} is nested deeper than {max_depth} levels")
            if isinstance(item, dict):
                for key in item:
                    if not isinstance(key, str):
                        raise InvalidContent(f"{kind} has a key that is not a string: {key!r}")
                    check_text(kind, key)
                children = list(item.values())
            else:
                children = list(item)
            stack.extend((child, left - 1) for child in children)
        else:
            raise InvalidContent(f"{kind} holds a {type(item).__name__}, which is not JSON")


# The ends of what a datetime can hold, in UTC: a moment beyond them is read as these.
EARLIEST = datetime.min.replace(tzinfo=UTC)
LATEST = datetime.max.replace(tzinfo=UTC)


def check_moment(kind: str, value: object) -> datetime:
    """``value`` (an aware datetime, or epoch seconds) as a UTC datetime, else
    :class:`ValidationError` naming ``kind``: a naive datetime is ambiguous. A moment a
    datetime cannot hold in UTC (year 1 at +01:00, epoch seconds past year 9999) is any
    valid time, so it is clamped to :data:`EARLIEST` / :data:`LATEST` instead of refused."""
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValidationError(
                f"{kind}: a time must be timezone-aware (a naive datetime is ambiguous)"
            )
        try:
            return value.astimezone(UTC)
        except OverflowError:
            return EARLIEST if value.year == 1 else LATEST
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError(f"{kind} must be a datetime or epoch seconds, got {value!r}")
    try:
        return datetime.fromtimestamp(value, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return EARLIEST if value < 0 else LATEST


def safe_text(value: object, limit: int = 300) -> str:
    """``value`` as text fit for a log line or a prompt: lone surrogates escaped, cut."""
    text = str(value)[: limit + 1]
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[:limit] + "…"
