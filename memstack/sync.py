"""A synchronous facade for scripts: :class:`Memory` runs one :class:`AsyncMemory` on a
private event loop thread and forwards each call to it, so there is one implementation.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from memstack.core.api_keys import ApiKey
from memstack.core.erasure import UserErasure
from memstack.core.identity import UserIdentity
from memstack.core.ids import DEFAULT_NAMESPACE
from memstack.core.messages import Message, Remembered
from memstack.core.settings import Settings
from memstack.core.status import IngestStatus
from memstack.core.time import Timestamp
from memstack.knowledge.base import Progress, Source
from memstack.knowledge.cache import KnowledgeTurn
from memstack.memory import AsyncMemory
from memstack.transfer.exporting import ExportTarget
from memstack.transfer.importing import ImportSource, TransferProgress
from memstack.types import (
    AddReport,
    ContextResult,
    DeadLetter,
    ExportReport,
    ImportReport,
    KBDocument,
    KBHit,
    MaintenanceReport,
    ReindexReport,
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

# AsyncMemory's public coroutines without a Memory twin, and why: the rest of its API is
# mirrored here one for one (tests/test_sync_parity.py holds both lists to that).
ASYNC_ONLY = frozenset(
    {
        "open",  # Memory() opens in its constructor
        # store handles for the server, the CLI and the tests; not part of the API
        "memory_vectors",
        "worker",
        "knowledge_base",
        "knowledge_cache",
        "keys_without_ttl",
    }
)


class Memory:
    """``with Memory() as mem: mem.remember(...)`` — the same core as :class:`AsyncMemory`."""

    def __init__(self, settings: Settings | None = None) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="memstack", daemon=True)
        self._thread.start()
        try:
            self.aio: AsyncMemory = self._run(AsyncMemory.open(settings))
        except BaseException:
            self._stop_loop()
            raise

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self.aio.close())
        finally:
            self._stop_loop()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def settings(self) -> Settings:
        return self.aio.settings

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
        return self._run(
            self.aio.remember(user_id, session_id, role, content, msg_id=msg_id, ts=ts, name=name)
        )

    def remember_many(
        self, user_id: str, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[Remembered]:
        return self._run(self.aio.remember_many(user_id, session_id, messages))

    def window(self, user_id: str, session_id: str, n: int | None = None) -> list[Message]:
        return self._run(self.aio.window(user_id, session_id, n))

    def set_state(self, user_id: str, session_id: str, values: Mapping[str, Any]) -> None:
        self._run(self.aio.set_state(user_id, session_id, values))

    def get_state(self, user_id: str, session_id: str) -> SessionState:
        return self._run(self.aio.get_state(user_id, session_id))

    def get_tool_result(self, user_id: str, ref: str) -> str:
        return self._run(self.aio.get_tool_result(user_id, ref))

    # --- knowledge base and session knowledge cache -------------------------------
    def kb_add(
        self,
        *sources: Source,
        namespace: str = DEFAULT_NAMESPACE,
        progress: Progress | None = None,
    ) -> AddReport:
        return self._run(self.aio.kb_add(*sources, namespace=namespace, progress=progress))

    def kb_remove(self, doc_id: str, *, namespace: str = DEFAULT_NAMESPACE) -> KBDocument:
        return self._run(self.aio.kb_remove(doc_id, namespace=namespace))

    def kb_list(self, *, namespace: str = DEFAULT_NAMESPACE) -> list[KBDocument]:
        return self._run(self.aio.kb_list(namespace=namespace))

    def kb_search(
        self, query: str, top_k: int | None = None, *, namespace: str = DEFAULT_NAMESPACE
    ) -> list[KBHit]:
        return self._run(self.aio.kb_search(query, top_k, namespace=namespace))

    def knowledge_context(
        self, user_id: str, session_id: str, message: str, *, locale: str | None = None
    ) -> KnowledgeTurn:
        return self._run(self.aio.knowledge_context(user_id, session_id, message, locale=locale))

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
        return self._run(
            self.aio.context(
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

    def prepare(self) -> None:
        """See :meth:`AsyncMemory.prepare`."""
        self._run(self.aio.prepare())

    def drain(self, *, now: Timestamp | None = None, summarize: bool = True) -> WorkerReport:
        return self._run(self.aio.drain(now=now, summarize=summarize))

    def facts(self, user_id: str, *, as_of: Timestamp | None = None) -> list[StoredFact]:
        return self._run(self.aio.facts(user_id, as_of=as_of))

    def fact_history(self, user_id: str, key: str | None = None) -> list[StoredFact]:
        return self._run(self.aio.fact_history(user_id, key))

    def summaries(self, user_id: str, session_id: str | None = None) -> list[dict[str, Any]]:
        return self._run(self.aio.summaries(user_id, session_id))

    def forget_user(self, user_id: str) -> UserErasure:
        return self._run(self.aio.forget_user(user_id))

    def users(self, *, limit: int = 100, offset: int = 0) -> list[UserOverview]:
        return self._run(self.aio.users(limit=limit, offset=offset))

    def sessions(self, user_id: str) -> list[SessionOverview]:
        return self._run(self.aio.sessions(user_id))

    def messages(
        self, user_id: str, session_id: str, *, limit: int = 100, offset: int = 0
    ) -> list[Message]:
        return self._run(self.aio.messages(user_id, session_id, limit=limit, offset=offset))

    def get_message(self, user_id: str, msg_id: str) -> Message:
        return self._run(self.aio.get_message(user_id, msg_id))

    def delete_message(self, user_id: str, msg_id: str) -> dict[str, int]:
        return self._run(self.aio.delete_message(user_id, msg_id))

    def forget_session(self, user_id: str, session_id: str) -> dict[str, int]:
        return self._run(self.aio.forget_session(user_id, session_id))

    def search(
        self,
        user_id: str,
        query: str,
        *,
        limit: int = 10,
        since: Timestamp | None = None,
        until: Timestamp | None = None,
    ) -> list[SearchHit]:
        return self._run(self.aio.search(user_id, query, limit=limit, since=since, until=until))

    def set_fact(self, user_id: str, key: str, value: Any) -> StoredFact:
        return self._run(self.aio.set_fact(user_id, key, value))

    def delete_fact(self, user_id: str, key: str) -> StoredFact:
        return self._run(self.aio.delete_fact(user_id, key))

    def candidates(
        self,
        user_id: str,
        *,
        status: str = "pending",
        as_of: Timestamp | None = None,
        key: str | None = None,
    ) -> list[StoredCandidate]:
        return self._run(self.aio.candidates(user_id, status=status, as_of=as_of, key=key))

    def confirm_candidate(self, user_id: str, candidate_id: int) -> StoredFact:
        return self._run(self.aio.confirm_candidate(user_id, candidate_id))

    def reject_candidate(self, user_id: str, candidate_id: int) -> StoredCandidate:
        return self._run(self.aio.reject_candidate(user_id, candidate_id))

    def identity(self, user_id: str) -> UserIdentity:
        return self._run(self.aio.identity(user_id))

    def set_identity(
        self, user_id: str, *, display_name: str | None = None, aliases: Sequence[str] = ()
    ) -> UserIdentity:
        return self._run(self.aio.set_identity(user_id, display_name=display_name, aliases=aliases))

    # --- API keys ------------------------------------------------------------------
    def create_key(
        self, user_id: str | None = None, *, admin: bool = False, scopes: Iterable[str] = ()
    ) -> tuple[ApiKey, str]:
        return self._run(self.aio.create_key(user_id, admin=admin, scopes=scopes))

    def list_keys(self) -> list[ApiKey]:
        return self._run(self.aio.list_keys())

    def revoke_key(self, key_id: str) -> ApiKey:
        return self._run(self.aio.revoke_key(key_id))

    def authenticate(self, key: str) -> ApiKey | None:
        return self._run(self.aio.authenticate(key))

    def has_keys(self) -> bool:
        return self._run(self.aio.has_keys())

    def dead_letters(self, count: int = 100) -> list[DeadLetter]:
        return self._run(self.aio.dead_letters(count))

    def backlog(self) -> int:
        return self._run(self.aio.backlog())

    def health(self) -> dict[str, StoreStatus]:
        return self._run(self.aio.health())

    def status(self) -> IngestStatus:
        return self._run(self.aio.status())

    def maintain(self, *, dry_run: bool = True, now: Timestamp | None = None) -> MaintenanceReport:
        return self._run(self.aio.maintain(dry_run=dry_run, now=now))

    def reindex(self, progress: Callable[[int, int], None] | None = None) -> ReindexReport:
        return self._run(self.aio.reindex(progress))

    # --- moving memory (memstack.verbs.transfer) -----------------------------------------
    def export(
        self,
        out: ExportTarget,
        *,
        user_id: str | None = None,
        progress: TransferProgress | None = None,
    ) -> ExportReport:
        return self._run(self.aio.export(out, user_id=user_id, progress=progress))

    def export_lines(self, user_id: str | None = None) -> Iterator[str]:
        """See :meth:`AsyncMemory.export_lines`: the user id is checked at once."""
        lines = self.aio.export_lines(user_id)

        async def step() -> str | None:
            return await anext(lines, None)

        def taken() -> Iterator[str]:
            try:
                while (line := self._run(step())) is not None:
                    yield line
            finally:
                self._run(lines.aclose())

        return taken()

    def import_file(
        self, source: ImportSource, *, progress: TransferProgress | None = None
    ) -> ImportReport:
        return self._run(self.aio.import_file(source, progress=progress))
