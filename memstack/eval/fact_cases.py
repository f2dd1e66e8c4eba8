"""Fact cases: the shared facts dataset's format and comparison rules, extended with
several speakers, a name binding and trap classes (eval-data/facts/FORMAT.md).

Text is compared after NFKC, casefold and dropping whitespace and punctuation, equal or
(both of two or more characters) one containing the other; a list matches as a set under
that rule; an amount on equal amount and currency.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memstack.core.errors import ValidationError

MONEY_KEYS = frozenset({"budget_limit"})
LIST_KEYS = frozenset(
    {"likes", "dislikes", "focus", "do_not_recommend", "allergies", "family", "pets"}
)
TEXT_KEYS = frozenset({"name", "city", "occupation", "language", "goal", "diet", "birthday"})
KEYS = MONEY_KEYS | LIST_KEYS | TEXT_KEYS
# The reference scorer's clock: the same times make the same facts (late messages,
# validity) whichever of the two runs a file.
T0 = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)
# The shared format allows 1-4 user messages; ours adds other speakers and the
# assistant, so a conversation may run longer.
MAX_MESSAGES = 8
TRAPS = frozenset(
    """plain other_speaker alias assistant quoted code question hypothetical sarcasm negation
    self_correction change retraction past_vs_present third_party numbers list_add
    time""".split()
)


# --- comparison ----------------------------------------------------------------------------


def norm(text: Any) -> str:
    """NFKC, casefold, every whitespace and punctuation character removed."""
    s = unicodedata.normalize("NFKC", str(text)).casefold()
    return "".join(c for c in s if not c.isspace() and not unicodedata.category(c).startswith("P"))


def text_match(want: Any, got: Any) -> bool:
    """Equal norms, or one containing the other when both have two characters or more:
    "Samsung" ~ "Samsung phones", "花生" ~ "花生过敏"; "猫" never matches "橘猫"."""
    a, b = norm(want), norm(got)
    if not a or not b:
        return False
    return a == b or (min(len(a), len(b)) >= 2 and (a in b or b in a))


def list_match(want: Sequence[Any], got: Any) -> bool:
    """Set equality under :func:`text_match`: every expected item matches some item got,
    and every item got matches some expected item."""
    items = got if isinstance(got, list) else [got]
    items = [g for g in items if norm(g)]
    if not items:
        return False
    return all(any(text_match(w, g) for g in items) for w in want) and all(
        any(text_match(w, g) for w in want) for g in items
    )


def money_match(want: dict[str, Any], got: Any) -> bool:
    if not isinstance(got, dict):
        return False
    raw: Any = got.get("amount")
    try:
        amount = float(raw)
    except (TypeError, ValueError, OverflowError):
        return False
    currency = str(got.get("currency", "")).upper()
    return bool(abs(amount - want["amount"]) < 1e-6 and currency == want["currency"])


def value_match(key: str, want: Any, got: Any) -> bool:
    if key in MONEY_KEYS:
        return money_match(want, got)
    if key in LIST_KEYS:
        return list_match(want, got)
    if isinstance(got, list):  # a one-item list for a text key is read as its item
        return len(got) == 1 and text_match(want, got[0])
    if isinstance(got, dict):
        return False
    return text_match(want, got)


# --- cases ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One message of a case: the user's own (role ``user``, no name), another
    participant's (``user`` with a name not bound to the user) or the assistant's."""

    text: str
    role: str = "user"
    name: str | None = None


@dataclass(frozen=True)
class Case:
    id: str
    lang: str
    messages: tuple[Turn, ...]
    expected: dict[str, Any]  # key -> value, in the file's order
    absent: tuple[str, ...]
    note: str = ""
    traps: tuple[str, ...] = ()
    identity: tuple[str, ...] = ()  # names bound to the user before the conversation


def _check_value(key: str, value: Any) -> bool:
    if key in MONEY_KEYS:
        amount = value.get("amount") if isinstance(value, dict) else None
        return (
            isinstance(amount, int) and not isinstance(amount, bool) and bool(value.get("currency"))
        )
    if key in LIST_KEYS:
        return isinstance(value, list) and bool(value) and all(isinstance(i, str) for i in value)
    return isinstance(value, str) and bool(value)


def parse_case(c: Any, seen_ids: set[str]) -> Case:
    """One case as the README defines it; :class:`ValueError` names what is wrong."""
    if not isinstance(c, dict):
        raise ValueError("a case is a JSON object")
    if not isinstance(c.get("id"), str) or not c["id"] or c["id"] in seen_ids:
        raise ValueError("missing or duplicate id")
    if c.get("lang") not in ("zh", "en"):
        raise ValueError('lang must be "zh" or "en"')
    msgs = c.get("messages")
    if not (isinstance(msgs, list) and 1 <= len(msgs) <= MAX_MESSAGES):
        raise ValueError(f"messages must be a list of 1-{MAX_MESSAGES} turns")
    turns = tuple(_turn(m) for m in msgs)
    expected: dict[str, Any] = {}
    if not isinstance(c.get("expected", []), list):
        raise ValueError("expected must be a list")
    for e in c.get("expected", []):
        key = e.get("key") if isinstance(e, dict) else None
        if key not in KEYS or key in expected:
            raise ValueError(f"expected key {key!r} is unknown or repeated")
        if not _check_value(key, e.get("value")):
            raise ValueError(f"expected value of {key} has the wrong shape")
        expected[key] = e["value"]
    absent = c.get("absent", [])
    if not isinstance(absent, list) or not all(k in KEYS for k in absent):
        raise ValueError("absent must list known keys")
    if set(absent) & set(expected):
        raise ValueError("a key cannot be both expected and absent")
    if not expected and not absent:
        raise ValueError("a case must expect or forbid something")
    note = c.get("note", "")
    traps = c.get("trap", [])
    if not isinstance(traps, list) or not all(t in TRAPS for t in traps):
        raise ValueError(f"trap must list trap classes ({', '.join(sorted(TRAPS))})")
    names = c.get("identity", [])
    if not isinstance(names, list) or not all(isinstance(n, str) and n.strip() for n in names):
        raise ValueError("identity must list names")
    return Case(
        c["id"],
        c["lang"],
        turns,
        expected,
        tuple(absent),
        str(note),
        tuple(traps),
        tuple(names),
    )


def _turn(m: Any) -> Turn:
    """A message: a text (the user speaking) or ``{"role", "name"?, "text"}``."""
    if isinstance(m, str):
        if not m.strip():
            raise ValueError("every message must be a non-blank text")
        return Turn(m)
    if not isinstance(m, dict) or set(m) - {"role", "name", "text"}:
        raise ValueError('a message is a text or {"role", "name", "text"}')
    text, role, name = m.get("text"), m.get("role"), m.get("name")
    if role not in ("user", "assistant"):
        raise ValueError('a message\'s role must be "user" or "assistant"')
    if not isinstance(text, str) or not text.strip():
        raise ValueError("every message must be a non-blank text")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ValueError("a message's name must be a non-blank text")
    return Turn(text, role, name)


def load_cases(path: Path) -> list[Case]:
    """The cases of a JSONL file; :class:`ValidationError` names the first bad line."""
    cases: list[Case] = []
    ids: set[str] = set()
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                case = parse_case(raw, ids)
            except ValueError as exc:  # json.JSONDecodeError included
                raise ValidationError(f"{path}:{n}: {exc}") from None
            ids.add(case.id)
            cases.append(case)
    return cases
