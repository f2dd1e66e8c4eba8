"""One typed settings object, read from ``MEMSTACK_*`` variables or a ``.env`` file.

Built by the entry points and passed down; nothing reads the environment elsewhere.
Defaults are the numbers of the specification (docs/spec.md) unless a comment says *(ours)*.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, SettingsConfigDict

from memstack.core import urls
from memstack.core.environment import warn_unknown_variables
from memstack.core.errors import ConfigError

# Score cut-offs are cosines of one embedder, and each model spreads them differently:
# two random LoCoMo turns score a median 0.24 with MiniLM, 0.53 with bge-small and higher
# still with e5. Each row keeps what MiniLM's kc_threshold 0.70 and kb_min_score 0.5 mean:
# the share of unrelated and of evidence (question, text) pairs they pass
# (scripts/derive_score_cuts.py prints both for any embedder; docs/benchmarks.md).
SCORE_CUTS: dict[str, tuple[float, float]] = {"bge-small": (0.78, 0.67), "e5-small": (0.88, 0.84)}

PREFIX = "MEMSTACK_"
Locale = Literal["zh", "en"]
# Settings may also say "auto": the labels follow the language of each question.
SettingsLocale = Literal["auto", "zh", "en"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MEMSTACK_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        # A URL may hold a password: an error names the setting, never repeats its value.
        hide_input_in_errors=True,
    )

    # --- stores -----------------------------------------------------------------
    home: Path = Field(
        default=Path(".memstack"),
        description="Data folder of the embedded default (SQLite file, local vector stores).",
    )
    redis_url: str | None = Field(
        default=None,
        description="Redis URL, e.g. redis://127.0.0.1:6379/0. Unset: in-process fakeredis.",
    )
    redis_cluster: bool = Field(
        default=False,
        description="redis_url names a node of a Redis Cluster (ours): session keys and "
        "their ingest stream share a hash tag by shard (docs/architecture.md).",
    )
    ingest_shards: int = Field(
        default=16,
        gt=0,
        le=1024,
        description="Redis Cluster only (ours): ingest streams sessions are spread over, "
        "each in its own slot. Fixed once data exists: the layout mark records it.",
    )
    database_url: str | None = Field(
        default=None,
        description="PostgreSQL URL, e.g. postgresql://user@host:5432/db. Unset: SQLite in home.",
    )
    vector_store: Literal["chroma", "qdrant"] = Field(
        default="chroma", description="Vector store of semantic memory."
    )
    vector_url: str | None = Field(
        default=None,
        description="URL of a vector store server (chroma run / Qdrant). Unset: embedded in home.",
    )
    chroma_shards: int = Field(
        default=64,
        gt=0,
        le=1024,
        description="Chroma collections semantic memory is split into by user (ours): Chroma "
        "filters every row of a collection, so a user's search costs less in a smaller one "
        "(docs/benchmarks.md). Applies when the store is created; an existing store keeps "
        "its count until `memstack reindex`.",
    )
    kb_store: Literal["qdrant", "qdrant-edge", "chroma"] = Field(
        default="qdrant",
        description="Vector store of the knowledge base. qdrant: the server at kb_url, else "
        "embedded qdrant-edge (Qdrant's engine in process), or qdrant-client's local mode "
        "for a home whose knowledge base is already in its qdrant folder (from before).",
    )
    kb_url: str | None = Field(
        default=None, description="Server URL of the knowledge-base store. Unset: embedded in home."
    )
    auto_migrate: bool | None = Field(
        default=None,
        description="Run database migrations at start. Unset: yes on SQLite, no on PostgreSQL.",
    )
    key_prefix: str = Field(
        default="agent", pattern=r"^[A-Za-z0-9_.-]{1,32}$", description="Prefix of every Redis key."
    )
    store_timeout_s: float = Field(
        default=2.0, gt=0, description="Per-store timeout on the read path (ours)."
    )
    redis_max_connections: int = Field(
        default=64,
        gt=0,
        le=10000,
        description="Redis connections per process (ours); a call past them waits up to "
        "store_timeout_s for one instead of failing.",
    )
    db_pool_size: int = Field(
        default=10,
        gt=0,
        le=1000,
        description="PostgreSQL connections per process (ours), plus as many again at peaks; "
        "a call past them waits up to store_timeout_s for one.",
    )

    # --- models -------------------------------------------------------------------
    embedder: Literal["auto", "e5-small", "minilm", "bge-small", "openai", "hashing"] = Field(
        default="auto",
        description="auto: e5-small for a new deployment, and for one whose vectors another "
        "embedder wrote, that embedder until `memstack reindex --embedder e5-small`; "
        "e5-small: multilingual-e5-small (4-bit) offline, Chinese, English and ~100 more "
        "languages in one space; minilm: all-MiniLM-L6-v2 offline, English only; bge-small: "
        "bge-small-en-v1.5 (int8) offline, English only (needs memstack[models]); openai: "
        "/v1/embeddings; hashing: tests.",
    )
    minilm_runtime: Literal["onnx", "torch"] = Field(
        default="onnx",
        description="Runtime of minilm. onnx: ONNX Runtime, ~2.5x faster per query than torch "
        "and the same vectors (exported from the packaged model on first use, cached in "
        "~/.cache/memstack); torch: sentence-transformers.",
    )
    minilm_query_int8: bool = Field(
        default=True,
        description="minilm on onnx: embed queries with an int8 copy of the model (made "
        "and checked once, cached beside the export): ~40% less CPU per query, cosine "
        "0.99 to the float32 vectors it searches. Stored vectors are always float32.",
    )
    embed_url: str | None = Field(
        default=None, description="Base URL of an OpenAI-compatible embeddings endpoint."
    )
    embed_model: str = Field(
        default="text-embedding-3-small", description="Model name sent to embed_url."
    )
    embed_api_key: str | None = Field(default=None, description="API key for embed_url.")
    embed_dim: int = Field(default=384, gt=0, description="Dimension of the hashing embedder.")
    llm_url: str | None = Field(
        default=None,
        description="Base URL of an OpenAI-compatible chat endpoint. Unset: rules only.",
    )
    llm_model: str = Field(default="gpt-4o-mini", description="Chat model name sent to llm_url.")
    llm_api_key: str | None = Field(default=None, description="API key for llm_url.")
    llm_timeout_s: float = Field(default=20.0, gt=0, description="Timeout of one LLM call.")
    extractor: Literal["rules", "llm"] = Field(
        default="rules", description="Fact extractor; llm needs llm_url and falls back to rules."
    )
    fact_min_confidence: float = Field(
        default=0.6,
        ge=0.0,
        le=1.0,
        description="A fact extracted with a lower confidence is kept as a candidate (listed, "
        "confirmed or rejected; never served as the user's) instead of a fact. The rule "
        "extractor's confidences are calibrated (docs/facts.md).",
    )
    summariser: Literal["auto", "extractive", "llm"] = Field(
        default="auto", description="Session summariser; auto: llm when llm_url is set."
    )
    embed_timeout_s: float = Field(default=30.0, gt=0, description="Timeout of one embed call.")

    # --- working memory ---------------------------------------------------------------
    locale: SettingsLocale = Field(
        default="auto",
        description="Label language of the assembled context: auto follows the question "
        "(Chinese for a question in Chinese, English otherwise); zh or en force one.",
    )
    max_message_bytes: int = Field(
        default=65536, gt=0, description="Largest accepted message (UTF-8 bytes)."
    )
    window_turns: int = Field(default=20, gt=0, description="Turns kept in the Redis window.")
    window_max_messages: int = Field(default=40, gt=0, description="LTRIM -N -1 of the window.")
    window_ttl_s: int = Field(default=7200, gt=0, description="TTL of the window list.")
    state_ttl_s: int = Field(default=86400, gt=0, description="TTL of the task-state hash.")
    lock_ttl_s: int = Field(default=30, gt=0, description="TTL of the session lock.")
    idempotency_ttl_s: int = Field(
        default=86400, gt=0, description="TTL of an idempotency mark (ours)."
    )
    recent_window_read: int = Field(
        default=10, gt=0, description="Messages read from the window per context."
    )
    large_value_bytes: int = Field(
        default=4096, gt=0, description="State values above this go to PostgreSQL."
    )
    max_state_value_bytes: int = Field(
        default=1048576,
        gt=0,
        description="Largest accepted task-state value (UTF-8 bytes of its JSON; ours).",
    )
    max_document_bytes: int = Field(
        default=262144,
        gt=0,
        description="Largest accepted knowledge-base document (UTF-8 bytes; ours).",
    )
    max_body_bytes: int = Field(
        default=1048576,
        gt=0,
        description="Largest HTTP request body the API reads (ours); larger ones get 413 "
        "before they are read.",
    )
    max_fact_value_bytes: int = Field(
        default=2048,
        gt=0,
        description="Largest fact value (UTF-8 bytes of its JSON; ours): an extractor's value "
        "beyond it is dropped, a value written by hand refused.",
    )

    # --- ingest -------------------------------------------------------------------
    ingest_batch: int = Field(default=16, gt=0, description="XREADGROUP COUNT of the worker.")
    ingest_claim_idle_ms: int = Field(
        default=60000, gt=0, description="Idle time before XAUTOCLAIM."
    )
    ingest_max_deliveries: int = Field(
        default=5, gt=0, description="Deliveries before dead-letter."
    )
    worker_log_interval_s: float = Field(
        default=30.0,
        gt=0,
        description="Seconds between a worker's progress lines (batches, msg/s, backlog).",
    )
    summary_trigger_messages: int = Field(
        default=12, gt=0, description="Window size that triggers a summary."
    )
    summary_quiet_s: int = Field(default=30, ge=0, description="Quiet time before summarising.")
    chunk_split_chars: int = Field(default=500, gt=0, description="Split chunks longer than this.")
    chunk_merge_chars: int = Field(default=50, ge=0, description="Merge chunks shorter than this.")

    # --- read path ----------------------------------------------------------------
    vector_top_k: int = Field(default=20, gt=0, description="Vector candidates per query.")
    vector_keep: int = Field(default=5, gt=0, description="Recalled snippets kept.")
    weight_relevance: float = Field(default=0.7, ge=0, le=1, description="Weight of relevance.")
    weight_recency: float = Field(default=0.3, ge=0, le=1, description="Weight of recency.")
    recency_half_life_days: float = Field(
        default=14.0, gt=0, description="Half-life of recency decay."
    )
    rerank: Literal["off", "cross-encoder"] = Field(
        default="off",
        description="cross-encoder: re-rank the best recall candidates with "
        "ms-marco-MiniLM-L-12-v2 (int8, offline; needs memstack[models]): more LoCoMo "
        "evidence recalled (docs/benchmarks.md) for ~0.7 s more per context() on two "
        "cores.",
    )
    rerank_top_n: int = Field(
        default=60, gt=0, le=500, description="Candidates the cross-encoder re-ranks."
    )
    rerank_timeout_s: float = Field(
        default=3.0,
        gt=0,
        description="Past this the call keeps its own order and reports rerank as degraded.",
    )
    recency_blend: Literal["multiply", "add"] = Field(
        default="multiply",
        description=(
            "multiply: relevance·(w_rel + w_rec·recency); add: w_rel·relevance + w_rec·recency."
        ),
    )
    jaccard_threshold: float = Field(default=0.8, gt=0, le=1, description="Near-duplicate cut.")
    query_rewrite: Literal["rules", "llm"] = Field(
        default="rules",
        description="Query rewriting of recall; llm also asks llm_url for keywords (one call).",
    )
    word_neighbours: bool = Field(
        default=True,
        description="Lexical recall also searches each English query word's nearest words "
        "(kids: children), from memstack's shipped table.",
    )
    distance_threshold: float | None = Field(
        default=None, description="Drop hits with cosine distance above this (memstack calibrate)."
    )
    budget_tokens: int = Field(
        default=4000, gt=0, description="Token budget of the assembled context (ours)."
    )
    share_window: float = Field(
        default=0.45, ge=0, le=1, description="Budget share of the recent window."
    )
    share_facts: float = Field(default=0.15, ge=0, le=1, description="Budget share of known facts.")
    share_knowledge: float = Field(
        default=0.20, ge=0, le=1, description="Budget share of domain knowledge."
    )
    share_semantic: float = Field(
        default=0.20, ge=0, le=1, description="Budget share of semantic recall."
    )

    # --- retention ------------------------------------------------------------------
    retention_dialogue_days: int = Field(
        default=90, gt=0, description="Dialogue vectors kept this long."
    )
    fact_archive_days: int = Field(
        default=180, gt=0, description="Never-hit facts archived after this."
    )

    # --- session knowledge cache ---------------------------------------------------
    kc_enabled: bool = Field(default=True, description="Level-1 cache on; off is Level 2 only.")
    kc_threshold: float = Field(
        default=0.70,
        ge=0,
        le=1,
        description="Score to enter Level 1 (0.70 in the specification, a cosine of MiniLM; "
        "0.88 with e5-small, 0.78 with bge-small: the same share of pairs).",
    )
    kc_capacity: int = Field(default=30, gt=0, description="Level-1 capacity (FIFO).")
    kc_inject_max: int = Field(default=15, gt=0, description="Items injected per turn.")
    kb_top_k: int = Field(default=10, gt=0, description="Level-2 hits per turn (ours).")
    kb_min_score: float = Field(
        default=0.5,
        ge=-1,
        le=1,
        description="Level-2 hits scoring below this are noise (ours; with MiniLM; 0.84 with "
        "e5-small, 0.67 with bge-small).",
    )

    # --- entry points (ours) ------------------------------------------------------------
    api_token: SecretStr | None = Field(
        default=None,
        min_length=16,
        description="Bearer token (16+ characters) the HTTP API requires on /v1, an admin "
        "key; /healthz and /metrics stay open. Unset: no auth unless API keys exist.",
    )
    allow_unsafe: bool = Field(
        default=False,
        description="Let serve, worker and mcp start in a configuration `memstack doctor` "
        "calls unsafe (a Redis that keeps nothing on disk, a store each process keeps in a "
        "relative home); they log what is unsafe. For tests and trials, never production.",
    )

    @model_validator(mode="before")
    @classmethod
    def _score_cuts_of_the_embedder(cls, data: Any) -> Any:
        """Default knowledge-cache cut-offs in the chosen embedder's score space."""
        if not isinstance(data, dict):
            return data
        embedder = data.get("embedder", cls.model_fields["embedder"].default)
        cuts = SCORE_CUTS.get(str(embedder))
        if cuts is None:
            return data
        return {"kc_threshold": cuts[0], "kb_min_score": cuts[1], **data}

    def with_embedder(self, embedder: str) -> Settings:
        """These settings on ``embedder``, the score cut-offs following it unless set."""
        names = get_args(type(self).model_fields["embedder"].annotation)
        if embedder not in names:
            raise ConfigError(f"unknown embedder {embedder!r}; one of {', '.join(names)}")
        update: dict[str, Any] = {"embedder": embedder}
        cuts = SCORE_CUTS.get(embedder)
        if cuts is not None:
            for name, value in zip(("kc_threshold", "kb_min_score"), cuts, strict=True):
                if name not in self.model_fields_set:
                    update[name] = value
        return self.model_copy(update=update)

    @field_validator("redis_url", "database_url", "vector_url", "kb_url", "embed_url", "llm_url")
    @classmethod
    def _url_parts(cls, url: str | None, info: ValidationInfo) -> str | None:
        """Each server URL checked part by part (core/urls.py): refused, never guessed."""
        if not url:
            return url
        checks: dict[str, Callable[[str], object]] = {
            "redis_url": urls.redis_database,
            "database_url": urls.check_database_url,
            # The vector stores' clients read a bare host:port as http.
            "vector_url": partial(urls.check_http_url, bare_host=True),
            "kb_url": partial(urls.check_http_url, bare_host=True),
        }
        check = checks.get(info.field_name or "", urls.check_http_url)
        try:
            check(url)
        except ValueError as exc:
            raise PydanticCustomError("url_part", "{reason}", {"reason": str(exc)}) from None
        return url

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if abs(self.weight_relevance + self.weight_recency - 1.0) > 1e-6:
            raise ValueError("weight_relevance + weight_recency must be 1.0")
        shares = self.share_window + self.share_facts + self.share_knowledge + self.share_semantic
        if shares > 1.0 + 1e-6:
            raise ValueError(f"budget shares add up to {shares:.2f}; they must not exceed 1.0")
        if self.window_max_messages < self.recent_window_read:
            raise ValueError("window_max_messages must be >= recent_window_read")
        if self.embedder == "openai" and not self.embed_url:
            raise ValueError("embedder=openai needs embed_url (MEMSTACK_EMBED_URL)")
        if self.query_rewrite == "llm" and not self.llm_url:
            raise ValueError("query_rewrite=llm needs llm_url (MEMSTACK_LLM_URL)")
        if self.extractor == "llm" and not self.llm_url:
            raise ValueError("extractor=llm needs llm_url (MEMSTACK_LLM_URL)")
        if self.summariser == "llm" and not self.llm_url:
            raise ValueError("summariser=llm needs llm_url (MEMSTACK_LLM_URL)")
        if self.redis_cluster and not self.redis_url:
            raise ValueError("redis_cluster needs redis_url (MEMSTACK_REDIS_URL) naming a node")
        if self.redis_cluster and self.redis_url and urls.redis_database(self.redis_url) != 0:
            raise ValueError("MEMSTACK_REDIS_URL names a database other than 0: a cluster has one")
        return self

    # --- derived ------------------------------------------------------------------
    @property
    def embedded_redis(self) -> bool:
        return not self.redis_url

    @property
    def embedded_database(self) -> bool:
        return not self.database_url

    @property
    def should_migrate(self) -> bool:
        return self.embedded_database if self.auto_migrate is None else self.auto_migrate


def load_settings(**overrides: object) -> Settings:
    """Build settings from the environment, turning pydantic errors into :class:`ConfigError`.

    The message names each offending setting by its environment variable. A
    ``MEMSTACK_*`` variable no setting reads is warned about (once per process).
    """
    warn_unknown_variables(
        [PREFIX + name.upper() for name in Settings.model_fields], os.environ, Path(".env")
    )
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        parts = []
        for err in exc.errors():
            loc = "_".join(str(p) for p in err["loc"]) if err["loc"] else ""
            name = f"{PREFIX}{loc.upper()}" if loc else "invalid settings"
            parts.append(f"{name}: {err['msg'].removeprefix('Value error, ')}")
        raise ConfigError("; ".join(parts)) from exc


def settings_table() -> str:
    """The README's configuration table, generated from the settings class."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = field.default
        shown = "unset" if default is None else f"`{default}`"
        rows.append(f"| `MEMSTACK_{name.upper()}` | {shown} | {field.description or ''} |")
    return "\n".join(rows)
