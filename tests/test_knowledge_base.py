"""The knowledge base: add, replace, remove, list and search on Qdrant local and Chroma
embedded, with the registry on SQLite and PostgreSQL; namespaces; the ``memstack kb`` CLI.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker
from typer.testing import CliRunner

from memstack import db
from memstack.cli import app
from memstack.embedders import HashingEmbedder
from memstack.errors import InvalidId, NotFound, StoreUnavailable, ValidationError
from memstack.knowledge_base import Document, KnowledgeBase, slug_id
from memstack.settings import Settings
from memstack.vectorstores.factory import build_kb_store
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


@pytest.fixture(params=["qdrant", "chroma"])
async def kb(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[KB]:
    settings = make_settings(tmp_path, kb_store=request.param)
    async for made in _open(settings):
        yield made


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

    hits = await kb.kb.search(SETTLEMENT, top_k=2)
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
    hits = await kb.kb.search(long_text[:200], top_k=5)
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
    assert [h.text for h in await kb.kb.search(ROUTING, top_k=5)] == [SETTLEMENT]
    assert [h.text for h in await other.search(SETTLEMENT, top_k=5)] == [ROUTING]
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


class FailingEmbedder(HashingEmbedder):
    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.fail = False

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.fail:
            raise StoreUnavailable("embeddings endpoint down")
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
