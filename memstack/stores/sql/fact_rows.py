"""How a stored fact is read: :class:`StoredFact`, its value bounded, the columns every
read of the fact table and its archive selects."""

from __future__ import annotations

import json
import logging
from typing import Any

from sqlalchemy import Text, case, func, null
from sqlalchemy import cast as sql_cast
from sqlalchemy.sql.elements import ColumnElement

from memstack.core.facts.vocabulary import depth_within
from memstack.core.inputs import MAX_DEPTH
from memstack.types import StoredFact as StoredFact

log = logging.getLogger("memstack.stores.sql.facts")

# What a read hands on. Values written now are at most max_fact_value_bytes and 8
# levels deep; these bounds only keep a value stored before the checks existed (an LLM's
# 20 MB or 500-deep answer) from costing every context() seconds or a RecursionError:
# such a value is read as withheld (None) and left out of current facts.
READ_MAX_VALUE_BYTES = 64 * 1024
READ_MAX_DEPTH = MAX_DEPTH


def value_text(table: Any, dialect: str) -> ColumnElement[Any]:
    """The value's JSON text, or NULL when it is too large to hand on. On PostgreSQL the
    stored (possibly compressed) size is checked first: it costs nothing, so a 20 MB
    value is never rendered as text, let alone sent."""
    as_text = sql_cast(table.fact_value, Text)
    if dialect == "postgresql":
        return case(
            (func.pg_column_size(table.fact_value) > READ_MAX_VALUE_BYTES, null()),
            (func.octet_length(as_text) > READ_MAX_VALUE_BYTES, null()),
            else_=as_text,
        )
    return case((func.length(as_text) > READ_MAX_VALUE_BYTES, null()), else_=as_text)


_WITHHELD_LOGGED: set[int] = set()


def decode_value(fact_id: int, raw: object) -> tuple[Any, bool]:
    """``(value, withheld)`` from the JSON text a read selected; never raises."""
    value: Any = None
    if isinstance(raw, str) and len(raw) <= READ_MAX_VALUE_BYTES:
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            raw = None
        else:
            if depth_within(value, READ_MAX_DEPTH):
                return value, False
    if fact_id not in _WITHHELD_LOGGED and len(_WITHHELD_LOGGED) < 10_000:
        _WITHHELD_LOGGED.add(fact_id)
        log.warning(
            "fact %s: stored value withheld (over %d bytes, deeper than %d, or not JSON)",
            fact_id,
            READ_MAX_VALUE_BYTES,
            READ_MAX_DEPTH,
        )
    return None, True


def stored_fact(row: Any) -> StoredFact:
    """A fact from a result row of :data:`FACT_COLUMNS` with the value as JSON text."""
    value, withheld = decode_value(row.id, row.fact_value)
    return StoredFact(
        id=row.id,
        user_id=row.user_id,
        session_id=row.session_id,
        msg_id=row.msg_id,
        key=row.fact_key,
        value=value,
        type=row.fact_type,
        confidence=row.confidence,
        source=row.source,
        valid_from=row.valid_from,
        valid_until=row.valid_until,
        supersedes_id=row.supersedes_id,
        ended_by_msg_id=row.ended_by_msg_id,
        withheld=withheld,
        candidate_id=row.candidate_id,
    )


FACT_COLUMNS = (
    "id",
    "user_id",
    "session_id",
    "msg_id",
    "fact_key",
    "fact_value",
    "fact_type",
    "confidence",
    "source",
    "valid_from",
    "valid_until",
    "supersedes_id",
    "ended_by_msg_id",
    "candidate_id",
)


def fact_columns(table: Any, dialect: str) -> list[ColumnElement[Any]]:
    return [
        value_text(table, dialect).label(c) if c == "fact_value" else getattr(table, c)
        for c in FACT_COLUMNS
    ]
