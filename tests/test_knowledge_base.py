"""The knowledge base: add, replace, remove, list and search on qdrant-edge, Qdrant local
and Chroma embedded, with the registry on SQLite and PostgreSQL; namespaces; the
``memstack kb`` CLI.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import async_sessionmaker
from typer.testing import CliRunner

from memstack import Memory
from memstack.cli import app
from memstack.core.errors import (
    InvalidContent,
    InvalidId,
    NotFound,
    StoreUnavailable,
    ValidationError,
)
from memstack.core.settings import Settings
from memstack.knowledge import base as kb_module
from memstack.knowledge.base import AddReport, Document, KnowledgeBase, slug_id
from memstack.memory import AsyncMemory
from memstack.ml.embedders import HashingEmbedder
from memstack.stores.sql import db
from memstack.stores.vectors.qdrant import QdrantStore
from memstack.stores.vectors.qdrant_edge import QdrantEdgeStore
from memstack.wiring import build_kb_store
from tests.conftest import make_settings

SETTLEMENT = (
    "清结算术语：清算是对交易数据的汇总与核对，结算是资金在各参与方之间的实际划转。"
    "T+1 结算指交易次日完成资金划转。"
)
COMPLIANCE = "合规要求：支付机构必须完成反洗钱报告，保留交易记录五年以上，并按月报送监管数据。"
ROUTING = "Channel routing picks the cheapest acquiring bank that supports the card brand."


class KB:
    """A knowledge base on real stores, plus what a test needs to look underneath."""

    def __init__(self, kb: KnowledgeBase, store: Any, settings: Settings) -> None:
        self.kb = kb
        self.store = store
        self.settings = settings

    def other(self, namespace: str) -> KnowledgeBase:
        return KnowledgeBase(
            settings=self.settings,
            sessions=self.kb.sessions,
            store=self.store,
            embedder=self.kb.embedder,
            namespace=namespace,
        )


@pytest.fixture(params=["qdrant", "qdrant-local", "chroma"])
async def kb(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[KB]:
    """qdrant: a new home's embedded default (qdrant-edge); qdrant-local: a home whose
    knowledge base qdrant-client's local mode already holds, which keeps it."""
    kind = "qdrant" if request.param == "qdrant-local" else request.param
    settings = make_settings(tmp_path, kb_store=kind)
    if request.param == "qdrant-local":
        await _old_local_kb(settings)
    async for made in _open(settings):
        expected = QdrantStore if request.param == "qdrant-local" else QdrantEdgeStore
        assert kind == "chroma" or isinstance(made.store, expected)
        yield made


async def _old_local_kb(settings: Settings) -> None:
    """The empty knowledge-base collection a home had from before qdrant-edge."""
    embedder = HashingEmbedder(settings.embed_dim)
    store = await QdrantStore.open(
        f"{settings.key_prefix}_kb",
        model_version=embedder.model_version,
        dim=settings.embed_dim,
        path=settings.home.resolve() / "qdrant",
    )
    await store.close()


async def _open(settings: Settings) -> AsyncIterator[KB]:
    engine = db.create_engine(settings)
    await db.prepare(engine, settings)
    embedder = HashingEmbedder(settings.embed_dim)
    store = await build_kb_store(settings, embedder)
    kb = KnowledgeBase(
        settings=settings,
        sessions=async_sessionmaker(engine, expire_on_commit=False),
        store=store,
        embedder=embedder,
    )
    try:
        yield KB(kb, store, settings)
    finally:
        await store.close()
        await engine.dispose()


async def test_add_list_search(kb: KB) -> None:
    results = await kb.kb.add(
        [
            Document(SETTLEMENT, doc_id="settlement", title="清结算", source="wiki/settlement"),
            Document(COMPLIANCE, doc_id="compliance"),
        ]
    )
    assert [(r.doc_id, r.status, r.chunk_count) for r in results] == [
        ("settlement", "added", 1),
        ("compliance", "added", 1),
    ]
    docs = {d.doc_id: d for d in await kb.kb.documents()}
    assert sorted(docs) == ["compliance", "settlement"]
    doc = docs["settlement"]
    assert (doc.title, doc.source, doc.chunk_count) == ("清结算", "wiki/settlement", 1)
    assert doc.model_version == kb.kb.embedder.model_version
    assert len(doc.content_hash) == 32
    # A string without a title is titled by its first line; its source is "api".
    assert docs["compliance"].title == COMPLIANCE[:80]
    assert docs["compliance"].source == "api"

    hits = await kb.kb.search(SETTLEMENT, top_k=2, min_score=-1)
    assert hits[0].id == "default:settlement#0"
    assert (hits[0].doc_id, hits[0].title, hits[0].chunk_idx) == ("settlement", "清结算", 0)
    assert hits[0].text == SETTLEMENT
    assert hits[0].score == pytest.approx(1.0, abs=1e-3)
    assert hits[1].score < hits[0].score


async def test_unchanged_readd_is_a_noop(kb: KB) -> None:
    [first] = await kb.kb.add([Document(SETTLEMENT, doc_id="s")])
    before = await kb.kb.get("s")
    [again] = await kb.kb.add([Document(SETTLEMENT, doc_id="s")])
    assert again.status == "unchanged"
    assert (await kb.kb.get("s")).updated_at == before.updated_at
    assert first.status == "added"


async def test_changed_document_replaces_its_chunks(kb: KB) -> None:
    long_text = "\n\n".join(
        f"第{i}节：结算批次{i}在日终对账后生成，差错交易进入人工复核队列并在次日重新清算。"
        + "这一段说明批次处理的细节与例外情况。" * 3
        for i in range(6)
    )
    [added] = await kb.kb.add([Document(long_text, doc_id="manual")])
    assert added.chunk_count > 2
    assert await kb.store.count() == added.chunk_count

    [replaced] = await kb.kb.add([Document(COMPLIANCE, doc_id="manual", title="v2")])
    assert (replaced.status, replaced.chunk_count) == ("replaced", 1)
    # The surplus chunk ids of the longer version are gone, not just unlisted.
    assert await kb.store.count() == 1
    hits = await kb.kb.search(long_text[:200], top_k=5, min_score=-1)
    assert [h.text for h in hits] == [COMPLIANCE]
    doc = await kb.kb.get("manual")
    assert (doc.title, doc.chunk_count) == ("v2", 1)
    assert doc.updated_at >= doc.created_at


async def test_remove_deletes_chunks_and_row(kb: KB) -> None:
    await kb.kb.add([Document(SETTLEMENT, doc_id="s"), Document(COMPLIANCE, doc_id="c")])
    removed = await kb.kb.remove("s")
    assert removed.doc_id == "s"
    assert [d.doc_id for d in await kb.kb.documents()] == ["c"]
    assert await kb.store.count() == 1
    assert all(h.doc_id == "c" for h in await kb.kb.search(SETTLEMENT, top_k=5))
    with pytest.raises(NotFound):
        await kb.kb.remove("s")
    with pytest.raises(NotFound):
        await kb.kb.get("s")


async def test_namespaces_are_isolated(kb: KB) -> None:
    other = kb.other("tenant-b")
    await kb.kb.add([Document(SETTLEMENT, doc_id="same")])
    await other.add([Document(ROUTING, doc_id="same")])
    assert [h.text for h in await kb.kb.search(ROUTING, top_k=5, min_score=-1)] == [SETTLEMENT]
    assert [h.text for h in await other.search(SETTLEMENT, top_k=5, min_score=-1)] == [ROUTING]
    assert [d.namespace for d in await other.documents()] == ["tenant-b"]
    await kb.kb.remove("same")
    assert [h.text for h in await other.search(ROUTING, top_k=5)] == [ROUTING]
    assert await kb.kb.documents() == []


async def test_files_and_folders(kb: KB, tmp_path: Path) -> None:
    root = tmp_path / "docs"
    (root / "guides").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "settlement.md").write_text("# 清结算手册\n\n" + SETTLEMENT, encoding="utf-8")
    (root / "guides" / "routing.txt").write_text(ROUTING, encoding="utf-8")
    (root / "合规.md").write_text(COMPLIANCE, encoding="utf-8")
    (root / ".git" / "notes.md").write_text("hidden", encoding="utf-8")
    (root / "scan.pdf").write_bytes(b"%PDF-1.4")

    results = await kb.kb.add([root])
    ids = sorted(r.doc_id for r in results)
    cjk_id = slug_id("合规")
    assert ids == sorted(["settlement", "guides.routing", cjk_id])
    assert cjk_id.startswith("doc-") and cjk_id != slug_id("清结算")
    docs = {d.doc_id: d for d in await kb.kb.documents()}
    assert docs["settlement"].title == "清结算手册"
    assert docs["guides.routing"].title == "routing"
    assert docs["settlement"].source == str((root / "settlement.md").resolve())
    # A Markdown file without a heading is titled by its file name.
    assert docs[cjk_id].title == "合规"


async def test_bad_input_changes_nothing(kb: KB, tmp_path: Path) -> None:
    good = tmp_path / "good.md"
    good.write_text(SETTLEMENT, encoding="utf-8")
    bad_bytes = tmp_path / "latin1.txt"
    bad_bytes.write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "empty").mkdir()
    cases: list[tuple[Sequence[Any], str]] = [
        ([good, tmp_path / "missing.md"], "no such file"),
        ([good, bad_bytes], "not UTF-8"),
        ([good, tmp_path / "empty"], "no .markdown"),
        ([good, "   "], "empty"),
        ([Document(SETTLEMENT, doc_id="x"), Document(COMPLIANCE, doc_id="x")], "two documents"),
        ([Path(__file__)], "unsupported file type .py"),
        ([], "nothing to add"),
        ([42], "cannot add a int"),
    ]
    for sources, message in cases:
        with pytest.raises(ValidationError, match=message):
            await kb.kb.add(sources)
    with pytest.raises(InvalidId):
        await kb.kb.add([Document(SETTLEMENT, doc_id="has#hash")])
    with pytest.raises(ValidationError):
        await kb.kb.search("  ")
    with pytest.raises(ValidationError):
        await kb.kb.search("x", top_k=0)
    assert await kb.kb.documents() == []
    assert await kb.store.count() == 0


async def test_refused_documents_write_nothing(kb: KB) -> None:
    """A document is checked before anything is written: a NUL in a title used to reach
    PostgreSQL (a 503 quoting the whole INSERT), a lone surrogate a 500."""
    limit = kb.settings.max_document_bytes
    good = Document(SETTLEMENT, doc_id="good")
    oversized = "汉" * (limit // 3 + 1)  # three UTF-8 bytes each
    cases: list[tuple[Any, str]] = [
        (Document(COMPLIANCE, doc_id="t", title="a\x00b"), "title of document 't' contains a NUL"),
        (Document(COMPLIANCE, doc_id="t", title="a\ud800b"), "title of document 't' is not valid"),
        (Document("a\x00b", doc_id="t"), "text of document 't' contains a NUL"),
        (Document("a\udfffb", doc_id="t"), "text of document 't' is not valid Unicode"),
        ("text\ud800", "text of document is not valid Unicode"),
        (Document(COMPLIANCE, doc_id="t", source="s\x00"), "source of document 't' contains"),
        (Document(COMPLIANCE, doc_id="t", source="s" * 5000), "source of document 't' is 5000"),
        (
            Document(oversized, doc_id="t"),
            f"text of document 't' is {len(oversized.encode())} bytes; the limit is {limit}",
        ),
        (Document(" \n\t ", doc_id="t"), "document 't' is empty"),
        (Document("", doc_id="t"), "document 't' is empty"),
        (Document(COMPLIANCE, doc_id="t", title=42), "title of document 't' must be a string"),  # type: ignore[arg-type]
        (Document(None, doc_id="t"), "text of document 't' must be a string"),  # type: ignore[arg-type]
    ]
    for bad, message in cases:
        with pytest.raises(InvalidContent, match=re.escape(message)):
            await kb.kb.add([good, bad])
        if isinstance(bad, Document):  # one by one, too
            with pytest.raises(InvalidContent, match=re.escape(message)):
                await kb.kb.add_document(bad)
    for query in ("a\x00b", "a\ud800b", "q" * (kb.settings.max_message_bytes + 1)):
        with pytest.raises(InvalidContent):
            await kb.kb.search(query)
    assert await kb.kb.documents() == []
    assert await kb.store.count() == 0


async def test_home_with_an_old_local_knowledge_base_keeps_its_documents(tmp_path: Path) -> None:
    """Upgrading to qdrant-edge as the embedded default loses nothing: a home whose
    knowledge base is in qdrant-client's local mode goes on reading it there."""
    settings = make_settings(tmp_path)
    await _old_local_kb(settings)
    async with await AsyncMemory.open(settings) as mem:
        # What an older memstack wrote into that collection.
        await mem.kb_add(Document(SETTLEMENT, doc_id="settlement"))
    async with await AsyncMemory.open(settings) as mem:
        hits = await mem.kb_search(SETTLEMENT)
        assert [h.doc_id for h in hits][:1] == ["settlement"]
        assert [d.doc_id for d in await mem.kb_list()] == ["settlement"]
    assert (settings.home / "qdrant" / "collection" / f"{settings.key_prefix}_kb").is_dir()
    assert not (settings.home / "qdrant-edge").exists()
    # Moving it over, as the README says: qdrant-edge by name, then remove and add.
    moved = settings.model_copy(update={"kb_store": "qdrant-edge"})
    async with await AsyncMemory.open(moved) as mem:
        assert await mem.kb_search(SETTLEMENT) == []
        await mem.kb_remove("settlement")
        await mem.kb_add(Document(SETTLEMENT, doc_id="settlement"))
        assert [h.doc_id for h in await mem.kb_search(SETTLEMENT)][:1] == ["settlement"]
    # A new home next to it gets qdrant-edge.
    fresh = make_settings(tmp_path / "new")
    async with await AsyncMemory.open(fresh) as mem:
        await mem.kb_add(Document(SETTLEMENT, doc_id="settlement"))
        assert [h.doc_id for h in await mem.kb_search(SETTLEMENT)][:1] == ["settlement"]
    assert (fresh.home / "qdrant-edge" / f"{fresh.key_prefix}_kb" / "memstack.json").is_file()
    assert not (fresh.home / "qdrant").exists()


async def test_registry_errors_name_no_sql(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    engine = db.create_engine(settings)  # never migrated: there is no registry table
    embedder = HashingEmbedder(settings.embed_dim)
    store = await build_kb_store(settings, embedder)
    kb = KnowledgeBase(
        settings=settings,
        sessions=async_sessionmaker(engine, expire_on_commit=False),
        store=store,
        embedder=embedder,
    )
    try:
        with pytest.raises(StoreUnavailable) as caught:
            await kb.add([Document(SETTLEMENT, doc_id="secret-doc", title="secret title")])
        assert str(caught.value) == "database (knowledge-base registry): OperationalError"
    finally:
        await store.close()
        await engine.dispose()


async def test_a_folder_adds_what_it_can_and_names_the_rest(kb: KB, tmp_path: Path) -> None:
    limit = kb.settings.max_document_bytes
    root = tmp_path / "docs"
    root.mkdir()
    (root / "settlement.md").write_text(SETTLEMENT, encoding="utf-8")
    (root / "empty.md").write_text("", encoding="utf-8")
    (root / "blank.txt").write_text(" \n\n ", encoding="utf-8")
    (root / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff")
    (root / "nul.md").write_bytes(b"abc\x00def")
    (root / "big.md").write_text("x" * (limit + 1), encoding="utf-8")
    (root / "scan.pdf").write_bytes(b"%PDF-1.4")
    (root / ".draft.md").write_text("", encoding="utf-8")  # hidden: not even listed

    report = await kb.kb.add([root])
    assert isinstance(report, AddReport)
    assert [(r.doc_id, r.status) for r in report] == [("settlement", "added")]
    reasons = {Path(s.path).name: s.reason for s in report.skipped}
    assert sorted(reasons) == ["big.md", "blank.txt", "empty.md", "image.txt", "nul.md", "scan.pdf"]
    assert reasons["empty.md"] == reasons["blank.txt"] == "empty"
    assert "not UTF-8" in reasons["image.txt"] and "NUL" in reasons["nul.md"]
    assert f"{limit + 1} bytes; the limit is {limit}" in reasons["big.md"]
    assert "(.pdf)" in reasons["scan.pdf"]
    assert [d.doc_id for d in await kb.kb.documents()] == ["settlement"]

    # Named one by one, an unusable file refuses the whole call: nothing is written.
    routing = tmp_path / "routing.txt"
    routing.write_text(ROUTING, encoding="utf-8")
    for name, message in [("empty.md", "empty"), ("big.md", "the limit is"), ("nul.md", "NUL")]:
        with pytest.raises(InvalidContent, match=message):
            await kb.kb.add([routing, root / name])
    # A folder of which nothing is usable adds nothing, and says why.
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "a.md").write_text("", encoding="utf-8")
    (junk / "b.txt").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValidationError, match=r"nothing to add: every file was skipped .*a\.md"):
        await kb.kb.add([routing, junk][1:])
    assert [d.doc_id for d in await kb.kb.documents()] == ["settlement"]
    assert await kb.store.count() == 1


async def test_search_leaves_out_noise(kb: KB) -> None:
    await kb.kb.add(
        [
            Document(SETTLEMENT, doc_id="s"),
            Document(COMPLIANCE, doc_id="c"),
            Document(ROUTING, doc_id="r"),
        ]
    )
    every = await kb.kb.search(ROUTING, top_k=5, min_score=-1)
    assert len(every) == 3 and min(h.score for h in every) < kb.settings.kb_min_score
    assert [h.doc_id for h in await kb.kb.search(ROUTING, top_k=5)] == ["r"]
    assert await kb.kb.search(ROUTING, min_score=1.01) == []


# --- the knowledge base in context() --------------------------------------------------------


def test_context_uses_a_knowledge_base_added_by_another_process(tmp_path: Path) -> None:
    """`memstack kb add docs/` in one process, context() in the next: the knowledge
    section is there without anything opening the knowledge base first."""
    settings = make_settings(tmp_path, store_timeout_s=60.0)
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "routing.txt").write_text(ROUTING, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTACK_")}
    env |= {
        "MEMSTACK_HOME": str(settings.home),
        "MEMSTACK_KEY_PREFIX": settings.key_prefix,
        "MEMSTACK_EMBEDDER": "hashing",
    }
    added = subprocess.run(
        [sys.executable, "-m", "memstack", "kb", "add", str(folder)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert added.returncode == 0, added.stdout + added.stderr
    with Memory(settings) as mem:  # this process has never opened the knowledge base
        result = mem.context("u1", "s1", ROUTING)
    assert "knowledge" not in result.degraded
    assert len(result.kept("knowledge")) == 1
    assert ROUTING in result.text


async def test_context_looks_the_registry_up_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(tmp_path)
    async with await AsyncMemory.open(settings) as mem:
        lookups: list[str] = []

        def seen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            if statement.startswith("SELECT") and "memory_kb_document" in statement:
                lookups.append(statement)

        event.listen(mem.engine.sync_engine, "before_cursor_execute", seen)
        for _ in range(3):
            result = await mem.context("u1", "s1", "what does T+1 settlement mean?")
            assert result.kept("knowledge") == []
        assert len(lookups) == 1
        assert not mem.stores.kb_opened  # no knowledge base: nothing opened, nothing searched

        # Another process registers a document: seen once the answer is old.
        async with mem.db_sessions.begin() as s:
            await s.execute(
                text(
                    "INSERT INTO memory_kb_document VALUES "
                    "(:c, 'default', 'd', 't', 'api', 'h', 1, 'm', :now, :now)"
                ),
                {"c": kb_module.registry_collection(settings), "now": "2026-01-01 00:00:00"},
            )
        await mem.context("u1", "s1", "what does T+1 settlement mean?")
        assert len(lookups) == 1 and not mem.stores.kb_opened
        monkeypatch.setattr(kb_module, "PRESENCE_TTL_S", 0.0)
        await mem.context("u1", "s1", "what does T+1 settlement mean?")
        assert len(lookups) == 2
        assert mem.stores.kb_opened  # searched


class FailingEmbedder(HashingEmbedder):
    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.fail = False

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.fail:
            raise StoreUnavailable("embeddings endpoint down", layer="embedder")
        return await super().embed(texts)


async def test_failed_embedding_keeps_the_old_version(kb: KB) -> None:
    embedder = FailingEmbedder(kb.settings.embed_dim)
    kb2 = KnowledgeBase(
        settings=kb.settings, sessions=kb.kb.sessions, store=kb.store, embedder=embedder
    )
    await kb2.add([Document(SETTLEMENT, doc_id="s")])
    embedder.fail = True
    with pytest.raises(StoreUnavailable):
        await kb2.add([Document(COMPLIANCE, doc_id="s")])
    embedder.fail = False
    assert [h.text for h in await kb2.search(SETTLEMENT, top_k=3)] == [SETTLEMENT]
    assert (await kb2.get("s")).content_hash == (await kb.kb.get("s")).content_hash


async def test_registry_on_postgres(tmp_path: Path, pg_url: str) -> None:
    """Two deployments (key prefixes) on one database keep separate registries."""
    first = make_settings(tmp_path / "a", database_url=pg_url, auto_migrate=False)
    second = make_settings(tmp_path / "b", database_url=pg_url, auto_migrate=False)
    async for a in _open(first):
        async for b in _open(second):
            await a.kb.add([Document(SETTLEMENT, doc_id="s")])
            await b.kb.add([Document(SETTLEMENT, doc_id="s")])
            [doc] = await a.kb.documents()
            assert (doc.doc_id, doc.chunk_count) == ("s", 1)
            assert doc.created_at.tzinfo is not None
            # Not "unchanged": b's store never had these chunks.
            assert (await b.kb.search(SETTLEMENT, top_k=1))[0].doc_id == "s"
            await a.kb.remove("s")
            assert await a.kb.documents() == []
            assert [d.doc_id for d in await b.kb.documents()] == ["s"]
            await b.kb.remove("s")


# --- CLI ----------------------------------------------------------------------------------

runner = CliRunner()


def test_cli_kb_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MEMSTACK_EMBEDDER", "hashing")
    monkeypatch.setenv("COLUMNS", "200")
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "settlement.md").write_text("# 清结算手册\n\n" + SETTLEMENT, encoding="utf-8")
    (folder / "routing.txt").write_text(ROUTING, encoding="utf-8")

    added = runner.invoke(app, ["kb", "add", str(folder)])
    assert added.exit_code == 0, added.output
    assert "2 added" in added.output

    again = runner.invoke(app, ["kb", "add", str(folder)])
    assert again.exit_code == 0, again.output
    assert "2 unchanged" in again.output

    listed = runner.invoke(app, ["kb", "list"])
    assert listed.exit_code == 0, listed.output
    assert "settlement" in listed.output and "routing" in listed.output
    assert "清结算手册" in listed.output

    found = runner.invoke(app, ["kb", "search", "cheapest acquiring bank", "--top-k", "1"])
    assert found.exit_code == 0, found.output
    assert "routing" in found.output and "settlement" not in found.output

    removed = runner.invoke(app, ["kb", "remove", "routing"])
    assert removed.exit_code == 0, removed.output
    listed = runner.invoke(app, ["kb", "list"])
    assert "routing" not in listed.output and "settlement" in listed.output

    missing = runner.invoke(app, ["kb", "remove", "routing"])
    assert missing.exit_code == 1
    assert "no document 'routing'" in missing.output

    bad = runner.invoke(app, ["kb", "add", str(tmp_path / "nope.md")])
    assert bad.exit_code == 1
    assert "no such file" in bad.output


def _cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTACK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MEMSTACK_EMBEDDER", "hashing")
    monkeypatch.setenv("COLUMNS", "200")


def test_cli_kb_add_skips_what_it_cannot_add(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cli_env(tmp_path, monkeypatch)
    monkeypatch.setenv("MEMSTACK_MAX_DOCUMENT_BYTES", "1000")
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "settlement.md").write_text("# 清结算手册\n\n" + SETTLEMENT, encoding="utf-8")
    (folder / "empty.md").write_text("", encoding="utf-8")
    (folder / "blob.txt").write_bytes(b"\xff\xfe\x00\x01")
    (folder / "big.txt").write_text("x" * 1001, encoding="utf-8")
    (folder / "scan.pdf").write_bytes(b"%PDF-1.4")
    # Text that looks like rich markup is printed as it is.
    notes = "# Notes [/draft]\n\nSee [the guide](https://example.com) [bold]."
    (folder / "notes.md").write_text(notes, encoding="utf-8")

    added = runner.invoke(app, ["kb", "add", str(folder)])
    assert added.exit_code == 0, added.output
    assert "2 added, 4 skipped" in added.output
    assert "Notes [/draft]" in added.output
    found = runner.invoke(app, ["kb", "search", notes])
    assert found.exit_code == 0, found.output
    assert "[the guide](https://example.com) [bold]" in found.output
    assert "skipped 4 files:" in added.output
    lines = added.output.splitlines()
    for name, reason in [
        ("empty.md", ": empty"),
        ("blob.txt", "not UTF-8"),
        ("big.txt", "1001 bytes; the limit is 1000 (MEMSTACK_MAX_DOCUMENT_BYTES)"),
        ("scan.pdf", "not a text or Markdown file (.pdf)"),
    ]:
        assert any(str(folder / name) in line and reason in line for line in lines), name
    listed = runner.invoke(app, ["kb", "list"])
    assert "settlement" in listed.output and "empty" not in listed.output

    # Nothing addable: exit 1, and the reasons.
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "a.md").write_text("  \n", encoding="utf-8")
    nothing = runner.invoke(app, ["kb", "add", str(junk)])
    assert nothing.exit_code == 1, nothing.output
    assert "nothing to add: every file was skipped" in nothing.output and "a.md" in nothing.output
    # A file named by itself must be usable.
    named = runner.invoke(app, ["kb", "add", str(folder / "empty.md")])
    assert named.exit_code == 1 and "empty" in named.output


def test_cli_kb_search_shows_no_noise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _cli_env(tmp_path, monkeypatch)
    empty = runner.invoke(app, ["kb", "search", "settlement"])
    assert empty.exit_code == 0, empty.output
    assert "no hits: knowledge base 'default' is empty" in empty.output

    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "settlement.md").write_text("# 清结算手册\n\n" + SETTLEMENT, encoding="utf-8")
    (folder / "compliance.md").write_text(COMPLIANCE, encoding="utf-8")
    (folder / "routing.txt").write_text(ROUTING, encoding="utf-8")
    assert runner.invoke(app, ["kb", "add", str(folder)]).exit_code == 0

    found = runner.invoke(app, ["kb", "search", ROUTING])
    assert found.exit_code == 0, found.output
    assert "1 hit" in found.output and "routing" in found.output
    assert "settlement" not in found.output and "compliance" not in found.output

    noise = runner.invoke(app, ["kb", "search", "zebra crossing at midnight"])
    assert noise.exit_code == 0, noise.output
    assert "no hits: no chunk of knowledge base 'default' (3 documents)" in noise.output
    assert "scores at least 0.5 (kb_min_score); --all shows" in noise.output
    assert not re.search(r"-\d\.\d{3}", noise.output)  # no (negative) scores listed

    every = runner.invoke(app, ["kb", "search", "zebra crossing at midnight", "--all"])
    assert every.exit_code == 0, every.output
    assert "3 hits" in every.output
    assert all(d in every.output for d in ("settlement", "compliance", "routing"))
