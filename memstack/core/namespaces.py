"""Integration namespaces: memory an integration keeps in a user's store that is not
the user's conversation.

LangGraph's store (``MemstackStore``) keeps its items as messages, each value as JSON;
LlamaIndex's memory records an engine's chat turns. Both live in the user's ledger,
vectors and erasure like any message, so erasing or exporting the user takes them
too; but ``context()`` leaves them out unless it is asked for them
(``namespaces=("langgraph",)``), and then renders a stored value as text, not JSON.
``search()`` lists what memory holds, these included.

Which namespace a message is in is read from its id, so no column or migration is
needed and items written before namespaces existed are recognised too:

* ``langgraph``: the store's item ids, ``<key>@<created ms>.<20 hex>`` (as the store
  has always written them);
* any other: a caller id ``@<namespace>:<32 hex>`` (:func:`tagged_msg_id`).
"""

from __future__ import annotations

import itertools
import json
import re
import time
import uuid
from collections.abc import Iterable
from typing import Any

from memstack.core.errors import ValidationError

LANGGRAPH = "langgraph"
LLAMA_INDEX = "llama_index"
NAMESPACES = frozenset({LANGGRAPH, LLAMA_INDEX})

# A stored id is "<user>/<session>:<caller id>" for a caller's id; the tails below are
# caller ids only an integration writes.
_LANGGRAPH_ID = re.compile(r"^[^/]+/.+:.+@\d{1,13}\.[0-9a-f]{20}$")
_TAGGED_ID = re.compile(r"^[^/]+/.+:@(?P<ns>[a-z][a-z0-9_]*):[0-9a-f]{32}$")


_sequence = itertools.count()


def tagged_msg_id(namespace: str) -> str:
    """A new caller message id that puts the message in ``namespace``. The ledger
    orders messages of the same millisecond by id, so ids begin with the clock (ns) and
    this process's count: a process's messages keep the order they were written in."""
    order = f"{time.time_ns():016x}{next(_sequence) % 0x10000:04x}"
    return f"@{check(namespace)}:{order}{uuid.uuid4().hex[:12]}"


def namespace_of(msg_id: str) -> str | None:
    """The integration namespace of a stored message id; None for the user's own
    conversation."""
    tagged = _TAGGED_ID.match(msg_id)
    if tagged is not None:
        return tagged["ns"]
    return LANGGRAPH if _LANGGRAPH_ID.match(msg_id) else None


def check(namespace: object) -> str:
    if not isinstance(namespace, str) or namespace not in NAMESPACES:
        raise ValidationError(
            f"namespace {namespace!r} is not one of {sorted(NAMESPACES)} (the user's own "
            "conversation is always included)"
        )
    return namespace


def check_all(namespaces: Iterable[str]) -> frozenset[str]:
    if isinstance(namespaces, str):
        raise ValidationError("namespaces must be a list of names, not one string")
    return frozenset(check(n) for n in namespaces)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ", ".join(_text(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_text(v)}" for k, v in value.items())
    return json.dumps(value)


def as_text(content: str) -> str:
    """A stored JSON object as a line of text: the value of a one-field object (most
    items are ``{"text": ...}``), else ``key: value`` pairs; other content unchanged."""
    try:
        value = json.loads(content)
    except ValueError:
        return content
    if not isinstance(value, dict) or not value:
        return content
    if len(value) == 1:
        return _text(next(iter(value.values())))
    return _text(value)
