"""The one exception tree of memstack.

Errors of Redis, SQLAlchemy, Chroma and Qdrant are turned into these at the boundary
(``raise StoreUnavailable(...) from exc``) so callers catch one family.
"""

from __future__ import annotations


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
    """A backing store failed."""


class StoreUnavailable(StoreError):
    """A backing store could not be reached (down, timed out, refused)."""


class ModelUnavailable(StoreUnavailable):
    """A local model could not be loaded or prepared (e.g. MiniLM's ONNX export failed).

    A kind of :class:`StoreUnavailable` because, like a store that is down, it is no
    fault of the data: the worker keeps the jobs pending instead of dead-lettering them.
    """


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
