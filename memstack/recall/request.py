"""One context() call's inputs, checked once and handed to each step of the call."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from memstack.core import namespaces as ns
from memstack.core.errors import InvalidContent, ValidationError
from memstack.core.ids import validate_id
from memstack.core.inputs import check_text
from memstack.core.settings import Settings
from memstack.recall.assembly import Labels, labels_for, section_tokens
from memstack.recall.lexical import Rewrite, rewrite_query
from memstack.text.locales import resolve_locale
from memstack.text.periods import Period, named_period
from memstack.text.token_counts import line_tokens


@dataclass(frozen=True)
class Request:
    user_id: str
    session_id: str
    query: str  # stripped
    locale: str  # the caller's, else the setting's; "auto" resolved against the query
    labels: Labels
    system_text: str
    total: int  # the token budget
    reserved: int  # tokens of the system text and the current input
    now_s: float
    period: Period | None  # the time span the query names
    # Integration namespaces whose messages may be recalled besides the conversation's.
    namespaces: frozenset[str]
    # The rules' rewrite; the call replaces it with the widened one once it is known.
    rewrite: Rewrite


def make_request(
    settings: Settings,
    user_id: str,
    session_id: str,
    query: str,
    *,
    budget_tokens: int | None,
    now: datetime | float | None,
    locale: str | None,
    system: str | None,
    namespaces: Iterable[str] = (),
) -> Request:
    validate_id("user_id", user_id)
    asked = ns.check_all(namespaces)
    validate_id("session_id", session_id)
    if not check_text("query", query, max_bytes=settings.max_message_bytes).strip():
        raise InvalidContent("query must be a non-empty string")
    query = query.strip()
    locale = resolve_locale(locale or settings.locale, query)
    labels = labels_for(locale)
    total = settings.budget_tokens if budget_tokens is None else budget_tokens
    if not isinstance(total, int) or isinstance(total, bool) or total <= 0:
        raise ValidationError(f"budget_tokens must be a positive integer, got {total!r}")
    system_text = labels.system if system is None else system
    reserved = line_tokens(system_text) + section_tokens(labels.input, [query])
    if reserved > total:
        raise ValidationError(
            f"the system text and the query take {reserved} tokens, more than budget_tokens={total}"
        )
    now_s = _epoch_s(now)
    # Dates in the query are read in now's time zone; epoch seconds mean UTC.
    period = named_period(
        query, now if isinstance(now, datetime) else datetime.fromtimestamp(now_s, UTC)
    )
    return Request(
        user_id=user_id,
        session_id=session_id,
        query=query,
        locale=locale,
        labels=labels,
        system_text=system_text,
        total=total,
        reserved=reserved,
        now_s=now_s,
        period=period,
        namespaces=asked,
        rewrite=rewrite_query(query),
    )


def _epoch_s(now: datetime | float | None) -> float:
    if now is None:
        return time.time()
    if isinstance(now, datetime):
        if now.tzinfo is None:
            raise ValidationError("now must be timezone-aware")
        return now.timestamp()
    if isinstance(now, bool) or not isinstance(now, int | float):
        raise ValidationError(f"now must be a datetime or epoch seconds, got {type(now).__name__}")
    return float(now)
