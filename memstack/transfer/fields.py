"""Reading one line of an export: its JSON object, and the fields of a record, each
checked once, with the line number in every error (:mod:`memstack.transfer.records`
reads the records with these)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn

from memstack.core.errors import ValidationError
from memstack.core.ids import BY_HAND, MAX_MSG_ID_LEN, validate_id
from memstack.core.inputs import check_text


def parse_line(raw: bytes, n: int) -> dict[str, Any] | None:
    """The JSON object of line ``n``; None for a blank line."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail_line(n, f"not UTF-8 text ({exc.reason} at byte {exc.start})")
    if not text.strip():
        return None
    try:
        obj = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        fail_line(n, f"not valid JSON ({str(exc)[:120]})")
    if not isinstance(obj, dict):
        fail_line(n, f"a record is a JSON object, not {type(obj).__name__}")
    return obj


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def fail_line(n: int, problem: str) -> NoReturn:
    raise ValidationError(f"line {n}: {problem}")


class Fields:
    """The fields of one record, each read once and checked; errors name the line."""

    def __init__(self, obj: dict[str, Any], n: int, kind: str) -> None:
        self.obj, self.n, self.kind = obj, n, kind
        self.read = {"type"}

    def fail(self, problem: str) -> NoReturn:
        fail_line(self.n, f"{self.kind} record: {problem}")

    def get(self, name: str, *, optional: bool = False) -> Any:
        self.read.add(name)
        if name not in self.obj and not optional:
            self.fail(f"missing field {name!r}")
        return self.obj.get(name)

    def checked(self, check: Callable[[], Any]) -> Any:
        try:
            return check()
        except ValidationError as exc:
            self.fail(str(exc))
        except ValueError as exc:  # an integer too long to write as text
            self.fail(str(exc)[:120])

    def id(self, name: str, *, max_len: int | None = None) -> str:
        value = self.checked(lambda: validate_id(name, self.get(name)))
        if max_len is not None and len(value) > max_len:
            self.fail(f"{name} is longer than {max_len} characters")
        return str(value)

    def text(self, name: str, *, max_bytes: int | None = None, optional: bool = False) -> Any:
        value = self.get(name, optional=optional)
        if value is None and optional:
            return None
        return self.checked(lambda: check_text(name, value, max_bytes=max_bytes))

    def whole(self, name: str, *, low: int = 0, optional: bool = False) -> Any:
        value = self.get(name, optional=optional)
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            self.fail(f"{name} must be a whole number from {low}, got {value!r}")
        return value

    def share(self, name: str) -> float:
        """A number from 0 to 1 (a confidence)."""
        value = self.get(name)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not (math.isfinite(value) and 0 <= value <= 1)
        ):
            self.fail(f"{name} must be a number from 0 to 1, got {value!r}")
        return float(value)

    def choice(self, name: str, options: Sequence[str]) -> str:
        value = self.get(name)
        if value not in options:
            self.fail(f"{name} {str(value)[:40]!r} is not one of {', '.join(options)}")
        return str(value)

    def time(self, name: str, *, optional: bool = False) -> Any:
        value = self.get(name, optional=optional)
        if value is None and optional:
            return None
        try:
            at = datetime.fromisoformat(value) if isinstance(value, str) else None
        except ValueError:
            at = None
        if at is None or at.tzinfo is None:
            self.fail(f"{name} must be an RFC 3339 time with its offset, got {value!r}")
        return at.astimezone(UTC)

    def msg_id(
        self,
        name: str,
        user_id: str,
        session_id: str | None,
        *,
        optional: bool = False,
        by_hand: bool = False,
    ) -> Any:
        """A message id of the user (and session); with ``by_hand``, also the id of a
        fact set or ended by hand, which names no message."""
        value = self.get(name, optional=optional)
        if value is None and optional:
            return None
        if by_hand and is_by_hand(value):
            return value
        problem = msg_id_problem(value, user_id, session_id)
        if problem:
            self.fail(f"{name} {str(value)[:80]!r} {problem}")
        return value

    def done(self) -> None:
        unknown = sorted(set(self.obj) - self.read)
        if unknown:
            self.fail(f"unknown field {unknown[0]!r}")


_MSG_ID_CHARS = re.compile(r"^[A-Za-z0-9_.:@/-]+$")
_BY_HAND = re.compile(rf"^{re.escape(BY_HAND)}[0-9a-f]{{32}}$")


def is_by_hand(value: object) -> bool:
    """Whether ``value`` is the id ``set_fact`` or ``delete_fact`` gives its row (a
    random one, of no user and no session)."""
    return isinstance(value, str) and _BY_HAND.match(value) is not None


def msg_id_problem(value: object, user_id: str, session_id: str | None) -> str | None:
    """Why ``value`` is not a message id of ``user_id`` (and of ``session_id`` if given),
    or None. An id made since sessions were scoped names its user and session
    (``<ts>-<user>/<session>-<seq>``, ``<user>/<session>:<caller id>``), and must name
    these: a file cannot take an id another user's message will have. An older id
    (no ``/``) names neither and is accepted as it is."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if len(value) > MAX_MSG_ID_LEN or not _MSG_ID_CHARS.match(value):
        return f"is not a message id (at most {MAX_MSG_ID_LEN} of [A-Za-z0-9_.:@/-])"
    if "/" not in value:
        return None
    left, _, right = value.partition("/")
    user = re.escape(user_id)
    if not (left == user_id or re.fullmatch(rf"\d+-{user}", left)):
        return "is not a message id of this record's user"
    session = re.escape(session_id) if session_id is not None else r"[A-Za-z0-9_.:@-]+"
    if left == user_id:
        ok = re.fullmatch(rf"{session}:[A-Za-z0-9_.:@-]+", right)
    else:
        ok = re.fullmatch(rf"{session}-\d+", right)
    return None if ok else "is not a message id of this record's session"
