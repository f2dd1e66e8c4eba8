"""Prometheus metrics of memstack (each one answers for one kind of failure; docs/spec.md, Metrics).

Metrics live in the default registry so that any process (API, worker, CLI) exposes
them with ``prometheus_client``'s own exposition. Add new ones here, one block per
module that updates them, so every name is defined once.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# --- read path (memstack.recall) ----------------------------------------------------------

WINDOW_REBUILDS = Counter(
    "memstack_window_rebuilds_total",
    "Recent windows rebuilt from the ledger because Redis had none for a known session "
    "(Redis lost data, e.g. a restart or FLUSHDB).",
)
CONTEXT_DEGRADED = Counter(
    "memstack_context_degraded_total",
    "context() calls that came back without a layer because its store failed or timed out.",
    ["layer"],
)
CONTEXT_SECONDS = Histogram(
    "memstack_context_seconds",
    "Wall time of one context() call.",
    buckets=(0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.5),
)
STALE_DROPS = Counter(
    "memstack_context_stale_drops_total",
    "Recalled snippets dropped because they carry a superseded fact value.",
)

# --- session knowledge cache (memstack.knowledge.cache) -----------------------------------

KNOWLEDGE_SECTION_CHARS = Histogram(
    "memstack_knowledge_section_chars",
    "Characters of the domain-knowledge section injected per turn (prompt growth).",
    buckets=(0, 250, 500, 1000, 2000, 3000, 4000, 6000, 8000, 12000, 16000),
)
KNOWLEDGE_SECTION_ITEMS = Histogram(
    "memstack_knowledge_section_items",
    "Items of the domain-knowledge section injected per turn.",
    buckets=(0, 1, 2, 3, 5, 8, 10, 15, 20, 30),
)
KNOWLEDGE_ITEMS = Counter(
    "memstack_knowledge_items_total",
    "Injected knowledge items by origin: cached (Level 1) or retrieved this turn (Level 2).",
    ["origin"],
)
KNOWLEDGE_TURNS = Counter(
    "memstack_knowledge_turns_total",
    "Knowledge-cache turns, by whether Level 1 was on (kc_enabled).",
    ["cache"],
)
KNOWLEDGE_CACHE_UPDATE_FAILURES = Counter(
    "memstack_knowledge_cache_update_failures_total",
    "Level-1 updates that failed after their turn was served (Redis down, another owner).",
)
KNOWLEDGE_SEARCH_FAILURES = Counter(
    "memstack_knowledge_search_failures_total",
    "Turns whose Level-2 search failed, so only Level 1 was injected.",
)

# --- HTTP API (memstack.server.http) ------------------------------------------------------

# Labelled by route template, never the raw path: paths hold user and session ids, which
# would leak into the scrape and grow one series per user.
HTTP_REQUESTS = Counter(
    "memstack_http_requests_total",
    "HTTP API requests by method, route template and status code.",
    ["method", "route", "status"],
)
HTTP_SECONDS = Histogram(
    "memstack_http_request_seconds",
    "Wall time of one HTTP API request, by route template.",
    ["route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
)

# --- fact extraction and the fact store (memstack.ingest.extraction, memstack.stores.sql.facts) ---

LLM_EXTRACTION_FALLBACKS = Counter(
    "memstack_llm_extraction_fallbacks_total",
    "User messages whose facts the rule extractor gave instead of the LLM, by reason: "
    "timeout, error (connection, status, a body that is not a completion), oversized "
    "(body refused before parsing), malformed (no usable JSON twice), skipped (the "
    "endpoint timed out moments ago), invalid_fact (a fact of its answer failed the "
    "checks), missing (the answer left the message out).",
    ["reason"],
)
LLM_FACTS_REJECTED = Counter(
    "memstack_llm_facts_rejected_total",
    "Facts in LLM answers dropped by validation, by what failed: shape, key or value.",
    ["field"],
)
FACTS_REFUSED = Counter(
    "memstack_facts_refused_total",
    "Facts the fact store refused to write because the key or the value failed the checks "
    "(docs/facts.md), whichever extractor produced them.",
    ["field"],
)

# --- ingest worker (memstack.ingest.worker) -----------------------------------------------

INGEST_PROCESSED = Counter(
    "memstack_ingest_messages_total",
    "Ingest jobs finished by this process's worker, by outcome: processed (stored and "
    "acknowledged), failed (to be retried) or dead_lettered.",
    ["outcome"],
)
INGEST_BATCH_SECONDS = Histogram(
    "memstack_ingest_batch_seconds",
    "Wall time of one ingest batch that held jobs (read, ingest, acknowledge).",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
INGEST_BACKLOG = Gauge(
    "memstack_ingest_backlog",
    "Jobs on the ingest stream not yet acknowledged (delivered and pending, or not yet "
    "read), as a worker last saw it; growing means the workers fall behind.",
)

# --- worker liveness and lag (AsyncMemory.status(), read by serve's watch and on demand) ---

WORKERS_LIVE = Gauge(
    "memstack_workers_live",
    "Ingest workers whose heartbeat has not run out, as last read; 0 while jobs are "
    "pending means nothing is ingesting them.",
)
INGEST_PENDING = Gauge(
    "memstack_ingest_pending",
    "Jobs on an ingest stream not yet acknowledged, as last read, by stream.",
    ["stream"],
)
INGEST_OLDEST_PENDING_SECONDS = Gauge(
    "memstack_ingest_oldest_pending_seconds",
    "How long the oldest job not yet acknowledged has waited on an ingest stream, by "
    "stream; growing means the workers fall behind or none runs.",
    ["stream"],
)
