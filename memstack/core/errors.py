"""The one exception tree of memstack.

Errors of Redis, SQLAlchemy, Chroma and Qdrant are turned into these at the boundary
(``raise StoreUnavailable(..., layer="redis") from exc``) so callers catch one family;
the ``layer`` is all the HTTP API tells a client of a store error.
"""

from __future__ import annotations

from typing import Literal, get_args

# Which part of memstack failed: the HTTP API tells a client only this, never the
# message, which can carry SQL, paths and addresses. "server" is the memstack server as
# seen by a client; "store" is any other or more than one.
Layer = Literal[
    "redis",
    "database",
    "vector store",
    "ingest journal",
    "embedder",
    "model",
    "knowledge base",
    "server",
    "store",
]
LAYERS: tuple[Layer, ...] = get_args(Layer)


class MemstackError(Exception):
    """Base of every error memstack raises on purpose."""


class ConfigError(MemstackError):
    """A setting is missing, malformed or inconsistent; raised at start."""


class HomeInUse(ConfigError):
    """Another process holds the embedded home (``MEMSTACK_HOME``); the message names it
    and the ways out."""


class ValidationError(MemstackError, ValueError):
    """Input from the caller was rejected before anything was written."""


class InvalidId(ValidationError):
    """A user, session or message id has unsafe characters or a bad length."""


class InvalidContent(ValidationError):
    """Message content is empty, oversized, or the role is unknown."""


class Conflict(ValidationError):
    """The call contradicts what is stored (a ``msg_id`` retried with other content);
    nothing was written."""


class StoreError(MemstackError):
    """A backing store failed; ``layer`` names which one, set where it is raised."""

    def __init__(self, message: str = "", *, layer: Layer = "store") -> None:
        super().__init__(message)
        # An attribute, not an argument, so pickling (which replays ``args`` and then
        # restores ``__dict__``) keeps it.
        self.layer: Layer = layer


class StoreUnavailable(StoreError):
    """A backing store could not be reached (down, timed out, refused)."""


class ModelUnavailable(StoreUnavailable):
    """A local model could not be loaded or prepared (e.g. MiniLM's ONNX export failed).

    A kind of :class:`StoreUnavailable` because, like a store that is down, it is no
    fault of the data: the worker keeps the jobs pending instead of dead-lettering them.
    """

    def __init__(self, message: str = "", *, layer: Layer = "model") -> None:
        super().__init__(message, layer=layer)


class SchemaMismatch(StoreError):
    """The database schema or a vector collection does not match this version.

    The message names the command that fixes it (``memstack db upgrade`` or
    ``memstack reindex``).
    """


class LockNotAcquired(MemstackError):
    """Another holder owns the session lock."""


class ExtractionError(MemstackError):
    """An extractor (usually the LLM) returned something unusable."""


class NotFound(MemstackError, LookupError):
    """A requested record does not exist."""


class Unauthorized(MemstackError):
    """A request to the service without a valid API key (401)."""


class Forbidden(MemstackError):
    """A valid API key asking for what it may not reach: another user's memory, or an
    operation its scope does not grant (403)."""
