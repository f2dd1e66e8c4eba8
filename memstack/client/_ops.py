"""The operations of the HTTP API, one function per method of :class:`memstack.Memory`
that has a route, with that method's parameters: each says which request to send and
how to read the answer (a :class:`~memstack.client._wire.Call`). Both clients send them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from memstack.client._wire import (
    Call,
    build,
    call,
    context_result,
    message,
    moment_text,
    segment,
    session_path,
    user_path,
)
from memstack.core import namespaces as ns
from memstack.core.erasure import UserErasure
from memstack.core.errors import ValidationError
from memstack.core.identity import UserIdentity, check_identity
from memstack.core.ids import (
    DEFAULT_NAMESPACE,
    validate_candidate_id,
    validate_id,
    validate_msg_id,
)
from memstack.core.messages import Message, Remembered
from memstack.core.status import IngestStatus, StreamLag, WorkerBeat
from memstack.core.time import Timestamp
from memstack.types import (
    AddReport,
    AddResult,
    ContextResult,
    Document,
    KBDocument,
    KBHit,
    SearchHit,
    SessionOverview,
    SessionState,
    StoredCandidate,
    StoredFact,
    StoreStatus,
    UserOverview,
    WorkerReport,
)

FACT_TIMES = ("valid_from", "valid_until")
CANDIDATE_TIMES = ("said_at", "decided_at")
DOCUMENT_TIMES = ("created_at", "updated_at")
KB_DOCUMENTS = "/v1/knowledge/documents"
# memstack.knowledge's Progress: (documents done, documents in total, its result).
Progress = Callable[[int, int, AddResult], None]

# --- working memory ------------------------------------------------------------------------


def remember(
    user_id: str,
    session_id: str,
    role: str,
    content: str,
    *,
    msg_id: str | None = None,
    ts: Timestamp | None = None,
    name: str | None = None,
) -> Call[str]:
    body = {
        "role": role,
        "content": content,
        "msg_id": msg_id,
        "ts": moment_text("ts", ts),
        "name": name,
    }
    path = session_path(user_id, session_id, "messages")
    return call("POST", path, lambda d: str(d["msg_id"]), body=body)


def _batch_item(item: object) -> dict[str, Any]:
    if not isinstance(item, Mapping):
        raise ValidationError(f"a message is a mapping, not {type(item).__name__}")
    sent = dict(item)
    if "ts" in sent:
        sent["ts"] = moment_text("ts", sent["ts"])
    return sent


def remember_many(
    user_id: str, session_id: str, messages: Sequence[Mapping[str, Any]]
) -> Call[list[Remembered]]:
    # The server checks each message as the library does and names the index it refuses.
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise ValidationError("messages must be a list of messages")
    body = {"messages": [_batch_item(m) for m in messages]}
    path = session_path(user_id, session_id, "messages", "batch")
    return call("POST", path, lambda d: [build(Remembered, r) for r in d["results"]], body=body)


def window(user_id: str, session_id: str, n: int | None = None) -> Call[list[Message]]:
    read = message(user_id, session_id)
    path = session_path(user_id, session_id, "messages")
    return call("GET", path, lambda d: [read(m) for m in d["messages"]], params={"n": n})


def get_state(user_id: str, session_id: str) -> Call[SessionState]:
    path = session_path(user_id, session_id, "state")
    return call("GET", path, lambda d: build(SessionState, d, times=("last_msg_at",)))


def set_state(user_id: str, session_id: str, values: Mapping[str, Any]) -> Call[None]:
    if not isinstance(values, Mapping):
        raise ValidationError(f"state values must be a mapping, got {type(values).__name__}")
    for field in values:
        # JSON would turn 1 into "1" where the library refuses it.
        if not isinstance(field, str):
            raise ValidationError(f"state field name must be a string, got {field!r}")
    path = session_path(user_id, session_id, "state")
    # Every field is sent, None included: it deletes the field, as in the library.
    return call("PATCH", path, lambda _: None, body=values, omit_none=False)


def get_tool_result(user_id: str, ref: str) -> Call[str]:
    path = user_path(user_id, "tool-results", segment("ref", ref))
    return call("GET", path, lambda d: str(d["content"]))


# --- the read path ---------------------------------------------------------------------------


def context(
    user_id: str,
    session_id: str,
    query: str,
    *,
    budget_tokens: int | None = None,
    now: Timestamp | None = None,
    locale: str | None = None,
    system: str | None = None,
    namespaces: Sequence[str] = (),
) -> Call[ContextResult]:
    # Checked here as the library checks them; none asked is left out of the body, so
    # a server without integration namespaces still answers the call.
    asked = sorted(ns.check_all(namespaces))
    body = {
        "query": query,
        "budget_tokens": budget_tokens,
        "now": moment_text("now", now),
        "locale": locale,
        "system": system,
        "namespaces": asked or None,
    }
    return call("POST", session_path(user_id, session_id, "context"), context_result, body=body)


# --- users, sessions, messages, facts ----------------------------------------------------------


def users(*, limit: int = 100, offset: int = 0) -> Call[list[UserOverview]]:
    def read(d: Any) -> list[UserOverview]:
        return [build(UserOverview, u, times=("last_message_at",)) for u in d["users"]]

    return call("GET", "/v1/users", read, params={"limit": limit, "offset": offset})


def sessions(user_id: str) -> Call[list[SessionOverview]]:
    times = ("first_message_at", "last_message_at")
    return call(
        "GET",
        user_path(user_id, "sessions"),
        lambda d: [build(SessionOverview, s, times=times) for s in d["sessions"]],
    )


def messages(
    user_id: str, session_id: str, *, limit: int = 100, offset: int = 0
) -> Call[list[Message]]:
    read = message(user_id, session_id)
    return call(
        "GET",
        session_path(user_id, session_id, "ledger"),
        lambda d: [read(m) for m in d["messages"]],
        params={"limit": limit, "offset": offset},
    )


def _facts(d: Any) -> list[StoredFact]:
    return [_fact(f) for f in d["facts"]]


def facts(user_id: str, *, as_of: Timestamp | None = None) -> Call[list[StoredFact]]:
    params = {"as_of": moment_text("as_of", as_of)}
    return call("GET", user_path(user_id, "facts"), _facts, params=params)


def fact_history(user_id: str, key: str | None = None) -> Call[list[StoredFact]]:
    return call("GET", user_path(user_id, "facts", "history"), _facts, params={"key": key})


def _deleted(d: Any) -> dict[str, int]:
    return {k: int(v) for k, v in d["deleted"].items()}


def _msg_path(user_id: str, msg_id: str) -> str:
    # A stored id may hold one "/" (<user>/<session>:<id>): the route takes it as is.
    parts = validate_msg_id(msg_id).split("/")
    return user_path(user_id, "messages", *(quote(p, safe="") for p in parts))


def get_message(user_id: str, msg_id: str) -> Call[Message]:
    def read(d: Any) -> Message:
        return message(user_id, d["session_id"])(d)

    return call("GET", _msg_path(user_id, msg_id), read)


def delete_message(user_id: str, msg_id: str) -> Call[dict[str, int]]:
    return call("DELETE", _msg_path(user_id, msg_id), _deleted)


def forget_session(user_id: str, session_id: str) -> Call[dict[str, int]]:
    return call("DELETE", session_path(user_id, session_id), _deleted)


def search(
    user_id: str,
    query: str,
    *,
    limit: int = 10,
    since: Timestamp | None = None,
    until: Timestamp | None = None,
) -> Call[list[SearchHit]]:
    body = {
        "query": query,
        "limit": limit,
        "since": moment_text("since", since),
        "until": moment_text("until", until),
    }
    return call(
        "POST",
        user_path(user_id, "search"),
        lambda d: [build(SearchHit, h, times=("created_at",)) for h in d["hits"]],
        body=body,
    )


def _fact_path(user_id: str, key: str) -> str:
    if key == "history":
        # Its path is the facts' history; the library takes it.
        raise ValidationError("the fact key 'history' cannot be set or deleted over HTTP")
    return user_path(user_id, "facts", segment("key", key))


def _fact(d: Any) -> StoredFact:
    return build(StoredFact, d, times=FACT_TIMES)


def set_fact(user_id: str, key: str, value: Any) -> Call[StoredFact]:
    # A null value is sent as such: the server says why it refuses it.
    body = {"value": value}
    return call("PUT", _fact_path(user_id, key), _fact, body=body, omit_none=False)


def delete_fact(user_id: str, key: str) -> Call[StoredFact]:
    return call("DELETE", _fact_path(user_id, key), _fact)


def _candidate(d: Any) -> StoredCandidate:
    return build(StoredCandidate, d, times=CANDIDATE_TIMES)


def candidates(
    user_id: str,
    *,
    status: str = "pending",
    as_of: Timestamp | None = None,
    key: str | None = None,
) -> Call[list[StoredCandidate]]:
    # None would be left out of the query and read as the default: refuse it, as the
    # library does. Which names are statuses the server says.
    if not isinstance(status, str):
        raise ValidationError(f"status must be a string, got {status!r}")
    params = {
        "status": status,
        "as_of": moment_text("as_of", as_of),
        "key": None if key is None else validate_id("key", key),
    }
    path = user_path(user_id, "candidates")
    return call("GET", path, lambda d: [_candidate(c) for c in d["candidates"]], params=params)


def _candidate_path(user_id: str, candidate_id: int, decision: str) -> str:
    wanted = validate_candidate_id(candidate_id)
    return user_path(user_id, "candidates", str(wanted), decision)


def confirm_candidate(user_id: str, candidate_id: int) -> Call[StoredFact]:
    return call("POST", _candidate_path(user_id, candidate_id, "confirm"), _fact)


def reject_candidate(user_id: str, candidate_id: int) -> Call[StoredCandidate]:
    return call("POST", _candidate_path(user_id, candidate_id, "reject"), _candidate)


def _identity(d: Any) -> UserIdentity:
    return UserIdentity(d["user_id"], d["display_name"], tuple(d["aliases"]))


def identity(user_id: str) -> Call[UserIdentity]:
    return call("GET", user_path(user_id, "identity"), _identity)


def set_identity(
    user_id: str, *, display_name: str | None = None, aliases: Sequence[str] = ()
) -> Call[UserIdentity]:
    path = user_path(user_id, "identity")
    # Checked here as the library checks it, so a bad name is the same exception.
    wanted = check_identity(user_id, display_name, aliases)
    body = {"display_name": wanted.display_name, "aliases": list(wanted.aliases)}
    return call("PUT", path, _identity, body=body)


def forget_user(user_id: str) -> Call[UserErasure]:
    return call(
        "DELETE",
        user_path(user_id),
        lambda d: UserErasure(_deleted(d), [str(k) for k in d["revoked_keys"]]),
    )


# --- the knowledge base ----------------------------------------------------------------------


def _document_in(source: object) -> dict[str, Any]:
    if isinstance(source, str):
        return {"text": source}
    if isinstance(source, Document):
        fields = {"doc_id": source.doc_id, "title": source.title, "source": source.source}
        return {"text": source.text, **{k: v for k, v in fields.items() if v is not None}}
    raise ValidationError(
        f"the HTTP API takes documents as text (a str or a Document), not "
        f"{type(source).__name__}: the server reads no files; read it and pass "
        "Document(text=..., source=...)"
    )


def kb_add(
    *sources: Document | str,
    namespace: str = DEFAULT_NAMESPACE,
    progress: Progress | None = None,
) -> Call[AddReport]:
    """``progress(done, total, result)`` is called for each document as in the library,
    but only once the server has answered for all of them (one request)."""
    documents = [_document_in(s) for s in sources]

    def read(d: Any) -> AddReport:
        report = AddReport(build(AddResult, r) for r in d["results"])
        if progress is not None:
            for done, result in enumerate(report, start=1):
                progress(done, len(report), result)
        return report

    body = {"documents": documents, "namespace": namespace}
    return call("POST", KB_DOCUMENTS, read, body=body)


def kb_remove(doc_id: str, *, namespace: str = DEFAULT_NAMESPACE) -> Call[KBDocument]:
    return call(
        "DELETE",
        f"{KB_DOCUMENTS}/{segment('doc_id', doc_id)}",
        lambda d: build(KBDocument, d, times=DOCUMENT_TIMES),
        params={"namespace": namespace},
    )


def kb_list(*, namespace: str = DEFAULT_NAMESPACE) -> Call[list[KBDocument]]:
    return call(
        "GET",
        KB_DOCUMENTS,
        lambda d: [build(KBDocument, x, times=DOCUMENT_TIMES) for x in d["documents"]],
        params={"namespace": namespace},
    )


def kb_search(
    query: str, top_k: int | None = None, *, namespace: str = DEFAULT_NAMESPACE
) -> Call[list[KBHit]]:
    body = {"query": query, "top_k": top_k, "namespace": namespace}
    return call(
        "POST", "/v1/knowledge/search", lambda d: [build(KBHit, h) for h in d["hits"]], body=body
    )


# --- operations ------------------------------------------------------------------------------


def drain(*, now: Timestamp | None = None, summarize: bool = True) -> Call[WorkerReport]:
    """The server drains with its own clock and always summarises quiet sessions: the
    arguments exist for parity with :meth:`memstack.Memory.drain` and only their
    defaults are accepted."""
    if now is not None or summarize is not True:
        raise ValidationError(
            "drain over HTTP takes neither now nor summarize: the server drains with its "
            "own clock and summarises quiet sessions"
        )
    return call("POST", "/v1/admin/drain", lambda d: build(WorkerReport, d))


def _status(d: Any) -> IngestStatus:
    # pending, oldest_age_s and stalled travel too, but the library computes them from
    # the workers and streams, so they are not read back.
    return IngestStatus(
        workers=tuple(build(WorkerBeat, w) for w in d["workers"]),
        streams=tuple(build(StreamLag, s) for s in d["streams"]),
    )


def status() -> Call[IngestStatus]:
    """``GET /v1/admin/status``: the live ingest workers and each stream's lag (an
    admin key or the token; a user key is Forbidden)."""
    return call("GET", "/v1/admin/status", _status)


def health() -> Call[dict[str, StoreStatus]]:
    """``/healthz``: each store's status. A store that is down is an answer (503 with the
    same body), not an error."""
    return call(
        "GET",
        "/healthz",
        lambda d: {name: build(StoreStatus, s) for name, s in d["stores"].items()},
        answers=frozenset({503}),
    )
