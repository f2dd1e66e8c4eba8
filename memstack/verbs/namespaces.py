"""``context()`` over the user's own conversation, and the integration namespaces only
when asked (:mod:`memstack.core.namespaces`).

The read path ranks every message of the user; :class:`NamespacedRecall` takes that
ranking before anything is filtered, packed or rendered and keeps the messages of the
namespaces the call asked for, so a left-out item costs no budget and no manifest line.
The items it keeps have their stored JSON rendered as text. ``search()`` shares the
ranking step and is not narrowed: outside a ``context()`` call every namespace counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextvars import ContextVar
from datetime import datetime

from memstack.core import namespaces as ns
from memstack.recall import Recall
from memstack.recall.gather import _Gathered
from memstack.recall.ranking import Candidate
from memstack.recall.request import Request
from memstack.recall.result import ContextResult, ManifestItem
from memstack.stores.sql.exchange_rows import LedgerRow

# The namespaces the context() call in progress asked for; None outside one (search).
_ASKED: ContextVar[frozenset[str] | None] = ContextVar("memstack_namespaces", default=None)


class NamespacedRecall(Recall):
    """The read path, with ``context()`` narrowed to the namespaces it is given."""

    async def context(
        self,
        user_id: str,
        session_id: str,
        query: str,
        *,
        budget_tokens: int | None = None,
        now: datetime | float | None = None,
        locale: str | None = None,
        system: str | None = None,
        namespaces: Iterable[str] = (),
    ) -> ContextResult:
        token = _ASKED.set(ns.check_all(namespaces))
        try:
            return await super().context(
                user_id,
                session_id,
                query,
                budget_tokens=budget_tokens,
                now=now,
                locale=locale,
                system=system,
            )
        finally:
            _ASKED.reset(token)

    async def ranked(
        self, g: _Gathered, req: Request, skip: set[str]
    ) -> tuple[list[Candidate], list[ManifestItem], dict[str, LedgerRow]]:
        ranked, dropped, rows = await super().ranked(g, req, skip)
        asked = _ASKED.get()
        if asked is None:
            return ranked, dropped, rows
        kept: list[Candidate] = []
        for c in ranked:
            space = ns.namespace_of(c.msg_id)
            if space is None:
                kept.append(c)
            elif space in asked:
                if space == ns.LANGGRAPH and c.content is not None:
                    c.content = ns.as_text(c.content)
                kept.append(c)
        return kept, dropped, rows
