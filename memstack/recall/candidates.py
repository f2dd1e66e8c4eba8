"""Candidates: the messages the vector and lexical hits point at, with their ranks.

A vector hit may carry its messages in its metadata; an ids-only hit (the common case)
learns them from the ledger rows (:mod:`memstack.recall.rows`), which also give every
candidate its text, speaker and time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from memstack.core.ids import msg_id_of_chunk
from memstack.recall.gather import _Gathered
from memstack.recall.ranking import MIN_CONTENT_TERMS, Candidate
from memstack.recall.result import (
    BELOW_THRESHOLD,
    DUPLICATE,
    IN_WINDOW,
    ManifestItem,
    hit_item,
    make_item,
    preview,
)
from memstack.stores.sql.exchange_rows import LedgerRow
from memstack.stores.sql.lexical import LexicalHit
from memstack.stores.vectors.base import VectorHit
from memstack.text.terms import term_count
from memstack.text.token_counts import count_tokens

Units = Mapping[str, tuple[str, ...]]


def _unit_head(vector_id: str) -> str | None:
    """The head message of a dialogue chunk's exchange unit (``msg_id#chunk_idx``); None
    for other chunks (an inferred fact's ``msg_id#fact-key`` covers its message only)."""
    head, _, idx = vector_id.rpartition("#")
    return head if head and idx.isdigit() else None


def hit_msg_ids(
    hit: VectorHit, rows: Mapping[str, LedgerRow], units: Units | None
) -> tuple[str, ...] | None:
    """The messages a hit covers: from its metadata when the search returned it, else
    from the ledger (None when the ledger has no row for it)."""
    raw = hit.metadata.get("msg_ids")
    if isinstance(raw, str) and raw:
        return tuple(x for x in raw.split(",") if x)
    msg = hit.metadata.get("msg_id")
    if msg:
        return (str(msg),)
    head = msg_id_of_chunk(hit.id)
    if hit.metadata or units is None:
        return (head,)
    if head not in rows:
        return None
    return units.get(head, (head,)) if _unit_head(hit.id) else (head,)


def _with_preview(item: ManifestItem, rows: Mapping[str, LedgerRow]) -> ManifestItem:
    """A dropped vector hit's manifest item with the text of its messages, when the
    search left the text out and the ledger has them."""
    if item.preview or not item.msg_ids or not all(i in rows for i in item.msg_ids):
        return item
    text = "\n".join(rows[i].content for i in item.msg_ids)
    return replace(item, preview=preview(text), tokens=count_tokens(text))


def row_requests(g: _Gathered) -> tuple[list[str], list[str], list[str]]:
    """What to ask the ledger for: (the messages of ids-only vector hits, every message
    to read, the heads of exchange units to complete)."""
    bare = [h.id for hits in g.vector.values() for h in hits if not h.metadata]
    heads = [msg_id_of_chunk(i) for i in bare]
    wanted = list(dict.fromkeys([*heads, *(lex.msg_id for lex in g.lexical)]))
    unit_heads = list(dict.fromkeys(filter(None, map(_unit_head, bare))))
    return heads, wanted, unit_heads


class _Collector:
    """Candidates from every channel with their per-channel ranks; drops recorded."""

    def __init__(
        self,
        window_ids: set[str],
        rows: Mapping[str, LedgerRow],
        units: Units | None,
        max_distance: float | None,
    ) -> None:
        self.window_ids = window_ids
        self.rows = rows
        self.units = units
        self.max_distance = max_distance
        self.out: dict[str, Candidate] = {}
        self.dropped: list[ManifestItem] = []

    def vector(self, channel: str, hits: list[VectorHit]) -> None:
        rank = 0
        seen_msgs: set[str] = set()
        for hit in hits:
            ids = hit_msg_ids(hit, self.rows, self.units)
            if ids is None:
                # An ids-only hit without a ledger row of this user: a summary (it
                # quotes no message), or a message deleted since.
                continue
            if self._skipped(channel, hit, ids, seen_msgs):
                continue
            rank += 1
            seen_msgs.update(ids)
            self._add(channel, rank, hit, ids)

    def _skipped(
        self, channel: str, hit: VectorHit, ids: tuple[str, ...], seen_msgs: set[str]
    ) -> bool:
        """Whether ``hit`` takes no rank in ``channel``; the question's own channel
        records why in the manifest, its rewrite's does not."""
        distance = 1.0 - hit.score
        if (
            channel in ("vector", "vector_rewrite")
            and self.max_distance is not None
            and distance > self.max_distance
        ):
            if channel == "vector":
                self.dropped.append(hit_item(hit, ids, BELOW_THRESHOLD, distance))
            return True
        if str(hit.metadata.get("source_layer", "dialogue")) == "summary":
            # A summary speaks for many messages but quotes none of them; its
            # messages are found on their own, so it only adds noise here.
            return True
        if seen_msgs.issuperset(ids):
            if channel == "vector":
                self.dropped.append(
                    hit_item(hit, ids, DUPLICATE, distance, "a better chunk of the same message")
                )
            return True
        return False

    def _add(self, channel: str, rank: int, hit: VectorHit, ids: tuple[str, ...]) -> None:
        for m in ids:
            if m in self.window_ids:
                continue
            c = self.out.setdefault(m, Candidate(m))
            if channel not in c.ranks:
                c.ranks[channel] = rank
                if m != ids[0]:
                    c.unit_tail.add(channel)
            if channel == "vector" and c.similarity is None:
                c.similarity = hit.score
                c.chunk_text = hit.text
                c.chunk_msg_ids = ids
            created = hit.metadata.get("created_at")
            if c.created_at is None and isinstance(created, int | float):
                c.created_at = float(created)
        if all(m in self.window_ids for m in ids) and channel == "vector":
            self.dropped.append(hit_item(hit, ids, IN_WINDOW, 1.0 - hit.score))

    def lexical(self, hits: list[LexicalHit]) -> None:
        for rank, lex in enumerate(hits, start=1):
            if lex.msg_id not in self.window_ids:
                c = self.out.setdefault(lex.msg_id, Candidate(lex.msg_id))
                if "lexical" not in c.ranks:
                    c.ranks["lexical"] = rank
                    c.lexical_share = lex.share
            elif not any(
                d.msg_ids == (lex.msg_id,) and d.reason == IN_WINDOW for d in self.dropped
            ):
                self.dropped.append(
                    make_item(
                        "semantic",
                        lex.msg_id,
                        (lex.msg_id,),
                        lex.content,
                        0,
                        False,
                        IN_WINDOW,
                        ranks={"lexical": rank},
                    )
                )


def collect(
    g: _Gathered,
    window_ids: set[str],
    rows: Mapping[str, LedgerRow],
    units: Units | None,
    max_distance: float | None,
) -> tuple[dict[str, Candidate], list[ManifestItem]]:
    """Messages from every channel with their per-channel ranks; drops recorded.
    ``units`` (None: the ledger is down) gives what an ids-only hit covers."""
    collector = _Collector(window_ids, rows, units, max_distance)
    for channel, hits in g.vector.items():
        collector.vector(channel, hits)
    collector.lexical(g.lexical)
    return collector.out, collector.dropped


def fill_from_rows(
    candidates: Mapping[str, Candidate], rows: Mapping[str, LedgerRow]
) -> dict[str, int]:
    """Gives each candidate its ledger row; returns the lexical terms of the short
    messages (others count as :data:`MIN_CONTENT_TERMS`), which the ranking discounts."""
    lengths: dict[str, int] = {}
    for m, c in candidates.items():
        row = rows.get(m)
        if row is not None:
            c.role, c.content, c.created_at, c.prev_id, c.name = (
                row.role,
                row.content,
                row.created_at,
                row.prev_id,
                row.name,
            )
            # Only short messages can fall under the discount; skip segmenting the rest.
            lengths[m] = (
                term_count(row.content)
                if len(row.content) < 20 * MIN_CONTENT_TERMS
                else MIN_CONTENT_TERMS
            )
    return lengths
