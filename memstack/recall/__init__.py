"""The read path: ``context(user_id, session_id, query)`` (docs/spec.md, Read path).

1. Gather in parallel, each store under its own timeout: the recent window (Redis),
   current facts and superseded values (SQL), two dense searches (the question and a
   rewrite of it) with a hard ``user_id`` filter, BM25 over the ledger, and the session
   knowledge cache when a knowledge base is configured. A store that fails or times out
   leaves its layer empty and named in ``degraded``; the call still answers.
2. A window not known to hold the session's history (Redis lost or expired it) is repaired
   from the ledger.
3. Candidates are scored (:mod:`memstack.recall.ranking`).
4. Filters, each recorded in the manifest (:mod:`memstack.recall.result`): in the window;
   below the distance threshold; carrying a superseded fact value; a
   near-duplicate (character-bigram Jaccard); the same message as a better chunk
   (:mod:`memstack.recall.snippets`).
5. Per-layer token budgets (:mod:`memstack.recall.budget`, :mod:`memstack.recall.packing`), then
   assembly (:mod:`memstack.recall.assembly`).

Every store query carries the user filter: the vector store refuses a search without
``scope``, SQL queries name ``user_id``, and the window drops other users' entries.

Modules, in the order a call uses them:

- :mod:`~memstack.recall.pipeline`: :class:`Recall`, which runs each step;
- :mod:`~memstack.recall.request`: the call's checked inputs;
- :mod:`~memstack.recall.gather`: the store reads (step 1, 2);
- :mod:`~memstack.recall.rows`, :mod:`~memstack.recall.candidates`: ledger rows and the
  candidates of every channel (step 3);
- :mod:`~memstack.recall.filters`: step 4;
- :mod:`~memstack.recall.layers`, :mod:`~memstack.recall.manifest_build`: step 5 and the
  manifest of what each layer offered;
- :mod:`~memstack.recall.hits`: fact hits, written in batches.

:mod:`~memstack.recall.search` runs steps 1 and 3 alone: ``search()``, the ranked
messages without filters, budgets or assembly.
"""

from memstack.recall.filters import MIN_OTHER_TERMS
from memstack.recall.gather import RecallStores
from memstack.recall.hits import HIT_FLUSH_S
from memstack.recall.pipeline import MIN_POOL, POOL_TOKENS, Recall

__all__ = [
    "HIT_FLUSH_S",
    "MIN_OTHER_TERMS",
    "MIN_POOL",
    "POOL_TOKENS",
    "Recall",
    "RecallStores",
]
