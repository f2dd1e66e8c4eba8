"""What the two clients share: one call of the HTTP API described as data, the API's
JSON read back into the library's types, and its errors raised as the library's
exceptions. Nothing here does I/O, so the sync and the async client send the same
requests and read the same answers.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from memstack.core import errors
from memstack.core.errors import (
    LAYERS,
    Conflict,
    Forbidden,
    Layer,
    MemstackError,
    NotFound,
    StoreError,
    StoreUnavailable,
    Unauthorized,
    ValidationError,
)
from memstack.core.ids import validate_id
from memstack.core.inputs import check_moment
from memstack.core.messages import Message
from memstack.core.time import Timestamp
from memstack.types import Allocation, ContextResult, ManifestItem, Rewrite, Section

T = TypeVar("T")
D = TypeVar("D")

USER_AGENT = "memstack-client/0.1.0"


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer: ``parse`` gets the decoded JSON."""

    method: str
    path: str  # under the base URL, its segments already encoded
    parse: Callable[[Any], T]
    params: Mapping[str, str | int] = field(default_factory=dict)
    content: bytes | None = None  # the body, encoded
    # Statuses besides 2xx whose body is an answer, not an error (/healthz's 503).
    answers: frozenset[int] = frozenset()
    content_type: str = "application/json"

    @property
    def headers(self) -> dict[str, str]:
        return {"Content-Type": self.content_type} if self.content is not None else {}


def call(
    method: str,
    path: str,
    parse: Callable[[Any], T],
    *,
    params: Mapping[str, str | int | None] | None = None,
    body: Mapping[str, Any] | None = None,
    omit_none: bool = True,
    answers: frozenset[int] = frozenset(),
) -> Call[T]:
    """A :class:`Call`. ``None`` values are left out of the query, and of the body
    unless ``omit_none`` is off (the server's default applies); a body that is not JSON
    is refused before anything is sent, as the library refuses it."""
    query = {k: v for k, v in (params or {}).items() if v is not None}
    content = None
    if body is not None:
        sent = {k: v for k, v in body.items() if v is not None or not omit_none}
        try:
            content = json.dumps(sent, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValidationError(f"the request is not JSON: {exc}") from None
    return Call(method, path, parse, query, content, answers)


# --- the request ---------------------------------------------------------------------------


def segment(kind: str, value: object) -> str:
    """An id as one path segment: checked as the library checks it (so a bad id is the
    same :class:`InvalidId`, and never a different path), then percent-encoded; an id of
    dots alone is encoded too, or URL normalisation would read it as ``.``/``..``."""
    checked = validate_id(kind, value)
    encoded = quote(checked, safe="")
    return encoded.replace(".", "%2E") if set(checked) == {"."} else encoded


def user_path(user_id: str, *rest: str) -> str:
    return "/".join(("/v1/users", segment("user_id", user_id), *rest))


def session_path(user_id: str, session_id: str, *rest: str) -> str:
    return user_path(user_id, "sessions", segment("session_id", session_id), *rest)


def moment_text(kind: str, value: Timestamp | None) -> str | None:
    """An aware datetime or epoch seconds as RFC 3339 in UTC, refused as the library
    refuses it (a naive datetime is ambiguous)."""
    return None if value is None else check_moment(kind, value).isoformat()


# --- the answer ----------------------------------------------------------------------------


def when(value: str) -> datetime:
    """A time of the API (RFC 3339): aware; one without an offset is UTC, as stored."""
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def maybe_when(value: str | None) -> datetime | None:
    return None if value is None else when(value)


def build(cls: type[D], data: Mapping[str, Any], *, times: tuple[str, ...] = ()) -> D:
    """A dataclass of the library from a JSON object: its fields by name (keys it does
    not have, from a newer server, are left out), ``times`` read as datetimes."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values = {k: v for k, v in data.items() if k in names}
    for name in times:
        if values.get(name) is not None:
            values[name] = when(values[name])
    return cls(**values)


def message(user_id: str, session_id: str) -> Callable[[Mapping[str, Any]], Message]:
    """A message of the wire (``ts``, no owner: the path named it) as a :class:`Message`.
    ``accepted_at`` does not travel: it is None."""

    def read(m: Mapping[str, Any]) -> Message:
        return Message(
            msg_id=m["msg_id"],
            user_id=user_id,
            session_id=session_id,
            role=m["role"],
            content=m["content"],
            created_at=when(m["ts"]),
            name=m.get("name"),
        )

    return read


def context_result(d: Mapping[str, Any]) -> ContextResult:
    return ContextResult(
        text=d["text"],
        messages=d["messages"],
        sections={
            name: Section(name=name, title=s["title"], lines=tuple(s["lines"]))
            for name, s in d["sections"].items()
        },
        manifest=[
            build(ManifestItem, {**m, "msg_ids": tuple(m["msg_ids"])}) for m in d["manifest"]
        ],
        degraded=d["degraded"],
        allocation=build(Allocation, d["allocation"]),
        rewrite=build(
            Rewrite,
            {
                **d["rewrite"],
                **{k: tuple(d["rewrite"][k]) for k in ("terms", "entities", "expanded")},
            },
        ),
        window_rebuilt=d["window_rebuilt"],
        timings_ms=d["timings_ms"],
        tokens=d["tokens"],
    )


# --- errors ----------------------------------------------------------------------------------

# When the body names no exception of the tree (a proxy's page, the server's own names
# such as PayloadTooLarge): the class the status means.
BY_STATUS: dict[int, type[MemstackError]] = {
    400: ValidationError,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: ValidationError,
    422: ValidationError,
    502: StoreUnavailable,
    503: StoreUnavailable,
    504: StoreUnavailable,
}


def exception_named(name: object) -> type[MemstackError] | None:
    """The class of memstack.core.errors called ``name``: only that module's, whose
    constructors all take one message."""
    stack: list[type[MemstackError]] = [MemstackError]
    while stack:
        cls = stack.pop()
        if cls.__name__ == name and cls.__module__ == errors.__name__:
            return cls
        stack.extend(cls.__subclasses__())
    return None


def served_layer(detail: str) -> Layer | None:
    """The layer a store error's detail names: the server says only ``<layer> unavailable``
    or ``<layer> error; …`` (memstack.server.http.errors), never the message."""
    return next(
        (
            layer
            for layer in LAYERS
            if detail == f"{layer} unavailable" or detail.startswith(f"{layer} error;")
        ),
        None,
    )


def error_of(response: httpx.Response) -> MemstackError:
    """The server's ``{"error", "detail"}`` as the exception the library raised."""
    try:
        body = response.json()
        name, detail = body["error"], str(body["detail"])
    except (ValueError, TypeError, KeyError):
        name, detail = None, response.text[:300] or response.reason_phrase
    known = exception_named(name)
    if known is not None:
        if issubclass(known, StoreError) and (layer := served_layer(detail)) is not None:
            return known(detail, layer=layer)
        return known(detail)
    # Not the library's: say what came back, as the class its status means.
    label = f"HTTP {response.status_code}" + (f" {name}" if isinstance(name, str) else "")
    cls = BY_STATUS.get(response.status_code, MemstackError)
    if issubclass(cls, StoreError):
        # A gateway's answer, not memstack's: what failed is the server behind it.
        return cls(f"{label}: {detail}", layer="server")
    return cls(f"{label}: {detail}")


def outcome(c: Call[T], response: httpx.Response) -> T:
    """The answer to ``c``, or the error it carries."""
    if not (response.is_success or response.status_code in c.answers):
        raise error_of(response)
    try:
        return c.parse(response.json())
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise MemstackError(
            f"{c.method} {c.path} answered {response.status_code} with a body that is not "
            f"the memstack API's ({type(exc).__name__}: {exc}); is the URL a memstack server?"
        ) from exc


def unreachable(base_url: httpx.URL, c: Call[Any], exc: httpx.TransportError) -> StoreUnavailable:
    """A request that got no answer: the server is a store the client could not reach.

    A timeout after the request was sent leaves open whether a write happened; a
    ``remember`` retried with its ``msg_id`` is safe either way."""
    what = (
        "did not answer in time"
        if isinstance(exc, httpx.TimeoutException)
        else "could not be reached"
    )
    return StoreUnavailable(
        f"memstack server at {base_url} {what} ({c.method} {c.path}): {type(exc).__name__}: {exc}",
        layer="server",
    )


def client_options(base_url: str, api_key: str | None, timeout_s: float) -> dict[str, Any]:
    """What both clients pass to httpx."""
    if api_key is not None and (not isinstance(api_key, str) or not api_key.strip()):
        raise ValidationError("api_key must be a non-empty string, or None for no key")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
        raise ValidationError(f"timeout_s must be a positive number, got {timeout_s!r}")
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key.strip()}"
    return {"base_url": base_url, "headers": headers, "timeout": httpx.Timeout(timeout_s)}
