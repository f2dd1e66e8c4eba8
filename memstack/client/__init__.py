"""A Python client of memstack's HTTP API (``memstack serve``): :class:`MemoryClient`
and :class:`AsyncMemoryClient`, with the method names, arguments and answers of
:class:`memstack.Memory` and :class:`memstack.AsyncMemory`, so code written against the
library runs against a server by changing one line::

    with MemoryClient("http://127.0.0.1:8080", api_key="…") as mem:
        mem.remember("alice", "s1", "user", "我预算不超过五千")
        print(mem.context("alice", "s1", "我预算多少？").text)

Answers are the library's own types (:class:`~memstack.Message`,
:class:`~memstack.ContextResult`, :class:`~memstack.StoredFact`, …; times aware). A few
fields do not travel and read as their defaults: ``Message.accepted_at`` (None),
``StoredFact.withheld`` (False; a withheld value is still None) and
``ExportReport.skipped_documents`` (empty). Callbacks run on the client once the server
has answered: ``kb_add``'s ``progress`` once per document, ``export``'s and
``import_file``'s once at the end. ``drain`` takes only its defaults (the server drains
with its own clock). Files stay on the client: ``kb_add`` takes text (``str`` or
``Document``; a path is refused), ``export`` writes where it is told, ``import_file``
reads its file here and sends it whole (at most ``MEMSTACK_MAX_BODY_BYTES``).

Errors are the library's too: the server's ``{"error", "detail"}`` is raised as the
class of :mod:`memstack.core.errors` it names (``InvalidId``, ``NotFound``,
``Conflict``, ``Unauthorized``…), else as the class its status means (422
``ValidationError``, 404 ``NotFound``, 503 ``StoreUnavailable``…), else as
:class:`~memstack.MemstackError`. Ids in a path are checked before sending, as the
library checks them. A server that cannot be reached or does not answer within
``timeout_s`` is a :class:`~memstack.StoreUnavailable`, whose message names the URL:
the server is, to its client, a store that is down, and a caller that retries on
``StoreUnavailable`` retries here too (``remember`` with a ``msg_id`` is safe to retry
after a timeout: a write that did happen is not repeated).
"""

from __future__ import annotations

from memstack.client._async import AsyncMemoryClient
from memstack.client._sync import MemoryClient

__all__ = ["CLIENT_ONLY", "LIBRARY_ONLY", "AsyncMemoryClient", "MemoryClient"]

# Public methods of memstack.Memory without a client twin, and why. Every other method of
# Memory has one with the same parameters and answer (tests/test_client.py holds both to
# that): a new Memory method fails that test until it gets a twin or a line here.
LIBRARY_ONLY = frozenset(
    {
        "knowledge_context",  # no route: the session knowledge cache is part of context()
        "summaries",  # no route yet
        "dead_letters",  # no route yet: `memstack dead-letters` on the server's host
        "backlog",  # no route: the inspector's operations page (/ui/operations) shows it
        "maintain",  # operator work: `memstack maintain` where the stores are
        "reindex",  # operator work: `memstack reindex`
        "prepare",  # the server prepares its models at start
        # API keys are managed where the database is (`memstack keys …`): no route
        # creates, lists, revokes or checks them for a client.
        "create_key",
        "list_keys",
        "revoke_key",
        "authenticate",
        "has_keys",
    }
)

# Public methods of the clients without a Memory twin, and why.
CLIENT_ONLY: frozenset[str] = frozenset()
