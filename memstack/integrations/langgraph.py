"""LangGraph's long-term memory store on memstack: :class:`MemstackStore`.

``graph.compile(store=MemstackStore(Memory()))`` gives a graph's nodes a LangGraph
``BaseStore`` whose items live in memstack (ledger, BM25, vectors), so
``store.search(namespace, query=...)`` is memstack's hybrid recall.

* **Namespace → user and session.** One label names the memstack user (``user_label``,
  the first by default: ``("alice", "memories")`` is user ``alice``); the others, joined
  by ``.`` after a ``marker`` (``"langgraph"``), name the session: ``langgraph.memories``.
  LangGraph forbids ``.`` in labels, so a session id reads back into one namespace, and
  the marker keeps the user's own conversations out of the store's view. Labels and keys
  must be memstack ids (``[A-Za-z0-9_.:@-]``), else the batch is refused before anything
  is written. Users are memstack's unit of isolation: one user's namespaces never read or
  list another's items.
* **Item → message** of that session: the value as JSON (``get`` gives back what was
  put, in JSON types, as PostgresStore does), under the id ``<key>@<created ms>.<version>``.
* **Update → new version.** ``remember()``'s idempotency mark on a caller's ``msg_id``
  outlives ``delete_message()`` for a day: the same id cannot be written again (other
  content is a ``Conflict``, the same a duplicate: nothing written). So a put writes a
  new version, then erases the older ones with ``delete_message()`` (every layer); a
  reader in between takes the newest (versions start with the writer's clock). Keys are
  at most :data:`MAX_KEY_LEN` characters, the id carrying the first ``created_at``.
* **Reads.** A namespace is read whole (ledger pages and window) once per batch: the
  store is meant for an agent's memories (hundreds to thousands of items a namespace).
  ``search`` without a query lists items newest update first (as PostgresStore does);
  with one, it is memstack's ``search()`` for each user under the prefix, keeping of its
  best :data:`SEARCH_POOL` messages the current items that pass ``filter``.
* **Visibility.** With ``drain`` (the default) a batch that writes ends with ``drain()``,
  so search and listing find what was put at once. Beside a ``memstack worker`` pass
  ``drain=False``: ``get`` sees a new item at once (window), search once it is stored.
* **Batches** behave as LangGraph's InMemoryStore: results in the order of the ops,
  reads see the store as before the batch, the last put of a key wins. ``index`` is not
  honoured (memstack indexes every item whole); TTLs are not supported.
* **Sync and async.** Over a :class:`memstack.Memory`, ``batch`` runs on its loop thread
  and ``abatch`` awaits that from any loop. Over an :class:`memstack.AsyncMemory`,
  ``abatch`` runs in the caller's loop (the memory's); ``batch`` runs from other threads
  while that loop runs (LangGraph runs sync nodes of async graphs in threads), and is
  refused on the loop's own thread, where waiting would deadlock.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import time
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )
except ImportError as exc:
    raise ImportError(
        "memstack.integrations.langgraph needs LangGraph: pip install 'memstack[langgraph]'"
    ) from exc

from memstack import AsyncMemory, InvalidId, Memory, Message, NotFound, ValidationError
from memstack.core.ids import MAX_ID_LEN, validate_id
from memstack.core.messages import ROLES, validate_message

# The version suffix "@<13-digit ms>.<20 hex>" takes 35 of a caller id's 128 characters.
MAX_KEY_LEN = MAX_ID_LEN - 35
# memstack's search() returns at most 100 messages; a query sees the best of them.
SEARCH_POOL = 100
_PAGE = 1000
_VERSIONED = re.compile(r"^(?P<key>.+)@(?P<created>\d{1,13})\.(?P<version>[0-9a-f]{20})$")


@dataclass(frozen=True)
class _Stored:
    """One version of an item as memstack holds it."""

    key: str
    msg_id: str
    version: str
    created_at: datetime
    updated_at: datetime
    value: dict[str, Any]

    def item(self, namespace: tuple[str, ...], score: float | None = None) -> SearchItem:
        return SearchItem(namespace, self.key, self.value, self.created_at, self.updated_at, score)


# Items of one namespace, each key's versions oldest first (the last is the item).
_Snapshot = dict[str, list[_Stored]]


@dataclass(frozen=True)
class _Layout:
    """The mapping between LangGraph namespaces and memstack users and sessions."""

    user_label: int
    marker: str

    def locate(self, namespace: tuple[str, ...]) -> tuple[str, str]:
        """The (user, session) that holds ``namespace``; InvalidNamespaceError if none."""
        if len(namespace) <= self.user_label:
            raise InvalidNamespaceError(
                f"namespace {namespace!r} has no label at position {self.user_label} "
                "to name the memstack user (MemstackStore(user_label=...))"
            )
        for label in namespace:
            try:
                validate_id("namespace label", label)
            except InvalidId as exc:
                raise InvalidNamespaceError(f"{exc} (in namespace {namespace!r})") from exc
        user = namespace[self.user_label]
        rest = namespace[: self.user_label] + namespace[self.user_label + 1 :]
        session = ".".join((self.marker, *rest))
        if len(session) > MAX_ID_LEN:
            raise InvalidNamespaceError(
                f"namespace {namespace!r} is too long: its labels other than the user's "
                f"must join into at most {MAX_ID_LEN - len(self.marker) - 1} characters"
            )
        return user, session

    def namespace_of(self, user: str, session: str) -> tuple[str, ...] | None:
        """The namespace a session holds, or None for a session that is no store's."""
        marker, *rest = session.split(".")
        if marker != self.marker or not all(rest) or len(rest) < self.user_label:
            return None
        return (*rest[: self.user_label], user, *rest[self.user_label :])

    def user_of(self, path: tuple[str, ...]) -> str | None:
        """The one user a namespace prefix names, or None when it covers all users."""
        if len(path) > self.user_label and path[self.user_label] != "*":
            return path[self.user_label]
        return None


def _parse(user: str, session: str, m: Message) -> _Stored | None:
    """The item version a message holds, or None for a message that is none."""
    prefix = f"{user}/{session}:"
    if not m.msg_id.startswith(prefix):
        return None
    found = _VERSIONED.match(m.msg_id[len(prefix) :])
    try:
        value = json.loads(m.content) if found else None
    except ValueError:
        return None
    if found is None or not isinstance(value, dict):
        return None
    return _Stored(
        key=found["key"],
        msg_id=m.msg_id,
        version=found["version"],
        created_at=datetime.fromtimestamp(int(found["created"]) / 1000, tz=UTC),
        updated_at=m.created_at,
        value=value,
    )


def _check_labels(op: Op) -> None:
    """LangGraph's label rules, for ops handed to ``batch`` directly: a label with "."
    would join into another namespace's session id."""
    if isinstance(op, GetOp | PutOp):
        paths = [op.namespace]
    elif isinstance(op, SearchOp):
        paths = [op.namespace_prefix]
    else:
        paths = [c.path for c in op.match_conditions or ()]
    for path in paths:
        for label in path:
            if not isinstance(label, str) or not label or "." in label or "\x00" in label:
                raise InvalidNamespaceError(
                    f"namespace label {label!r} in {tuple(path)!r} must be a non-empty string "
                    "without '.'"
                )


def _apply_operator(value: Any, op: str, operand: Any) -> bool:
    # LangGraph's InMemoryStore semantics (PostgreSQL's JSONB comparisons).
    if op in ("$eq", "$ne"):
        return bool(value == operand) == (op == "$eq")
    if op not in ("$gt", "$gte", "$lt", "$lte"):
        raise ValueError(f"unsupported filter operator {op!r}")
    a, b = (float("nan"), 0.0) if value is None else (float(value), float(operand))
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


def _matches(value: Any, wanted: Any) -> bool:
    """Whether a stored value meets a filter value, as InMemoryStore compares them."""
    if isinstance(wanted, dict):
        if any(str(k).startswith("$") for k in wanted):
            return all(_apply_operator(value, op, arg) for op, arg in wanted.items())
        return isinstance(value, dict) and all(_matches(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(wanted)
            and all(_matches(a, b) for a, b in zip(value, wanted, strict=True))
        )
    return bool(value == wanted)


def _passes(item: _Stored, filter_: Mapping[str, Any] | None) -> bool:
    return not filter_ or all(_matches(item.value.get(k), v) for k, v in filter_.items())


def _does_match(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = condition.path
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValueError(f"unsupported match type {condition.match_type!r}")
    return all(p == "*" or n == p for n, p in pairs)


@dataclass(frozen=True)
class _Write:
    """A validated put: where it goes and the JSON to store (None deletes)."""

    user: str
    session: str
    key: str
    content: str | None


class _Batch:
    """One batch of ops against one AsyncMemory; namespaces are read once per batch."""

    def __init__(self, mem: AsyncMemory, layout: _Layout, role: str, drain: bool) -> None:
        self.mem = mem
        self.layout = layout
        self.role = role
        self.drain = drain
        self._snapshots: dict[tuple[str, str], _Snapshot] = {}

    def check_put(self, op: PutOp) -> _Write:
        """Every check of a put, before any op of the batch writes."""
        if op.ttl is not None:
            raise NotImplementedError("MemstackStore does not support TTLs; pass ttl=None")
        if op.index is not None and op.index is not False and not isinstance(op.index, list):
            raise ValidationError(f"index must be None, False or a list of paths, got {op.index!r}")
        user, session = self.layout.locate(op.namespace)
        key = validate_id("key", op.key)
        if len(key) > MAX_KEY_LEN:
            raise InvalidId(f"key is {len(key)} characters long; the limit is {MAX_KEY_LEN}")
        if op.value is None:
            return _Write(user, session, key, None)
        if not isinstance(op.value, Mapping):
            raise ValidationError(f"value must be a dict, got {type(op.value).__name__}")
        try:
            content = json.dumps(dict(op.value), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"value of key {key!r} is not JSON: {exc}") from exc
        validate_message(self.role, content, max_bytes=self.mem.settings.max_message_bytes)
        return _Write(user, session, key, content)

    async def run(self, ops: list[Op]) -> list[Result]:
        writes: dict[tuple[str, str, str], _Write] = {}
        for op in ops:
            if not isinstance(op, GetOp | PutOp | SearchOp | ListNamespacesOp):
                raise ValidationError(f"unknown store operation {type(op).__name__}")
            _check_labels(op)
            if isinstance(op, PutOp):
                w = self.check_put(op)
                writes.pop((w.user, w.session, w.key), None)  # the last put of a key wins
                writes[(w.user, w.session, w.key)] = w
            elif isinstance(op, GetOp):
                self.layout.locate(op.namespace)
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(await self.get(op.namespace, op.key))
            elif isinstance(op, SearchOp):
                results.append(await self.search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(await self.list_namespaces(op))
            else:
                results.append(None)
        for w in writes.values():
            await self.write(w)
        if writes and self.drain:
            await self.mem.drain(summarize=False)
        return results

    async def snapshot(self, user: str, session: str) -> _Snapshot:
        """The namespace's items: the ledger's pages, then the window (not yet stored)."""
        cached = self._snapshots.get((user, session))
        if cached is not None:
            return cached
        messages: dict[str, Message] = {}
        offset = 0
        while True:
            page = await self.mem.messages(user, session, limit=_PAGE, offset=offset)
            messages.update((m.msg_id, m) for m in page)
            if len(page) < _PAGE:
                break
            offset += _PAGE
        window = await self.mem.window(user, session, self.mem.settings.window_max_messages)
        messages.update((m.msg_id, m) for m in window if m.msg_id not in messages)
        snap: _Snapshot = {}
        for m in messages.values():
            stored = _parse(user, session, m)
            if stored is not None:
                snap.setdefault(stored.key, []).append(stored)
        for versions in snap.values():
            versions.sort(key=lambda s: s.version)
        self._snapshots[(user, session)] = snap
        return snap

    async def get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        user, session = self.layout.locate(namespace)
        versions = (await self.snapshot(user, session)).get(key)
        if not versions:
            return None
        s = versions[-1]
        return Item(
            value=s.value,
            key=s.key,
            namespace=namespace,
            created_at=s.created_at,
            updated_at=s.updated_at,
        )

    async def users(self, user: str | None) -> list[str]:
        """``[user]`` if a prefix names one, else every user with stored messages."""
        if user is not None:
            return [user]
        found: list[str] = []
        offset = 0
        while True:
            page = await self.mem.users(limit=_PAGE, offset=offset)
            found.extend(u.user_id for u in page)
            if len(page) < _PAGE:
                return found
            offset += _PAGE

    async def namespaces(self, user: str) -> list[tuple[tuple[str, ...], str]]:
        """The user's store namespaces with stored items, and the session of each."""
        out: list[tuple[tuple[str, ...], str]] = []
        for overview in await self.mem.sessions(user):
            namespace = self.layout.namespace_of(user, overview.session_id)
            if namespace is not None:
                out.append((namespace, overview.session_id))
        return out

    async def search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        n = len(prefix)
        scored: list[tuple[float, SearchItem]] = []
        for user in await self.users(self.layout.user_of(prefix)):
            if op.query:
                scored.extend(await self._recall(user, prefix, op))
                continue
            for namespace, session in await self.namespaces(user):
                if namespace[:n] != prefix:
                    continue
                for versions in (await self.snapshot(user, session)).values():
                    s = versions[-1]
                    if _passes(s, op.filter):
                        scored.append((s.updated_at.timestamp(), s.item(namespace)))
        scored.sort(key=lambda pair: pair[0], reverse=True)
        return [item for _, item in scored[op.offset : op.offset + op.limit]]

    async def _recall(
        self, user: str, prefix: tuple[str, ...], op: SearchOp
    ) -> list[tuple[float, SearchItem]]:
        """memstack's hybrid recall over one user, kept to current items under the prefix."""
        assert op.query is not None
        out: dict[str, tuple[float, SearchItem]] = {}
        for hit in await self.mem.search(user, op.query, limit=SEARCH_POOL):
            namespace = self.layout.namespace_of(user, hit.session_id)
            found = _VERSIONED.match(hit.msg_id.partition(f"/{hit.session_id}:")[2])
            if namespace is None or namespace[: len(prefix)] != prefix or found is None:
                continue
            versions = (await self.snapshot(user, hit.session_id)).get(found["key"], [])
            # An older version that its put has not erased yet is no item.
            if versions and versions[-1].msg_id == hit.msg_id and _passes(versions[-1], op.filter):
                out.setdefault(hit.msg_id, (hit.score, versions[-1].item(namespace, hit.score)))
        return list(out.values())

    async def list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        named = {
            user
            for c in conditions
            if c.match_type == "prefix" and (user := self.layout.user_of(tuple(c.path)))
        }
        # Two prefixes naming different users match nothing; one names the only user.
        fixed = next(iter(named)) if len(named) == 1 else None
        if len(named) > 1:
            return []
        found: set[tuple[str, ...]] = set()
        for user in await self.users(fixed):
            for namespace, _session in await self.namespaces(user):
                if all(_does_match(c, namespace) for c in conditions):
                    depth = op.max_depth
                    found.add(namespace if depth is None else namespace[:depth])
        return sorted(found)[op.offset : op.offset + op.limit]

    async def write(self, w: _Write) -> None:
        """Write a new version (or none, to delete), then erase the older ones."""
        old = (await self.snapshot(w.user, w.session)).get(w.key, [])
        if w.content is not None:
            now = datetime.now(UTC)
            created = old[-1].created_at if old else now
            version = f"{time.time_ns():016x}{secrets.token_hex(2)}"
            msg_id = f"{w.key}@{int(created.timestamp() * 1000)}.{version}"
            await self.mem.remember(w.user, w.session, self.role, w.content, msg_id=msg_id, ts=now)
        for s in old:
            # NotFound: erased meanwhile by another writer, the outcome wanted.
            with contextlib.suppress(NotFound):
                await self.mem.delete_message(w.user, s.msg_id)


class MemstackStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are memstack memories (see the module doc):
    over a :class:`memstack.Memory` or an :class:`memstack.AsyncMemory`. ``user_label``:
    the namespace label naming the user; ``marker``: the start of the store's session ids;
    ``role``: of the messages items are kept as (``"assistant"``, as a ``"user"`` message
    is read for facts about the user); ``drain``: ingest in-process after each write."""

    supports_ttl = False

    def __init__(
        self,
        memory: Memory | AsyncMemory,
        *,
        user_label: int = 0,
        marker: str = "langgraph",
        role: str = "assistant",
        drain: bool = True,
    ) -> None:
        if not isinstance(memory, Memory | AsyncMemory):
            raise TypeError(f"memory must be a Memory or an AsyncMemory, got {memory!r}")
        if isinstance(user_label, bool) or not isinstance(user_label, int) or user_label < 0:
            raise ValidationError(f"user_label must be a whole number from 0, got {user_label!r}")
        if "." in validate_id("marker", marker):
            raise InvalidId(f"marker {marker!r} must not contain '.'")
        if role not in ROLES:
            raise ValidationError(f"role {role!r} is not one of {sorted(ROLES)}")
        self._memory = memory
        self._layout = _Layout(user_label=user_label, marker=marker)
        self._role = role
        self._drain = drain
        # The loop an AsyncMemory runs in: where sync calls from other threads go.
        self._loop = _running_loop() if isinstance(memory, AsyncMemory) else None

    def _execute(self, mem: AsyncMemory, ops: Iterable[Op]) -> Coroutine[Any, Any, list[Result]]:
        return _Batch(mem, self._layout, self._role, self._drain).run(list(ops))

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` and wait; results in the order of the ops."""
        ops = list(ops)
        if isinstance(self._memory, Memory):
            return self._memory._run(self._execute(self._memory.aio, ops))
        loop = self._loop
        if loop is None or loop.is_closed():
            raise RuntimeError(
                "MemstackStore over an AsyncMemory is used with await (abatch, aput, "
                "asearch, ...); for sync calls pass a memstack.Memory"
            )
        if _running_loop() is loop:
            raise RuntimeError(
                "a sync MemstackStore call on the event loop of its AsyncMemory would "
                "deadlock: use the async methods (aput, aget, asearch, ...)"
            )
        future = asyncio.run_coroutine_threadsafe(self._execute(self._memory, ops), loop)
        return future.result()

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in memstack's loop; results in the order of the ops."""
        ops = list(ops)
        if isinstance(self._memory, Memory):
            # A Memory's connections belong to its own loop thread: run there, await here.
            future = asyncio.run_coroutine_threadsafe(
                self._execute(self._memory.aio, ops), self._memory._loop
            )
            return await asyncio.wrap_future(future)
        self._loop = asyncio.get_running_loop()
        return await self._execute(self._memory, ops)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
