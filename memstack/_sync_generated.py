# generated from AsyncMemory by scripts/gen_sync.py — do not edit
"""Memory's plain forwarders (memstack/sync.py): one per public coroutine of
:class:`AsyncMemory` that sync.py neither writes by hand nor names in ``ASYNC_ONLY``,
with its parameters, answer and docstring's first paragraph."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from memstack.core.api_keys import ApiKey
from memstack.core.erasure import UserErasure
from memstack.core.identity import UserIdentity
from memstack.core.ids import DEFAULT_NAMESPACE
from memstack.core.messages import Message, Remembered
from memstack.core.status import IngestStatus
from memstack.core.time import Timestamp
from memstack.knowledge.base import Progress, Source
from memstack.knowledge.cache import KnowledgeTurn
from memstack.memory import AsyncMemory
from memstack.stores.sql.candidates import PENDING
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


class MemoryForwarders:
    """Each method runs its :class:`AsyncMemory` coroutine on :class:`Memory`'s loop."""

    aio: AsyncMemory

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        raise NotImplementedError  # Memory runs it on its private loop

    # from memstack/memory.py
    def drain(self, *, now: Timestamp | None = None, summarize: bool = True) -> WorkerReport:
        """Process every pending ingest job in-process, then summarise quiet sessions."""
        return self._run(self.aio.drain(now=now, summarize=summarize))

    def dead_letters(self, count: int = 100) -> list[DeadLetter]:
        return self._run(self.aio.dead_letters(count))

    def backlog(self) -> int:
        """Ingest jobs queued or delivered and not yet acknowledged, over every stream."""
        return self._run(self.aio.backlog())

    def maintain(self, *, dry_run: bool = True, now: Timestamp | None = None) -> MaintenanceReport:
        """Archive cold facts and prune inactive users' old dialogue vectors."""
        return self._run(self.aio.maintain(dry_run=dry_run, now=now))

    def health(self) -> dict[str, StoreStatus]:
        """Each store probed once: Redis, the database, the vector store, and a
        knowledge-base server if one is configured."""
        return self._run(self.aio.health())

    def reindex(self, progress: Callable[[int, int], None] | None = None) -> ReindexReport:
        """Drop the semantic-memory collection and rebuild it from the ledger with the
        configured embedder (after a model change: the error says ``memstack reindex``),
        which the deployment then keeps under ``embedder=auto``."""
        return self._run(self.aio.reindex(progress))

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
        """Record one message; return its ``msg_id``."""
        return self._run(
            self.aio.remember(user_id, session_id, role, content, msg_id=msg_id, ts=ts, name=name)
        )

    def window(self, user_id: str, session_id: str, n: int | None = None) -> list[Message]:
        """The session's last ``n`` messages (default ``recent_window_read``), oldest first;
        a window Redis lost is rebuilt from the ledger first."""
        return self._run(self.aio.window(user_id, session_id, n))

    def set_state(self, user_id: str, session_id: str, values: Mapping[str, Any]) -> None:
        """Set task-state fields; a field whose value is None is deleted, the others are
        kept. A value larger than ``large_value_bytes`` is stored in the database; the
        hash keeps a reference ``{"$ref", "summary", "bytes"}``."""
        self._run(self.aio.set_state(user_id, session_id, values))

    def get_state(self, user_id: str, session_id: str) -> SessionState:
        return self._run(self.aio.get_state(user_id, session_id))

    def get_tool_result(self, user_id: str, ref: str) -> str:
        """The full content behind a ``$ref`` left in the state hash."""
        return self._run(self.aio.get_tool_result(user_id, ref))

    def kb_add(
        self, *sources: Source, namespace: str = DEFAULT_NAMESPACE, progress: Progress | None = None
    ) -> AddReport:
        """Add or replace documents: a ``Path`` is a file or folder, a ``str`` is the text
        of a document, a :class:`~memstack.knowledge.base.Document` is text with its id."""
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
        """One turn of the session knowledge cache: the "domain knowledge" section for
        ``message`` (Level 2 merged with what the session found before)."""
        return self._run(self.aio.knowledge_context(user_id, session_id, message, locale=locale))

    def prepare(self) -> None:
        """Load the models ``context()`` runs (the query embedder, the word-neighbour
        table, the cross-encoder if ``rerank`` is on) now, for a process that serves
        queries from its start: its first call then pays no load, and every call embeds
        with the same query model."""
        self._run(self.aio.prepare())

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
        """The assembled context for ``query`` (docs/spec.md, Read path): ``text``, chat
        ``messages``, the sections, and a manifest of every item considered. ``now`` (default: the
        clock) fixes recency and relative ages, so a call can be reproduced. The user's own
        conversation is recalled; memory an integration keeps (``"langgraph"``,
        ``"llama_index"``: :mod:`memstack.core.namespaces`) only if ``namespaces`` names it."""
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

    # from memstack/verbs/reading.py
    def users(self, *, limit: int = 100, offset: int = 0) -> list[UserOverview]:
        """Users with messages in the ledger, by id: their session and message counts and
        the time of their last message."""
        return self._run(self.aio.users(limit=limit, offset=offset))

    def sessions(self, user_id: str) -> list[SessionOverview]:
        """The user's sessions in the ledger, oldest first, with their first and last
        message times; empty for a user with none."""
        return self._run(self.aio.sessions(user_id))

    def messages(
        self, user_id: str, session_id: str, *, limit: int = 100, offset: int = 0
    ) -> list[Message]:
        """One page of a session's messages in the ledger, oldest first."""
        return self._run(self.aio.messages(user_id, session_id, limit=limit, offset=offset))

    def get_message(self, user_id: str, msg_id: str) -> Message:
        """One message of the user by its id (as ``remember()`` returned it): from the
        ledger, or while the worker has not stored it yet from its session's window or
        its queued job. :class:`NotFound` if the user has no such message (another
        user's included)."""
        return self._run(self.aio.get_message(user_id, msg_id))

    def search(
        self,
        user_id: str,
        query: str,
        *,
        limit: int = 10,
        since: Timestamp | None = None,
        until: Timestamp | None = None,
    ) -> list[SearchHit]:
        """The user's messages that best answer ``query``, best first: the read path's
        ranking (dense and BM25 channels fused, reranked if configured) without its
        filters, budget or assembly. ``since`` / ``until`` (aware datetimes or epoch
        seconds, both ends included) keep messages created within them."""
        return self._run(self.aio.search(user_id, query, limit=limit, since=since, until=until))

    def summaries(self, user_id: str, session_id: str | None = None) -> list[dict[str, Any]]:
        return self._run(self.aio.summaries(user_id, session_id))

    # from memstack/verbs/facts.py
    def facts(self, user_id: str, *, as_of: Timestamp | None = None) -> list[StoredFact]:
        """The user's current facts (``valid_until IS NULL``), most confident first; with
        ``as_of`` (an aware datetime or epoch seconds), those current at that moment
        (``valid_from <= as_of < valid_until``), archived ones included. A fact whose
        message was deleted is kept, with ``source_deleted``."""
        return self._run(self.aio.facts(user_id, as_of=as_of))

    def fact_history(self, user_id: str, key: str | None = None) -> list[StoredFact]:
        """Every value a fact ever had, current, superseded and retracted, oldest first (a
        retracted one names the message that withdrew it: ``ended_by_msg_id``)."""
        return self._run(self.aio.fact_history(user_id, key))

    def set_fact(self, user_id: str, key: str, value: Any) -> StoredFact:
        """Set ``key`` to ``value`` by hand (``source="user_stated"``, confidence 1.0):
        the current value, if different, is superseded as extraction supersedes it,
        its history kept. The key and value are checked and shaped as extraction's are
        (``"budget"`` is ``budget_limit``, ``"8000元"`` is ``{"amount": 8000, ...}``).
        Returns the current row: the new one, or the old one if the value is the same."""
        return self._run(self.aio.set_fact(user_id, key, value))

    def delete_fact(self, user_id: str, key: str) -> StoredFact:
        """End the current value of ``key`` with nothing in its place (a retraction by
        hand): its row gets ``valid_until`` and is kept in the history. Returns that row;
        :class:`NotFound` if the key has no current value."""
        return self._run(self.aio.delete_fact(user_id, key))

    # from memstack/verbs/candidates.py
    def candidates(
        self,
        user_id: str,
        *,
        status: str = PENDING,
        as_of: Timestamp | None = None,
        key: str | None = None,
    ) -> list[StoredCandidate]:
        """The user's fact candidates, newest first: ``pending`` ones (the default),
        ``confirmed``, ``rejected``, ``superseded`` or ``all``. With ``as_of`` (an aware
        datetime or epoch seconds): those that were pending at that moment, whatever
        became of them since. A candidate whose message was deleted is gone with it."""
        return self._run(self.aio.candidates(user_id, status=status, as_of=as_of, key=key))

    def confirm_candidate(self, user_id: str, candidate_id: int) -> StoredFact:
        """Confirm a pending candidate: its value becomes the user's current fact now
        (confidence 1.0, its message as the source, ``candidate_id`` naming the
        candidate), superseding the current value as ``set_fact`` does, history kept.
        Returns the current fact. :class:`NotFound` for a candidate the user does not
        have, :class:`Conflict` for one already decided; nothing changes then."""
        return self._run(self.aio.confirm_candidate(user_id, candidate_id))

    def reject_candidate(self, user_id: str, candidate_id: int) -> StoredCandidate:
        """Reject a pending candidate: it is kept, ``rejected``, with the time, and never
        served. :class:`NotFound` / :class:`Conflict` as :meth:`confirm_candidate`."""
        return self._run(self.aio.reject_candidate(user_id, candidate_id))

    # from memstack/verbs/identity.py
    def identity(self, user_id: str) -> UserIdentity:
        """The user's display name and aliases; :class:`NotFound` for an unknown user."""
        return self._run(self.aio.identity(user_id))

    def set_identity(
        self, user_id: str, *, display_name: str | None = None, aliases: Sequence[str] = ()
    ) -> UserIdentity:
        """Bind the names the user speaks under, replacing those bound before: a message
        of role ``user`` whose ``name`` is one of them (compared ignoring case and width)
        is the user's own, and its facts are the user's; any other named author's are
        not. Applies to messages ingested from now on. :class:`ValidationError` for a
        bad name, :class:`NotFound` for a user memstack has stored nothing of; nothing
        changes then."""
        return self._run(self.aio.set_identity(user_id, display_name=display_name, aliases=aliases))

    # from memstack/verbs/erasure.py
    def forget_user(self, user_id: str) -> UserErasure:
        """Erase everything memstack holds about ``user_id`` in every layer, and revoke
        every API key bound to the user (``revoked_keys`` lists their ids)."""
        return self._run(self.aio.forget_user(user_id))

    def forget_session(self, user_id: str, session_id: str) -> dict[str, int]:
        """Erase one session of the user in every layer: its window, task state,
        knowledge cache and other Redis keys, its queued jobs, its ledger rows, vectors,
        summaries and stored tool results. The user's facts stay (see the module
        docstring); ``facts_kept`` counts those the session stated. Final against work
        in flight, as :meth:`forget_user` is; a session with nothing to erase gives
        zeros."""
        return self._run(self.aio.forget_session(user_id, session_id))

    def delete_message(self, user_id: str, msg_id: str) -> dict[str, int]:
        """Erase one message of the user in every layer: the window, its queued job, the
        ledger (and so BM25), its vectors, and the summaries that include it. The exchange
        unit that held it is derived again from its neighbours, so no recall returns its
        text. Facts it stated stay, marked ``source_deleted`` (``facts_kept``).
        :class:`NotFound` if the user has no such message. Final against work in flight,
        as :meth:`forget_user` is."""
        return self._run(self.aio.delete_message(user_id, msg_id))

    # from memstack/verbs/keys.py
    def create_key(
        self, user_id: str | None = None, *, admin: bool = False, scopes: Iterable[str] = ()
    ) -> tuple[ApiKey, str]:
        """A new API key: the stored key and the key text a client sends as its bearer
        token. The text is returned once and never stored (only its secret's SHA-256)."""
        return self._run(self.aio.create_key(user_id, admin=admin, scopes=scopes))

    def list_keys(self) -> list[ApiKey]:
        """Every key of this deployment (its key prefix), revoked ones included, oldest
        first."""
        return self._run(self.aio.list_keys())

    def revoke_key(self, key_id: str) -> ApiKey:
        """Revoke a key for good; revoking it again changes nothing. :class:`NotFound`
        when this deployment has no such key."""
        return self._run(self.aio.revoke_key(key_id))

    def authenticate(self, key: str) -> ApiKey | None:
        """The live key ``key`` (the text ``create_key`` returned) is, or None: unknown,
        revoked, malformed or with a wrong secret. Read at most every ``KEY_CACHE_S`` per
        key id; while the database cannot be read, the last answer read stands (a key
        not read before raises :class:`StoreUnavailable`)."""
        return self._run(self.aio.authenticate(key))

    def has_keys(self) -> bool:
        """Whether this deployment has any unrevoked key (then the HTTP API asks every
        /v1 request for one). Read at most every ``KEY_CACHE_S``, with the last answer
        standing while the database cannot be read."""
        return self._run(self.aio.has_keys())

    # from memstack/verbs/transfer.py
    def export(
        self,
        out: ExportTarget,
        *,
        user_id: str | None = None,
        progress: TransferProgress | None = None,
    ) -> ExportReport:
        """Write ``user_id``'s memory, or with ``user_id=None`` every user's and the
        knowledge base, to ``out`` (a path, or a binary or text stream) as JSON Lines:
        the ledger, the whole fact history, fact candidates with their decisions, the
        names the user speaks under, summaries, tool results and task state. A path
        is written under a temporary name and renamed once complete. Messages still in the
        ingest queue are not in the ledger yet: drain first. ``progress(stage, done,
        total)`` is called after each user."""
        return self._run(self.aio.export(out, user_id=user_id, progress=progress))

    def import_file(
        self, source: ImportSource, *, progress: TransferProgress | None = None
    ) -> ImportReport:
        """Read an export (a path, the file's bytes, or a binary or text stream) into this
        deployment: rows already here are kept (importing twice changes nothing), messages
        and summaries are embedded with this deployment's embedder, facts and fact
        candidates are written as they were (never extracted again; their ids are this
        deployment's, their links mapped), and a user's names replace those bound here."""
        return self._run(self.aio.import_file(source, progress=progress))

    # from memstack/verbs/operations.py
    def status(self) -> IngestStatus:
        """The live workers (id, host, pid, seconds since the last beat) and, per
        ingest stream, the jobs not yet acknowledged, the age of the oldest and the dead
        letters. A worker counts as live until its heartbeat's TTL runs out."""
        return self._run(self.aio.status())

    # from memstack/verbs/writing.py
    def remember_many(
        self, user_id: str, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[Remembered]:
        """Record many messages of one session, in order: one :class:`Remembered` per
        message, ``ok``, ``duplicate`` or ``error``."""
        return self._run(self.aio.remember_many(user_id, session_id, messages))
