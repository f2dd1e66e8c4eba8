"""Semantic chunking of dialogue (docs/spec.md, Layers).

Cut by meaning, not by a fixed token count: one exchange (a user turn and the reply
that answers it) is the unit; a unit over ``split_chars`` is cut at paragraphs, a
paragraph still too long at sentences, and only text with no boundary at all is cut
hard; a piece under ``merge_chars`` joins a neighbour. A fixed 512-token cut splits
sentences in two and skews their vectors.

Lengths are in characters (a Chinese character counts one, like the specification's 字).
Pieces are returned stripped; only whitespace between pieces is dropped, never text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from memstack.core.messages import Message

Span = tuple[int, int]

# Boundaries from strongest to weakest. Each pattern matches the separator that ends a
# piece, and the cut falls after the match.
_BOUNDARIES: tuple[re.Pattern[str], ...] = (
    re.compile(r"\n[ \t\r\f\v]*\n\s*"),  # blank line: paragraph
    re.compile(r"\n\s*"),  # line break: list item, verse, short paragraph
    # Sentence ends: Chinese 。！？； (and …) with any closing quote or bracket; English
    # . ! ? only before whitespace so "3.5" and "e.g." inside a word stay whole.
    re.compile(r"[。！？；…]+[”’」』）)\]]*\s*|[.!?]+[\"')\]]*\s+"),
    # Clause: still better than the middle of a word; "5,000" and "10:30" stay whole.
    re.compile(r"[，、：]\s*|[,:;]\s+"),
    re.compile(r"\s+"),  # word
)
# Paragraphs stay separate chunks (each is embedded on its own); below that, pieces
# of one paragraph are packed back together up to the limit.
_PACK_FROM_LEVEL = 1


def _length(text: str, span: Span) -> int:
    return len(text[span[0] : span[1]].strip())


def _cut(text: str, span: Span, pattern: re.Pattern[str]) -> list[Span]:
    start, end = span
    pieces: list[Span] = []
    for match in pattern.finditer(text, start, end):
        if match.end() < end and match.end() > start:
            pieces.append((start, match.end()))
            start = match.end()
    pieces.append((start, end))
    return [p for p in pieces if _length(text, p) > 0]


def _hard_cut(text: str, span: Span, limit: int) -> list[Span]:
    start, end = span
    count = -(-(end - start) // limit)
    size = -(-(end - start) // count)  # equal pieces rather than a full ones and a stub
    return [(s, min(s + size, end)) for s in range(start, end, size)]


def _pack(text: str, spans: list[Span], limit: int) -> list[Span]:
    """Join adjacent spans up to ``limit``, aiming at equal sizes rather than a short tail."""
    total = _length(text, (spans[0][0], spans[-1][1]))
    pieces_needed = max(1, -(-total // limit))
    target = -(-total // pieces_needed)
    packed: list[Span] = [spans[0]]
    for span in spans[1:]:
        joined = (packed[-1][0], span[1])
        if _length(text, packed[-1]) < target and _length(text, joined) <= limit:
            packed[-1] = joined
        else:
            packed.append(span)
    return packed


def _split(text: str, span: Span, limit: int, level: int) -> list[Span]:
    if _length(text, span) <= limit:
        return [span]
    if level >= len(_BOUNDARIES):
        return _hard_cut(text, span, limit)
    parts = _cut(text, span, _BOUNDARIES[level])
    if len(parts) == 1:
        return _split(text, span, limit, level + 1)
    pieces = [piece for part in parts for piece in _split(text, part, limit, level + 1)]
    return _pack(text, pieces, limit) if level >= _PACK_FROM_LEVEL else pieces


def _merge_small(text: str, spans: list[Span], limit: int, small: int) -> list[Span]:
    spans = list(spans)
    i = 0
    while i < len(spans) and len(spans) > 1:
        if _length(text, spans[i]) >= small:
            i += 1
            continue
        options = []
        if i > 0:
            options.append((_length(text, (spans[i - 1][0], spans[i][1])), i - 1))
        if i + 1 < len(spans):
            options.append((_length(text, (spans[i][0], spans[i + 1][1])), i))
        fitting = [opt for opt in options if opt[0] <= limit]
        if not fitting:
            i += 1  # both neighbours are full: a short piece beats one over the limit
            continue
        _, left = min(fitting)
        spans[left : left + 2] = [(spans[left][0], spans[left + 1][1])]
        i = left  # the merged piece may still be short
    return spans


def split_semantic(text: str, *, split_chars: int = 500, merge_chars: int = 50) -> list[str]:
    """Cut ``text`` into pieces of at most ``split_chars`` characters at natural boundaries.

    Text within the limit comes back whole (stripped). Empty text gives ``[]``. A piece
    exceeds the limit never; it is shorter than ``merge_chars`` only when the text
    itself is, or when joining it to either neighbour would exceed the limit.
    """
    if split_chars <= 0:
        raise ValueError(f"split_chars must be positive, got {split_chars}")
    if merge_chars < 0:
        raise ValueError(f"merge_chars must not be negative, got {merge_chars}")
    spans = _split(text, (0, len(text)), split_chars, 0) if text.strip() else []
    if merge_chars:
        spans = _merge_small(text, spans, split_chars, merge_chars)
    return [text[s:e].strip() for s, e in spans]


@dataclass(frozen=True)
class Unit:
    """One exchange: the messages it holds, in order, and its text for embedding."""

    msg_ids: tuple[str, ...]
    text: str


# How many messages after a user turn can share that turn's exchange unit (the
# replies, tool results and follow-ups that answer it). The read path assumes the same
# when it gathers a unit's replies from the ledger.
UNIT_LOOKBACK = 4


def exchange_units(messages: Iterable[Message], *, lookback: int = UNIT_LOOKBACK) -> list[Unit]:
    """Group a session's ordered messages into exchanges.

    Every user message starts a unit, which also holds the next messages up to the next
    user message, at most ``lookback`` of them: the reply, tool results, a follow-up
    from the assistant. A message no user turn claims (before the first one, or past
    ``lookback``) is a unit of its own. The grouping depends only on the order of the
    messages, so the ledger's order gives the same units whatever order they arrived
    in. Text is ``"role: content"`` lines, ``"name: content"`` for a named message:
    the embedding of "Tim: I moved to Lisbon" then carries who said it.
    """
    units: list[Unit] = []
    ids: list[str] = []
    lines: list[str] = []
    replies = -1  # messages after the unit's user turn; -1: the unit has no user turn

    def close() -> None:
        if ids:
            units.append(Unit(tuple(ids), "\n".join(lines)))
            ids.clear()
            lines.clear()

    for m in messages:
        if m.role == "user":
            close()
            replies = 0
        elif 0 <= replies < lookback:
            replies += 1
        else:
            close()
            replies = -1
        ids.append(m.msg_id)
        if m.content.strip():
            lines.append(f"{m.name or m.role}: {m.content.strip()}")
    close()
    return units
