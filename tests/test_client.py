"""memstack.client against a live ``memstack serve`` (a subprocess on the real Redis and
PostgreSQL, and one on the embedded default): every method, sync and async, answers
what the library answers, with the library's types and exceptions. The parity tests hold
the clients to Memory's methods, so a new one fails here until it gets a twin or a
reason in LIBRARY_ONLY."""

from __future__ import annotations

import dataclasses
import inspect
import io
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pydantic
import pytest

from memstack import (
    AddReport,
    AddResult,
    Allocation,
    AsyncMemory,
    Conflict,
    ContextResult,
    Document,
    ExportReport,
    Forbidden,
    HomeInUse,
    ImportReport,
    IngestStatus,
    InvalidContent,
    InvalidId,
    KBDocument,
    KBHit,
    ManifestItem,
    Memory,
    MemstackError,
    Message,
    NotFound,
    Rewrite,
    SearchHit,
    Section,
    SessionOverview,
    SessionState,
    StoredCandidate,
    StoredFact,
    StoreStatus,
    StoreUnavailable,
    StreamLag,
    Unauthorized,
    UserIdentity,
    UserOverview,
    ValidationError,
    WorkerBeat,
    WorkerReport,
)
from memstack.client import CLIENT_ONLY, LIBRARY_ONLY, AsyncMemoryClient, MemoryClient
from memstack.core.settings import Settings
from memstack.server.http import create_app
from tests.conftest import make_settings, new_id

MEMSTACK = Path(sys.executable).parent / "memstack"
TOKEN = secrets.token_hex(16)
CST = timezone(timedelta(hours=8))

# --- parity ------------------------------------------------------------------------------------


def _methods(cls: type) -> dict[str, Any]:
    return {
        name: member
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


def _parameters(func: Any) -> list[tuple[str, object, object]]:
    sig = inspect.signature(func)
    return [(p.name, p.kind, p.default) for p in sig.parameters.values() if p.name != "self"]


def _returns(func: Any) -> object:
    # Only the return annotation is evaluated: a parameter's may name a type its module
    # imports for type checking only.
    annotation = inspect.signature(func).return_annotation
    return eval(annotation, func.__globals__) if isinstance(annotation, str) else annotation


def test_every_memory_method_has_a_client_twin_or_a_reason() -> None:
    library, client = _methods(Memory), _methods(MemoryClient)
    assert set(library) - set(client) - LIBRARY_ONLY == set()
    assert set(client) - set(library) - CLIENT_ONLY == set()
    # A stale entry would hide a new twin, or a method that is gone.
    assert set(library) >= LIBRARY_ONLY and not LIBRARY_ONLY & set(client)
    assert not CLIENT_ONLY & set(library)


def test_twins_take_the_same_arguments_and_answer_the_same_type() -> None:
    library, client = _methods(Memory), _methods(MemoryClient)
    for name in set(library) & set(client):
        assert _parameters(client[name]) == _parameters(library[name]), name
        assert _returns(client[name]) == _returns(library[name]), name


def test_the_async_client_answers_as_async_memory_does() -> None:
    # MemoryClient is generated from AsyncMemoryClient (scripts/gen_sync.py), so this
    # holds the async client to the library the way the test above holds the sync one.
    aio, library = _methods(AsyncMemoryClient), _methods(AsyncMemory)
    for name in aio:
        twin = library[name]
        assert _parameters(aio[name]) == _parameters(twin), name
        # As AsyncMemory has it: a coroutine, or (export_lines) an async generator.
        assert inspect.iscoroutinefunction(aio[name]) == inspect.iscoroutinefunction(twin), name
        assert _returns(aio[name]) == _returns(twin), name


def test_every_field_of_a_rebuilt_type_travels_but_the_documented_ones() -> None:
    """A field added to a result type but not to its wire model would reach a client as
    its default, silently: it must travel, or be named here (and in the client's
    docstring)."""
    from memstack.server import manage_schemas, schemas
    from memstack.server.http import status_routes, transfer_routes

    untravelled = {
        StoredFact: {"withheld"},
        # created_at travels as ts; user and session are the call's.
        Message: {"accepted_at", "created_at", "user_id", "session_id"},
    }
    pairs: list[tuple[type, type[pydantic.BaseModel]]] = [
        (StoredFact, schemas.FactOut),
        (KBDocument, schemas.KBDocumentOut),
        (KBHit, schemas.KBHitOut),
        (AddResult, schemas.KBAddResultOut),
        (SessionOverview, schemas.SessionOut),
        (UserOverview, schemas.UserOut),
        (WorkerReport, schemas.DrainOut),
        (SessionState, schemas.StateOut),
        (Allocation, schemas.AllocationOut),
        (Rewrite, schemas.RewriteOut),
        (ManifestItem, schemas.ManifestItemOut),
        (ContextResult, schemas.ContextOut),
        (StoreStatus, schemas.StoreHealth),
        (Message, schemas.MessageOut),
        (SearchHit, manage_schemas.SearchHitOut),
        (StoredCandidate, manage_schemas.CandidateOut),
        (UserIdentity, manage_schemas.IdentityOut),
        (ImportReport, transfer_routes.ImportOut),
        (IngestStatus, status_routes.StatusOut),
        (WorkerBeat, status_routes.WorkerOut),
        (StreamLag, status_routes.StreamOut),
    ]
    for cls, wire in pairs:
        fields = {f.name for f in dataclasses.fields(cls)}
        assert fields - set(wire.model_fields) == untravelled.get(cls, set()), cls


# One call of each client method that takes a route of the API.
ROUTE_CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("remember", ("u", "s", "user", "hi"), {}),
    ("remember_many", ("u", "s", [{"role": "user", "content": "hi", "msg_id": "1"}]), {}),
    ("window", ("u", "s"), {}),
    ("messages", ("u", "s"), {}),
    ("get_state", ("u", "s"), {}),
    ("set_state", ("u", "s", {"step": 1}), {}),
    ("context", ("u", "s", "q"), {}),
    ("get_tool_result", ("u", "ref"), {}),
    ("facts", ("u",), {}),
    ("fact_history", ("u",), {}),
    ("users", (), {}),
    ("sessions", ("u",), {}),
    ("forget_user", ("u",), {}),
    ("kb_search", ("q",), {}),
    ("kb_list", (), {}),
    ("kb_add", ("text",), {}),
    ("kb_remove", ("d",), {}),
    ("drain", (), {}),
    ("health", (), {}),
    ("status", (), {}),
    ("get_message", ("u", "u/s:1"), {}),
    ("delete_message", ("u", "u/s:1"), {}),
    ("search", ("u", "q"), {}),
    ("set_fact", ("u", "city", "Porto"), {}),
    ("delete_fact", ("u", "city"), {}),
    ("forget_session", ("u", "s"), {}),
    ("candidates", ("u",), {}),
    ("confirm_candidate", ("u", 1), {}),
    ("reject_candidate", ("u", 1), {}),
    ("identity", ("u",), {}),
    ("set_identity", ("u",), {}),
    ("export", (io.StringIO(),), {"user_id": "u"}),
    ("export", (io.StringIO(),), {}),
    ("import_file", (b"{}",), {}),
]


def _template(path: str) -> re.Pattern[str]:
    # A stored message id may hold a "/"; every other parameter is one segment.
    parts = re.split(r"\{(\w+)\}", path)
    return re.compile(
        "".join(
            re.escape(part) if i % 2 == 0 else (".+" if part == "msg_id" else "[^/]+")
            for i, part in enumerate(parts)
        )
    )


def test_every_route_of_the_api_is_taken_by_a_client_method(tmp_path: Path) -> None:
    """A route added to the API fails this until a client method takes it."""
    document = create_app(make_settings(tmp_path)).openapi()
    routes = {(m.upper(), path) for path, ops in document["paths"].items() for m in ops}
    sent: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append((request.method, request.url.path))
        return httpx.Response(404, json={"error": "NotFound", "detail": "recorded"})

    with MemoryClient("http://memstack", transport=httpx.MockTransport(handler)) as c:
        for name, args, kwargs in ROUTE_CALLS:
            with pytest.raises(NotFound):
                getattr(c, name)(*args, **kwargs)
    taken = {
        (method, path)
        for method, path in routes
        if any(m == method and _template(path).fullmatch(p) for m, p in sent)
    }
    assert routes - taken == set()


# --- the calls of either client, made alike ------------------------------------------------------


async def do(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a method of either client: the async one's coroutine is awaited."""
    out = method(*args, **kwargs)
    return await out if inspect.isawaitable(out) else out


@asynccontextmanager
async def client_of(kind: str, url: str, **options: Any) -> AsyncIterator[Any]:
    if kind == "sync":
        with MemoryClient(url, **options) as c:
            yield c
    else:
        async with AsyncMemoryClient(url, **options) as ac:
            yield ac


# --- errors, without a server ---------------------------------------------------------------


def _mock(handler: Callable[[httpx.Request], httpx.Response], kind: str) -> Any:
    if kind == "sync":
        return MemoryClient("http://memstack", transport=httpx.MockTransport(handler))
    return AsyncMemoryClient("http://memstack", transport=httpx.MockTransport(handler))


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize(
    ("status", "body", "raised", "says"),
    [
        (403, {"error": "Forbidden", "detail": "not yours"}, Forbidden, "not yours"),
        (500, {"error": "HomeInUse", "detail": "held"}, HomeInUse, "held"),
        (422, {"error": "InvalidId", "detail": "bad id"}, InvalidId, "bad id"),
        (413, {"error": "PayloadTooLarge", "detail": "too big"}, ValidationError, "413"),
        (418, {"error": "Teapot", "detail": "short and stout"}, MemstackError, "Teapot"),
        (502, "<html>Bad Gateway</html>", StoreUnavailable, "Bad Gateway"),
        (401, "", Unauthorized, "401"),
    ],
)
async def test_an_error_is_the_class_it_names_else_the_class_of_its_status(
    kind: str, status: int, body: Any, raised: type[Exception], says: str
) -> None:
    def handler(_: httpx.Request) -> httpx.Response:
        if isinstance(body, dict):
            return httpx.Response(status, json=body)
        return httpx.Response(status, text=body)

    c = _mock(handler, kind)
    with pytest.raises(raised, match=says) as caught:
        await do(c.sessions, "alice")
    assert type(caught.value) is raised


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_no_answer_is_store_unavailable_naming_the_server(kind: str) -> None:
    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("read timed out", request=request)

    with pytest.raises(StoreUnavailable, match=r"memstack server at http://memstack.*in time"):
        await do(_mock(timeout, kind).users)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once it is closed
    async with client_of(kind, f"http://127.0.0.1:{port}") as c:
        with pytest.raises(StoreUnavailable, match=rf"127\.0\.0\.1:{port}.*could not be reached"):
            await do(c.users)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_body_that_is_not_the_api_is_a_clear_error(kind: str) -> None:
    c = _mock(lambda _: httpx.Response(200, text="<html>welcome</html>"), kind)
    with pytest.raises(MemstackError, match="is the URL a memstack server"):
        await do(c.users)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_ids_are_checked_and_encoded_before_sending(kind: str) -> None:
    seen: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path)
        return httpx.Response(200, json={"messages": []})

    c = _mock(handler, kind)
    assert await do(c.window, "a@b:c", "..", 3) == []
    assert seen == [b"/v1/users/a%40b%3Ac/sessions/%2E%2E/messages?n=3"]
    for user in ("a/b", "", "x" * 129, "a b"):
        with pytest.raises(InvalidId):
            await do(c.window, user, "s1")
    with pytest.raises(ValidationError, match="timezone-aware"):
        await do(c.facts, "alice", as_of=datetime(2025, 1, 1))
    with pytest.raises(ValidationError, match="neither now nor summarize"):
        await do(c.drain, summarize=False)
    with pytest.raises(ValidationError, match="reads no files"):
        await do(c.kb_add, Path("README.md"))
    with pytest.raises(ValidationError, match="must be a mapping"):
        await do(c.set_state, "alice", "s1", ["step", 1])
    with pytest.raises(ValidationError, match="not JSON"):
        await do(c.set_state, "alice", "s1", {"when": datetime.now(UTC)})
    with pytest.raises(ValidationError, match="namespace 'nope'"):
        await do(c.context, "alice", "s1", "q", namespaces=["nope"])
    with pytest.raises(ValidationError, match="list"):
        await do(c.context, "alice", "s1", "q", namespaces="langgraph")
    assert len(seen) == 1  # none of the refused calls was sent


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_namespaces_travel_only_when_asked(kind: str) -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(404, json={"error": "NotFound", "detail": "recorded"})

    c = _mock(handler, kind)
    for namespaces in ((), ["llama_index", "langgraph"]):
        with pytest.raises(NotFound):
            await do(c.context, "alice", "s1", "q", namespaces=namespaces)
    # None asked is left out, so a server that predates namespaces still answers.
    assert [b.get("namespaces") for b in bodies] == [None, ["langgraph", "llama_index"]]


def test_constructor_refuses_a_blank_key_and_a_bad_timeout() -> None:
    with pytest.raises(ValidationError, match="api_key"):
        MemoryClient("http://memstack", api_key=" ")
    with pytest.raises(ValidationError, match="timeout_s"):
        AsyncMemoryClient("http://memstack", timeout_s=0)


# --- a live server -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    url: str
    settings: Settings  # the stores it serves, for reading them with the library


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(workdir: Path, env: dict[str, str]) -> Iterator[str]:
    """``memstack serve`` with ``env`` (and no other MEMSTACK_* variable) in ``workdir``
    (no .env there); its URL once /healthz answers; stopped by its PID afterwards."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTACK_")}
    log_path = workdir / "serve.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(MEMSTACK), "serve", "--port", str(port)],
            cwd=workdir,
            # The shared Redis keeps nothing on disk, which serve refuses otherwise.
            env={**clean, "MEMSTACK_ALLOW_UNSAFE": "1", **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"memstack serve exited: {log_path.read_text()[-3000:]}")
                try:
                    if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"memstack serve did not start: {log_path.read_text()[-3000:]}")
                time.sleep(0.2)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, pg_url: str
) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("client")
    settings = make_settings(
        root / "library", redis_url=redis_url, database_url=pg_url, auto_migrate=False
    )
    env = {
        "MEMSTACK_REDIS_URL": redis_url,
        "MEMSTACK_DATABASE_URL": pg_url,
        "MEMSTACK_KEY_PREFIX": settings.key_prefix,
        "MEMSTACK_EMBEDDER": "hashing",
        "MEMSTACK_AUTO_MIGRATE": "false",
        "MEMSTACK_HOME": str(root / "server" / "home"),
        "MEMSTACK_API_TOKEN": TOKEN,
    }
    with serve(root / "server", env) as url:
        yield Server(url, settings)
    import redis

    r = redis.Redis.from_url(redis_url)
    keys = list(r.scan_iter(match=f"{settings.key_prefix}:*", count=1000))
    if keys:
        r.delete(*keys)


@pytest.fixture(params=["sync", "async"])
async def client(request: pytest.FixtureRequest, server: Server) -> AsyncIterator[Any]:
    if request.param == "sync":
        with MemoryClient(server.url, api_key=TOKEN) as c:
            yield c
    else:
        async with AsyncMemoryClient(server.url, api_key=TOKEN) as c:
            yield c


@pytest.fixture
async def library(server: Server) -> AsyncIterator[AsyncMemory]:
    """The same stores read in-process (Redis and SQL only: the server holds the home)."""
    mem = await AsyncMemory.open(server.settings)
    yield mem
    await mem.close()


def kind_of(client: Any) -> str:
    return "sync" if isinstance(client, MemoryClient) else "async"


def unaccepted(messages: list[Message]) -> list[Message]:
    # accepted_at does not travel.
    return [replace(m, accepted_at=None) for m in messages]


@pytest.mark.services
@pytest.mark.slow
async def test_working_memory_through_the_client(client: Any, library: AsyncMemory) -> None:
    user, session = new_id("u"), new_id("s")
    said = datetime(2025, 3, 1, 10, 0, tzinfo=CST)
    first = await do(
        client.remember, user, session, "user", "hello", msg_id="m1", ts=said, name="Tim"
    )
    assert first == f"{user}/{session}:m1"
    # A retry with its msg_id changes nothing; with another message it is a Conflict.
    assert (
        await do(client.remember, user, session, "user", "hello", msg_id="m1", ts=said, name="Tim")
        == first
    )
    with pytest.raises(Conflict, match="msg_id"):
        await do(client.remember, user, session, "user", "bye", msg_id="m1")
    second = await do(
        client.remember, user, session, "assistant", "hi Tim", ts=said.timestamp() + 5
    )

    window = await do(client.window, user, session)
    assert unaccepted(window) == unaccepted(await library.window(user, session))
    assert [(m.msg_id, m.name, m.created_at) for m in window] == [
        (first, "Tim", said),
        (second, None, said + timedelta(seconds=5)),
    ]
    assert window[0].created_at.utcoffset() is not None
    assert [m.msg_id for m in await do(client.window, user, session, 1)] == [second]

    big = "x" * (library.settings.large_value_bytes + 1)
    assert await do(client.set_state, user, session, {"step": 2, "big": big, "none": None}) is None
    state = await do(client.get_state, user, session)
    assert isinstance(state, SessionState) and state == await library.get_state(user, session)
    assert state.fields["step"] == 2 and "none" not in state.fields  # None deletes a field
    assert (state.turns, state.last_msg_id) == (1, second)  # turns: the user's
    ref = state.fields["big"]["$ref"]
    assert await do(client.get_tool_result, user, ref) == big

    with pytest.raises(NotFound):
        await do(client.get_tool_result, user, "no-such-ref")
    with pytest.raises(InvalidContent, match="role"):
        await do(client.remember, user, session, "robot", "beep")
    with pytest.raises(ValidationError, match=r"query\.n"):
        await do(client.window, user, session, 0)
    with pytest.raises(ValidationError, match="out of range"):
        await do(client.remember, user, session, "user", "later", ts=time.time() + 10 * 86400)
    assert len(await library.window(user, session)) == 2  # nothing refused was written


@pytest.mark.services
@pytest.mark.slow
async def test_facts_ledger_context_and_erasure_through_the_client(
    client: Any, library: AsyncMemory
) -> None:
    user, session = new_id("u"), new_id("s")
    await do(client.remember, user, session, "user", "我预算不超过五千")
    await do(client.remember, user, session, "assistant", "好的，五千以内。")
    await do(client.remember, user, session, "user", "预算改成8000吧")
    report = await do(client.drain)
    assert isinstance(report, WorkerReport) and report.processed >= 3 and report.failed == 0

    facts = await do(client.facts, user)
    assert facts and all(isinstance(f, StoredFact) for f in facts)
    assert facts == await library.facts(user)
    budget = {f.key: f for f in facts}["budget_limit"]
    assert budget.value == {"amount": 8000, "currency": "CNY"} and budget.current
    assert budget.valid_from.utcoffset() is not None
    # as_of travels as RFC 3339 with its offset ('+' encoded in the query).
    assert await do(client.facts, user, as_of=datetime.now(CST)) == facts
    assert await do(client.facts, user, as_of=datetime(2000, 1, 1, tzinfo=CST)) == []
    history = await do(client.fact_history, user, "budget_limit")
    assert history == await library.fact_history(user, "budget_limit")
    assert [h.value["amount"] for h in history] == [5000, 8000]
    assert await do(client.fact_history, user) == await library.fact_history(user)
    with pytest.raises(InvalidId, match="key"):
        await do(client.fact_history, user, "no spaces")

    ledger = await do(client.messages, user, session)
    assert unaccepted(ledger) == unaccepted(await library.messages(user, session))
    assert len(ledger) == 3 and ledger[0].user_id == user and ledger[0].session_id == session
    page = await do(client.messages, user, session, limit=1, offset=1)
    assert [m.msg_id for m in page] == [ledger[1].msg_id]
    assert await do(client.sessions, user) == await library.sessions(user)
    listed = {u.user_id: u for u in await do(client.users, limit=1000)}
    assert listed[user] == {u.user_id: u for u in await library.users(limit=1000)}[user]
    with pytest.raises(ValidationError, match="limit"):
        await do(client.users, limit=0)

    result = await do(
        client.context, user, new_id("s"), "我预算多少？", budget_tokens=2000, locale="zh"
    )
    assert isinstance(result, ContextResult) and "8000" in result.text
    facts_section = result.sections["facts"]
    assert isinstance(facts_section, Section) and any("8000" in x for x in facts_section.lines)
    assert "五千" not in facts_section.text
    assert all(isinstance(m, ManifestItem) for m in result.manifest) and result.kept("facts")
    assert isinstance(result.allocation, Allocation) and result.allocation.total == 2000
    assert isinstance(result.rewrite, Rewrite) and result.rewrite.original == "我预算多少？"
    assert result.messages[-1] == {"role": "user", "content": "我预算多少？"}
    assert result.degraded == {} and result.tokens > 0 and result.timings_ms

    deleted = await do(client.forget_user, user)
    assert deleted["messages"] == 3 and deleted["facts"] >= 2
    assert await do(client.facts, user) == [] and await do(client.sessions, user) == []


@pytest.mark.services
@pytest.mark.slow
async def test_knowledge_base_through_the_client(client: Any) -> None:
    namespace = new_id("ns")
    steps: list[tuple[int, int, AddResult]] = []
    text = "Settlement runs at 23:00 every business day; late files wait for the next run."
    doc = Document(text=text, doc_id="settle", title="Settlement", source="wiki/settlement")
    added = await do(
        client.kb_add,
        doc,
        "The office is closed on public holidays.",
        namespace=namespace,
        progress=lambda done, total, result: steps.append((done, total, result)),
    )
    assert isinstance(added, AddReport) and added.skipped == []
    assert (added[0].doc_id, added[0].title, added[0].source, added[0].status) == (
        "settle",
        "Settlement",
        "wiki/settlement",
        "added",
    )
    assert [(d, t) for d, t, _ in steps] == [(1, 2), (2, 2)] and steps[1][2] == added[1]
    again = await do(client.kb_add, doc, namespace=namespace)
    assert [r.status for r in again] == ["unchanged"]

    documents = await do(client.kb_list, namespace=namespace)
    assert all(isinstance(d, KBDocument) for d in documents) and len(documents) == 2
    settle = {d.doc_id: d for d in documents}["settle"]
    assert len(settle.content_hash) == 32 and settle.created_at.utcoffset() is not None
    hits = await do(
        client.kb_search, "Settlement runs at 23:00 every business day", 1, namespace=namespace
    )
    assert [type(h) for h in hits] == [KBHit] and hits[0].doc_id == "settle"

    removed = await do(client.kb_remove, "settle", namespace=namespace)
    assert isinstance(removed, KBDocument) and removed == settle
    assert [d.doc_id for d in await do(client.kb_list, namespace=namespace)] != ["settle"]
    with pytest.raises(NotFound):
        await do(client.kb_remove, "settle", namespace=namespace)
    with pytest.raises(ValidationError, match="documents"):
        await do(client.kb_add, namespace=namespace)
    with pytest.raises(InvalidId, match="namespace"):
        await do(client.kb_list, namespace="no spaces")


@pytest.mark.services
@pytest.mark.slow
async def test_health_and_keys_through_the_client(client: Any, server: Server) -> None:
    health = await do(client.health)
    assert health and all(isinstance(s, StoreStatus) and s.ok for s in health.values())
    assert {"redis", "database"} <= set(health)

    for key in (None, "not-the-token-at-all"):
        async with client_of(kind_of(client), server.url, api_key=key) as c:
            with pytest.raises(Unauthorized, match="bearer"):
                await do(c.sessions, "alice")
            # /healthz is open to a client without a key.
            assert all(s.ok for s in (await do(c.health)).values())


@pytest.mark.services
@pytest.mark.slow
async def test_ingest_status_through_the_client(
    client: Any, server: Server, library: AsyncMemory
) -> None:
    from memstack.stores.redis import workers

    # A worker's heartbeat, as a running `memstack worker` writes it.
    await workers.beat(library.working.redis, library.working.keys, "w-client", ttl_s=30)
    try:
        await do(client.remember, new_id("u"), new_id("s"), "user", "waiting for a worker")
        status = await do(client.status)
        assert isinstance(status, IngestStatus) and status.pending >= 1
        [beat] = [w for w in status.workers if w.worker_id == "w-client"]
        assert isinstance(beat, WorkerBeat) and 0 <= beat.age_s < 30
        mine = await library.status()
        assert [(w.worker_id, w.host, w.pid) for w in status.workers] == [
            (w.worker_id, w.host, w.pid) for w in mine.workers
        ]
        assert [s.stream for s in status.streams] == [s.stream for s in mine.streams]
        assert all(isinstance(s, StreamLag) for s in status.streams)
        await do(client.drain)
        assert (await do(client.status)).pending == 0
    finally:
        await library.working.redis.delete(library.working.keys.worker("w-client"))
    _, key = await library.create_key(new_id("u"))
    async with client_of(kind_of(client), server.url, api_key=key) as c:
        with pytest.raises(Forbidden):  # it names hosts and process ids: admin only
            await do(c.status)


@pytest.mark.services
@pytest.mark.slow
async def test_integration_namespaces_through_the_client(client: Any, library: AsyncMemory) -> None:
    pytest.importorskip("langgraph.store.base")
    from memstack.integrations.langgraph import MemstackStore

    user, other, question = new_id("u"), new_id("u"), "which tea do I prefer, oolong?"
    # Written here, ingested by the server's drain (its vectors, its home).
    store = MemstackStore(library, drain=False)
    await store.aput((user, "prefs"), "tea", {"text": "prefers oolong tea brewed twice"})
    await do(client.remember, user, "chat", "user", "Good morning, what should I drink?")
    await do(client.remember, other, "chat", "user", "I like tea")
    await do(client.drain)

    assert "brewed twice" not in (await do(client.context, user, "chat", question)).text
    asked = await do(client.context, user, "chat", question, namespaces=["langgraph"])
    assert "prefers oolong tea brewed twice" in asked.text and '{"text"' not in asked.text
    theirs = await do(client.context, other, "chat", question, namespaces=["langgraph"])
    assert "brewed twice" not in theirs.text


@pytest.mark.services
@pytest.mark.slow
async def test_a_user_key_reaches_only_its_user(server: Server, library: AsyncMemory) -> None:
    user, other = new_id("u"), new_id("u")
    _, key = await library.create_key(user)
    async with AsyncMemoryClient(server.url, api_key=key) as mine:
        await mine.remember(user, "s1", "user", "hello")
        assert [m.content for m in await mine.window(user, "s1")] == ["hello"]
        with pytest.raises(Forbidden):
            await mine.window(other, "s1")
        with pytest.raises(Forbidden):
            await mine.users()
        with pytest.raises(Forbidden, match="kb:write"):
            await mine.kb_add("a document", namespace=new_id("ns"))


@pytest.mark.services
@pytest.mark.slow
def test_odd_but_valid_ids_reach_their_session(server: Server) -> None:
    user, session = f"{new_id('u')}@example.com:1", ".."
    with MemoryClient(server.url, api_key=TOKEN) as c:
        msg_id = c.remember(user, session, "user", "dots")
        assert [m.msg_id for m in c.window(user, session)] == [msg_id]
        assert c.window(user, ".") == []


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second deployment: ``memstack serve`` on the embedded default, without a key."""
    root = tmp_path_factory.mktemp("embedded")
    env = {"MEMSTACK_HOME": str(root / "home"), "MEMSTACK_EMBEDDER": "hashing"}
    with serve(root, env) as url:
        yield url


@pytest.mark.slow
async def test_the_embedded_default_through_the_client(embedded: str) -> None:
    async with AsyncMemoryClient(embedded) as mem:
        user = new_id("u")
        await mem.remember(user, "s1", "user", "我预算不超过五千")
        assert (await mem.drain()).processed == 1
        assert "budget_limit" in [f.key for f in await mem.facts(user)]
        result = await mem.context(user, "s2", "我预算多少？")
        assert "5000" in result.text or "五千" in result.text
        assert all(s.ok for s in (await mem.health()).values())


@pytest.mark.services
@pytest.mark.slow
async def test_reading_and_correcting_memory_through_the_client(
    client: Any, library: AsyncMemory
) -> None:
    user, s1, s2 = new_id("u"), new_id("s"), new_id("s")
    ids = [
        await do(client.remember, user, s1, "user", "I live in Berlin."),
        await do(client.remember, user, s1, "assistant", "Nice."),
        await do(client.remember, user, s2, "user", "I am vegetarian."),
    ]
    await do(client.drain)

    got = await do(client.get_message, user, ids[0])  # a generated id holds a "/"
    assert "/" in ids[0] and (got.session_id, got.content) == (s1, "I live in Berlin.")
    assert unaccepted([got]) == unaccepted([await library.get_message(user, ids[0])])
    with pytest.raises(NotFound):
        await do(client.get_message, new_id("u"), ids[0])
    with pytest.raises(InvalidId):
        await do(client.get_message, user, "a/b/c")

    hits = await do(client.search, user, "where do I live Berlin", limit=2)
    assert hits and all(isinstance(h, SearchHit) for h in hits) and len(hits) <= 2
    assert hits[0].msg_id in ids and hits[0].created_at.utcoffset() is not None
    future = datetime.now(UTC) + timedelta(days=365)
    assert await do(client.search, user, "Berlin", since=future) == []
    with pytest.raises(ValidationError, match="limit"):
        await do(client.search, user, "Berlin", limit=0)

    city = await do(client.set_fact, user, "city", "Porto")
    assert isinstance(city, StoredFact) and (city.value, city.current) == ("Porto", True)
    assert {f.key: f for f in await library.facts(user)}["city"] == city
    budget = await do(client.set_fact, user, "budget", "8000元")
    assert (budget.key, budget.value) == ("budget_limit", {"amount": 8000, "currency": "CNY"})
    with pytest.raises(ValidationError, match="null"):
        await do(client.set_fact, user, "city", None)
    with pytest.raises(ValidationError, match="history"):
        await do(client.set_fact, user, "history", "x")
    ended = await do(client.delete_fact, user, "city")
    assert ended.id == city.id and ended.valid_until is not None and not ended.current
    with pytest.raises(NotFound):
        await do(client.delete_fact, user, "city")

    assert (await do(client.delete_message, user, ids[1]))["messages"] == 1
    with pytest.raises(NotFound):
        await do(client.get_message, user, ids[1])
    assert (await do(client.forget_session, user, s2))["messages"] == 1
    assert [s.session_id for s in await do(client.sessions, user)] == [s1]


async def lines_of(lines: Any) -> list[str]:
    if hasattr(lines, "__aiter__"):
        return [line async for line in lines]
    return list(lines)


@pytest.mark.services
@pytest.mark.slow
async def test_export_from_one_server_and_import_into_another(
    client: Any, server: Server, embedded: str, tmp_path: Path
) -> None:
    user, session = new_id("u"), new_id("s")
    await do(client.remember, user, session, "user", "I ride a bike to work.")
    await do(client.remember, user, session, "assistant", "Good for you.")
    await do(client.drain)

    with pytest.raises(InvalidId):  # checked at once, before a line is taken
        client.export_lines("bad id")
    lines = await lines_of(client.export_lines(user))
    assert all(line.endswith("\n") for line in lines)
    records = [json.loads(line) for line in lines]
    assert records[0]["type"] == "header" and records[0]["users"] == [user]
    assert records[-1] == {"type": "end", "records": len(records) - 2}
    assert [r["type"] for r in records].count("message") == 2

    steps: list[tuple[str, int, int]] = []
    path = tmp_path / "export.jsonl"
    report = await do(client.export, path, user_id=user, progress=lambda *step: steps.append(step))
    assert isinstance(report, ExportReport) and report.users == [user]
    assert report.records == dict(Counter(r["type"] for r in records[1:-1]))
    assert path.read_text().splitlines()[1:] == [line.rstrip("\n") for line in lines[1:]]
    assert steps == [("exporting", 1, 1)] and not (tmp_path / ".export.jsonl.partial").exists()
    text = io.StringIO()
    await do(client.export, text, user_id=user)
    assert text.getvalue().splitlines()[1:] == path.read_text().splitlines()[1:]

    async with client_of(kind_of(client), embedded) as there:
        imported = await do(there.import_file, path)
        assert isinstance(imported, ImportReport) and imported.users == [user]
        assert imported.written["message"] == 2
        again = await do(there.import_file, path.read_bytes())
        assert again.written["message"] == 0
        moved = await do(there.messages, user, session)
        assert [m.content for m in moved] == ["I ride a bike to work.", "Good for you."]
        with pytest.raises(ValidationError, match="line 1"):
            await do(there.import_file, b"\xff\xfe")
