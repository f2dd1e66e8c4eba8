"""Which embedder a deployment's vectors belong to: a new deployment takes the default,
one written by another embedder keeps it until the documented re-embed, and an explicit
other embedder is refused with the command that fixes it. Real models; the embedded home,
and the re-embed also on Qdrant (local) and a ``chroma run`` server beside the real
Redis and PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import delete

from memstack import AsyncMemory, Document, Settings
from memstack.core.errors import SchemaMismatch
from memstack.core.settings import SCORE_CUTS
from memstack.ml.embedders import MINILM_VERSION
from memstack.ops.doctor import run_checks
from memstack.stores.sql.models import VectorSpaceRow
from tests.conftest import make_settings, new_id
from tests.test_vectorstores import start_chroma_server

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
SAID = ["我上个月把家里的猫送去做了绝育。", "我最近在学大提琴，每周六上课。"]


def _home(tmp_path: Path, embedder: str) -> Settings:
    # One home, one key prefix: each open below is the same deployment.
    return make_settings(tmp_path, embedder=embedder, key_prefix="vs")


Deployment = Callable[[str], Settings]


@pytest.fixture(scope="module")
def chroma_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = start_chroma_server(tmp_path_factory.mktemp("vector-space-chroma"))
    yield server.url
    server.stop()


@pytest.fixture(params=["embedded", "qdrant", "chroma-server"])
def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Deployment:
    """One deployment (its own key prefix) opened with the embedder asked for."""
    prefix = f"vs{uuid.uuid4().hex[:8]}"
    if request.param == "embedded":
        extra: dict[str, object] = {}
    elif request.param == "qdrant":
        extra = {"vector_store": "qdrant", "kb_store": "qdrant"}
    else:
        url = request.getfixturevalue("chroma_url")
        extra = {
            "redis_url": request.getfixturevalue("redis_url"),
            "database_url": request.getfixturevalue("pg_url"),
            "auto_migrate": False,
            "vector_store": "chroma",
            "vector_url": url,
            "kb_store": "chroma",
            "kb_url": url,
        }

    def settings(embedder: str) -> Settings:
        return make_settings(tmp_path, embedder=embedder, key_prefix=prefix, **extra)

    return settings


async def _first_hit(mem: AsyncMemory, user: str, question: str) -> str:
    [vector] = await mem.embedder.embed_queries([question])
    store = await mem.memory_vectors()
    hits = await store.search(vector, scope={"user_id": user}, top_k=1)
    return hits[0].text


async def _fill(settings: Settings) -> str:
    user, session = new_id("u"), new_id("s")
    async with await AsyncMemory.open(settings) as mem:
        for i, text in enumerate(SAID):
            await mem.remember(user, session, "user", text, ts=T0.replace(minute=i))
        await mem.drain()
    return user


async def test_a_new_deployment_takes_e5_and_keeps_it(tmp_path: Path) -> None:
    async with await AsyncMemory.open(_home(tmp_path, "auto")) as mem:
        kc, kb = SCORE_CUTS["e5-small"]
        assert (mem.settings.embedder, mem.settings.kc_threshold, mem.settings.kb_min_score) == (
            "e5-small",
            kc,
            kb,
        )
    async with await AsyncMemory.open(_home(tmp_path, "auto")) as again:
        assert again.embedder.model_version == "multilingual-e5-small-q4"


async def test_a_minilm_home_is_refused_then_works_after_the_reembed(
    deployment: Deployment,
) -> None:
    user = await _fill(deployment("minilm"))
    async with await AsyncMemory.open(deployment("auto")) as kept:
        assert kept.settings.embedder == "minilm"  # left on the default: its own embedder
        assert SAID[0] in await _first_hit(kept, user, SAID[0])
    async with await AsyncMemory.open(deployment("e5-small")) as switched:
        with pytest.raises(SchemaMismatch, match="memstack reindex"):
            await _first_hit(switched, user, "她的宠物动了什么手术？")
        report = await switched.reindex()
        assert report.messages >= len(SAID)  # a shared test database: the whole ledger
    async with await AsyncMemory.open(deployment("auto")) as mem:
        assert mem.settings.embedder == "e5-small"
        assert "绝育" in await _first_hit(mem, user, "她的宠物动了什么手术？")
        assert "大提琴" in await _first_hit(mem, user, "Which instrument is she learning?")


async def test_a_home_from_before_the_record_stays_on_minilm(tmp_path: Path) -> None:
    await _fill(_home(tmp_path, "minilm"))
    async with (
        await AsyncMemory.open(_home(tmp_path, "minilm")) as mem,
        mem.db_sessions() as s,
        s.begin(),
    ):
        await s.execute(delete(VectorSpaceRow))  # as a database migrated from 0009
    async with await AsyncMemory.open(_home(tmp_path, "auto")) as mem:
        assert mem.settings.embedder == "minilm"


async def test_doctor_reads_a_minilm_home_on_auto_as_minilm(tmp_path: Path) -> None:
    await _fill(_home(tmp_path, "minilm"))
    checks = await run_checks(_home(tmp_path, "auto"))
    [memory] = [c for c in checks if c.store == "vectors"]
    assert memory.ok and MINILM_VERSION in memory.detail, memory


class _Stopped(Exception):
    pass


async def test_an_interrupted_reembed_opens_on_e5_and_finishes_when_run_again(
    tmp_path: Path,
) -> None:
    user = await _fill(_home(tmp_path, "minilm"))

    def stop(done: int, total: int) -> None:
        raise _Stopped

    async with await AsyncMemory.open(_home(tmp_path, "e5-small")) as switching:
        with pytest.raises(_Stopped):
            await switching.reindex(progress=stop)
    async with await AsyncMemory.open(_home(tmp_path, "auto")) as mem:
        assert mem.settings.embedder == "e5-small"
        report = await mem.reindex()
        assert report.messages == len(SAID)
        assert "大提琴" in await _first_hit(mem, user, "她在练哪种乐器？")


async def test_the_knowledge_base_moves_to_e5_with_the_reembed(deployment: Deployment) -> None:
    """Its chunks are re-embedded as stored (the files are gone), in every namespace."""
    async with await AsyncMemory.open(deployment("minilm")) as mem:
        await mem.kb_add(Document("退货政策：收到商品七天内可以无理由退款。", doc_id="returns"))
        await mem.kb_add(Document("门店周一至周五早九点营业。", doc_id="hours"), namespace="shop")
    async with await AsyncMemory.open(deployment("e5-small")) as switching:
        report = await switching.reindex()
        assert report.documents == 2
    async with await AsyncMemory.open(deployment("auto")) as mem:
        [hit] = await mem.kb_search("东西不想要了，多久之内能把钱拿回来？", top_k=1)
        assert hit.doc_id == "returns"
        [doc] = await mem.kb_list(namespace="shop")
        assert doc.model_version == mem.embedder.model_version and doc.chunk_count == 1
        [shop] = await mem.kb_search("几点开门？", top_k=1, namespace="shop")
        assert shop.doc_id == "hours"
