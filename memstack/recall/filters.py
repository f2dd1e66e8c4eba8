"""The filters between ranking and packing, each drop recorded in the manifest.

In rank order, a candidate is dropped when it is past what the budget can hold, when
a better item already covers its messages, when it says nothing but a superseded fact
value, or when it is a near-duplicate (character-bigram Jaccard) of a better item.
What passes is eligible for packing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memstack.core import metrics
from memstack.core import namespaces as ns
from memstack.core.settings import Settings
from memstack.recall.assembly import Labels, age_header, mark_outdated, render_turn
from memstack.recall.gather import _Gathered
from memstack.recall.ranking import Candidate
from memstack.recall.request import Request
from memstack.recall.result import BUDGET, DUPLICATE, LIMIT, STALE, ManifestItem, candidate_item
from memstack.recall.snippets import char_bigrams, excerpt, jaccard, other_terms, stale_statements
from memstack.text.token_counts import line_tokens

# A recalled item with fewer lexical terms than this besides a superseded value (and
# the words naming its fact) says nothing else: "好的，五千以内。", "I live in Berlin."
# It is dropped; one that says more is kept, its outdated sentences marked.
MIN_OTHER_TERMS = 3


def _outdated(
    text: str,
    superseded: Mapping[str, Sequence[Any]],
    current: Mapping[str, Any],
    labels: Labels,
) -> tuple[str | None, str]:
    """(the key, if ``text`` says nothing but a superseded value; ``text`` with a note
    after each sentence that repeats one). A changed value is kept from the model
    (docs/spec.md, Failure modes); dropping the whole message also lost whatever else it
    said ("I live in Berlin and I'm vegetarian" is evidence of the diet after a move)."""
    stale = stale_statements(text, superseded, current)
    if not stale:
        return None, text
    keys = sorted({key for _start, _end, key in stale})
    if other_terms(text, keys, superseded) < MIN_OTHER_TERMS:
        return stale[0][2], text
    return None, mark_outdated(text, stale, current, labels)


def covered_ids(c: Candidate) -> tuple[str, ...]:
    """The messages a candidate stands for: its own, or its chunk's without a ledger row."""
    return (c.msg_id,) if c.content is not None else (c.chunk_msg_ids or (c.msg_id,))


def dress(
    c: Candidate,
    req: Request,
    superseded: Mapping[str, Sequence[Any]],
    current: Mapping[str, Any],
    split_chars: int,
) -> str | None:
    """Sets what ``c`` prints (text, age header, body) and its token costs; returns the
    key of the superseded value it says nothing but, if any."""
    c.text = (
        excerpt(c.content, req.rewrite.weights, split_chars)
        if c.content is not None
        else c.chunk_text
    )
    stale_key, c.text = _outdated(c.text, superseded, current, req.labels)
    age = req.now_s - (c.created_at if c.created_at is not None else req.now_s)
    c.header = age_header(age, req.labels)
    # Without its ledger row, the unit's chunk text already reads "role: content".
    c.body = (
        render_turn(c.role, c.text, req.labels, c.name)
        if c.content is not None
        else c.text.replace("\n", "\n  ")
    )
    c.header_tokens = line_tokens(c.header)
    # Priced as it prints inside a group: indented under a shared age header.
    c.body_tokens = line_tokens("  " + c.body)
    c.tokens = c.header_tokens + c.body_tokens
    return stale_key


class _Filter:
    def __init__(self, keep: int, jaccard_threshold: float, total: int) -> None:
        self.keep = keep
        self.jaccard_threshold = jaccard_threshold
        self.total = total
        self.eligible: list[Candidate] = []
        self.seen_grams: list[set[str]] = []
        self.covered: set[str] = set()
        self.eligible_tokens = 0

    def reason(
        self, c: Candidate, ids: tuple[str, ...], stale_key: str | None
    ) -> tuple[str | None, str]:
        """Why ``c`` is dropped, and the detail; (None, "") if it is eligible."""
        # Bodies only: a header is paid once per group of same-age items, so summing
        # c.tokens stopped the list about one item short of what the packer could fit.
        if len(self.eligible) >= self.keep or self.eligible_tokens > self.total:
            # Never packed whatever the filters say: skip their cost (Jaccard is
            # quadratic) and record why.
            reason = LIMIT if len(self.eligible) >= self.keep else BUDGET
            return reason, "ranked below what the budget can hold"
        if self.covered.issuperset(ids):
            return DUPLICATE, "same message as a better item"
        if stale_key is not None:
            metrics.STALE_DROPS.inc()
            return STALE, f"says nothing but a superseded value of {stale_key}"
        grams = char_bigrams(c.text)
        if self._near_duplicate(grams):
            return DUPLICATE, "near-duplicate of a better item"
        self.seen_grams.append(grams)
        return None, ""

    def _near_duplicate(self, grams: set[str]) -> bool:
        t = self.jaccard_threshold
        return any(
            # Jaccard cannot exceed the size ratio: most pairs end here.
            min(len(grams), len(other)) > t * max(len(grams), len(other))
            and jaccard(grams, other) > t
            for other in self.seen_grams
        )

    def admit(self, c: Candidate, ids: tuple[str, ...]) -> None:
        self.covered.update(ids)
        self.eligible.append(c)
        self.eligible_tokens += c.body_tokens


def filter_candidates(
    ranked: Sequence[Candidate], g: _Gathered, req: Request, settings: Settings
) -> tuple[list[Candidate], list[ManifestItem]]:
    """The eligible candidates, best first, and the manifest items of the dropped."""
    current_values = {f.key: f.value for f in g.facts}
    passed = _Filter(settings.vector_keep, settings.jaccard_threshold, req.total)
    dropped: list[ManifestItem] = []
    for c in ranked:
        stale_key = dress(c, req, g.superseded, current_values, settings.chunk_split_chars)
        ids = covered_ids(c)
        reason, detail = passed.reason(c, ids, stale_key)
        if reason is None:
            passed.admit(c, ids)
        else:
            dropped.append(candidate_item(c, ids, False, reason, detail))
    return passed.eligible, dropped


def in_namespaces(ranked: Sequence[Candidate], asked: frozenset[str]) -> list[Candidate]:
    """The conversation's candidates, and those of the integration namespaces ``asked``
    for (a LangGraph item's stored JSON then read as text). Left out before anything is
    packed, an integration's item costs no budget and no manifest line."""
    kept: list[Candidate] = []
    for c in ranked:
        space = ns.namespace_of(c.msg_id)
        if space is not None and space not in asked:
            continue
        if space == ns.LANGGRAPH and c.content is not None:
            c.content = ns.as_text(c.content)
        kept.append(c)
    return kept
