# generated from _async.py by scripts/gen_sync.py — do not edit
""":class:`MemoryClient`: :class:`memstack.Memory`'s methods over the HTTP API."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

import httpx

from memstack.client import _ops
from memstack.client._ops import Progress
from memstack.client._transfer import (
    ExportSink,
    ExportTarget,
    ImportSource,
    TransferProgress,
    export_call,
    import_call,
)
from memstack.client._wire import Call, client_options, error_of, outcome, unreachable
from memstack.core.erasure import UserErasure
from memstack.core.identity import UserIdentity
from memstack.core.ids import DEFAULT_NAMESPACE
from memstack.core.messages import Message, Remembered
from memstack.core.status import IngestStatus
from memstack.core.time import Timestamp
from memstack.types import (
    AddReport,
    ContextResult,
    Document,
    ExportReport,
    ImportReport,
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

T = TypeVar("T")


class MemoryClient:
    """``with MemoryClient(url, api_key=key) as mem: mem.remember(...)``

    The methods of :class:`memstack.Memory` that the HTTP API serves, with the
    same arguments, answers and exceptions (see :mod:`memstack.client`).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            **client_options(base_url, api_key, timeout_s), transport=transport
        )

    @property
    def base_url(self) -> str:
        return str(self._http.base_url)

    def _send(self, c: Call[T]) -> T:
        try:
            response = self._http.request(
                c.method, c.path, params=c.params, content=c.content, headers=c.headers
            )
        except httpx.TransportError as exc:
            raise unreachable(self._http.base_url, c, exc) from exc
        return outcome(c, response)

    def _lines(self, c: Call[Any]) -> Iterator[str]:
        """A streamed answer's lines, each ending with a newline as the library's do."""
        try:
            with self._http.stream(c.method, c.path, params=c.params, headers=c.headers) as r:
                if not r.is_success:
                    r.read()
                    raise error_of(r)
                for line in r.iter_lines():
                    if line:
                        yield line + "\n"
        except httpx.TransportError as exc:
            raise unreachable(self._http.base_url, c, exc) from exc

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- working memory --------------------------------------------------------------------
    def remember(
        self,
        user_id: str,
        session_id: str,
        role: str,
        content: str,
        *,
        msg_id: str | None = None,
        ts: Timestamp | None = None,
        name: str | None = None,
    ) -> str:
        return self._send(
            _ops.remember(user_id, session_id, role, content, msg_id=msg_id, ts=ts, name=name)
        )

    def remember_many(
        self, user_id: str, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[Remembered]:
        return self._send(_ops.remember_many(user_id, session_id, messages))

    def window(self, user_id: str, session_id: str, n: int | None = None) -> list[Message]:
        return self._send(_ops.window(user_id, session_id, n))

    def set_state(self, user_id: str, session_id: str, values: Mapping[str, Any]) -> None:
        self._send(_ops.set_state(user_id, session_id, values))

    def get_state(self, user_id: str, session_id: str) -> SessionState:
        return self._send(_ops.get_state(user_id, session_id))

    def get_tool_result(self, user_id: str, ref: str) -> str:
        return self._send(_ops.get_tool_result(user_id, ref))

    # --- the read path -----------------------------------------------------------------------
    def context(
        self,
        user_id: str,
        session_id: str,
        query: str,
        *,
        budget_tokens: int | None = None,
        now: Timestamp | None = None,
        locale: str | None = None,
        system: str | None = None,
        namespaces: Sequence[str] = (),
    ) -> ContextResult:
        return self._send(
            _ops.context(
                user_id,
                session_id,
                query,
                budget_tokens=budget_tokens,
                now=now,
                locale=locale,
                system=system,
                namespaces=namespaces,
            )
        )

    # --- users, sessions, messages, facts ----------------------------------------------------
    def users(self, *, limit: int = 100, offset: int = 0) -> list[UserOverview]:
        return self._send(_ops.users(limit=limit, offset=offset))

    def sessions(self, user_id: str) -> list[SessionOverview]:
        return self._send(_ops.sessions(user_id))

    def messages(
        self, user_id: str, session_id: str, *, limit: int = 100, offset: int = 0
    ) -> list[Message]:
        return self._send(_ops.messages(user_id, session_id, limit=limit, offset=offset))

    def facts(self, user_id: str, *, as_of: Timestamp | None = None) -> list[StoredFact]:
        return self._send(_ops.facts(user_id, as_of=as_of))

    def fact_history(self, user_id: str, key: str | None = None) -> list[StoredFact]:
        return self._send(_ops.fact_history(user_id, key))

    def forget_user(self, user_id: str) -> UserErasure:
        return self._send(_ops.forget_user(user_id))

    def get_message(self, user_id: str, msg_id: str) -> Message:
        return self._send(_ops.get_message(user_id, msg_id))

    def delete_message(self, user_id: str, msg_id: str) -> dict[str, int]:
        return self._send(_ops.delete_message(user_id, msg_id))

    def forget_session(self, user_id: str, session_id: str) -> dict[str, int]:
        return self._send(_ops.forget_session(user_id, session_id))

    def search(
        self,
        user_id: str,
        query: str,
        *,
        limit: int = 10,
        since: Timestamp | None = None,
        until: Timestamp | None = None,
    ) -> list[SearchHit]:
        return self._send(_ops.search(user_id, query, limit=limit, since=since, until=until))

    def set_fact(self, user_id: str, key: str, value: Any) -> StoredFact:
        return self._send(_ops.set_fact(user_id, key, value))

    def delete_fact(self, user_id: str, key: str) -> StoredFact:
        return self._send(_ops.delete_fact(user_id, key))

    # --- fact candidates and the user's names ------------------------------------------------
    def candidates(
        self,
        user_id: str,
        *,
        status: str = "pending",
        as_of: Timestamp | None = None,
        key: str | None = None,
    ) -> list[StoredCandidate]:
        return self._send(_ops.candidates(user_id, status=status, as_of=as_of, key=key))

    def confirm_candidate(self, user_id: str, candidate_id: int) -> StoredFact:
        return self._send(_ops.confirm_candidate(user_id, candidate_id))

    def reject_candidate(self, user_id: str, candidate_id: int) -> StoredCandidate:
        return self._send(_ops.reject_candidate(user_id, candidate_id))

    def identity(self, user_id: str) -> UserIdentity:
        return self._send(_ops.identity(user_id))

    def set_identity(
        self, user_id: str, *, display_name: str | None = None, aliases: Sequence[str] = ()
    ) -> UserIdentity:
        return self._send(_ops.set_identity(user_id, display_name=display_name, aliases=aliases))

    # --- the knowledge base ------------------------------------------------------------------
    def kb_add(
        self,
        *sources: Document | str,
        namespace: str = DEFAULT_NAMESPACE,
        progress: Progress | None = None,
    ) -> AddReport:
        return self._send(_ops.kb_add(*sources, namespace=namespace, progress=progress))

    def kb_remove(self, doc_id: str, *, namespace: str = DEFAULT_NAMESPACE) -> KBDocument:
        return self._send(_ops.kb_remove(doc_id, namespace=namespace))

    def kb_list(self, *, namespace: str = DEFAULT_NAMESPACE) -> list[KBDocument]:
        return self._send(_ops.kb_list(namespace=namespace))

    def kb_search(
        self, query: str, top_k: int | None = None, *, namespace: str = DEFAULT_NAMESPACE
    ) -> list[KBHit]:
        return self._send(_ops.kb_search(query, top_k, namespace=namespace))

    # --- operations ----------------------------------------------------------------------------
    def drain(self, *, now: Timestamp | None = None, summarize: bool = True) -> WorkerReport:
        return self._send(_ops.drain(now=now, summarize=summarize))

    def health(self) -> dict[str, StoreStatus]:
        return self._send(_ops.health())

    def status(self) -> IngestStatus:
        return self._send(_ops.status())

    # --- export and import -------------------------------------------------------------------
    def export(
        self,
        out: ExportTarget,
        *,
        user_id: str | None = None,
        progress: TransferProgress | None = None,
    ) -> ExportReport:
        sink = ExportSink(out, progress)
        lines = self._lines(export_call(user_id))
        with sink.opened() as write:
            for line in lines:
                write(line)
        return sink.report

    def export_lines(self, user_id: str | None = None) -> Iterator[str]:
        """The user id is checked at once; the request is sent when the first line is taken."""
        return self._lines(export_call(user_id))

    def import_file(
        self, source: ImportSource, *, progress: TransferProgress | None = None
    ) -> ImportReport:
        return self._send(import_call(source, progress))
