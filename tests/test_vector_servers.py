"""Semantic memory and the knowledge base both on one ``chroma run`` server, end to end.

Redis and PostgreSQL are the real services; the vector server is started by the test.
Nothing of the vectors may land under the home folder, and semantic memory keeps the
same split by user as embedded (``shard_of`` of the user over ``chroma_shards``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import chromadb
import pytest

from memstack.core.settings import Settings
from memstack.knowledge.documents import Document
from memstack.memory import AsyncMemory
from memstack.stores.vectors.chroma_shards import shard_name, shard_of
from tests.conftest import _cleanup, make_settings
from tests.test_vectorstores import start_chroma_server

SHARDS = 8
ROUTING = "Channel routing picks the cheapest acquiring bank that supports the card brand."
FACTS = {
    "dog": "My dog is called Biscuit and he loves the beach at Brighton.",
    "cat": "My cat is called Pepper and she sleeps on the radiator all winter.",
    "fish": "My goldfish is called Bubbles and lives in a round bowl on the desk.",
}


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = start_chroma_server(tmp_path_factory.mktemp("vector-server"))
    yield server.url
    server.stop()


@pytest.fixture
def settings(tmp_path: Path, redis_url: str, pg_url: str, server_url: str) -> Settings:
    return make_settings(
        tmp_path,
        redis_url=redis_url,
        database_url=pg_url,
        auto_migrate=False,
        vector_store="chroma",
        vector_url=server_url,
        kb_store="chroma",
        kb_url=server_url,
        chroma_shards=SHARDS,
    )


@pytest.fixture
async def mem(settings: Settings) -> AsyncIterator[AsyncMemory]:
    m = await AsyncMemory.open(settings)
    yield m
    await _cleanup(m)
    await m.close()


def server_client(url: str) -> Any:
    parts = urlsplit(url)
    return chromadb.HttpClient(host=parts.hostname or "127.0.0.1", port=parts.port or 8000)


def users_in_distinct_shards() -> dict[str, str]:
    """Three users (one per pet) whose ids hash to three different shards."""
    users: dict[str, str] = {}
    taken: set[int] = set()
    for i in range(1000):
        user = f"user{i}"
        if shard_of(user, SHARDS) not in taken:
            taken.add(shard_of(user, SHARDS))
            users[list(FACTS)[len(users)]] = user
            if len(users) == len(FACTS):
                return users
    raise AssertionError("no three users in distinct shards")


async def test_memory_and_knowledge_base_on_one_chroma_server(
    mem: AsyncMemory, settings: Settings, server_url: str
) -> None:
    users = users_in_distinct_shards()
    for pet, user in users.items():
        await mem.remember(user, "s1", "user", FACTS[pet])
        await mem.remember(user, "s1", "assistant", "Noted, thank you for telling me.")
    report = await mem.drain()
    assert report.processed >= 2 * len(users) and not report.failed

    # A new session: the window is empty, so the history comes from the stores.
    for pet, user in users.items():
        result = await mem.context(user, "s2", f"what is my {pet} called?")
        assert "semantic" not in result.degraded
        assert FACTS[pet] in result.text
        others = [text for other, text in FACTS.items() if other != pet]
        assert not any(text in result.text for text in others)

    # Semantic memory is split by user on the server exactly as embedded splits it.
    client = server_client(server_url)
    root = f"{settings.key_prefix}_memory"
    names = {c.name for c in client.list_collections()}
    # Shards are made on first write: one per user here, three distinct ones.
    mine = {n for n in names if n.startswith(f"{root}.")}
    assert mine == {shard_name(root, shard_of(u, SHARDS), SHARDS) for u in users.values()}
    assert len(mine) == len(users)
    for user in users.values():
        shard = client.get_collection(shard_name(root, shard_of(user, SHARDS), SHARDS))
        owners = {m["user_id"] for m in shard.get(include=["metadatas"])["metadatas"]}
        assert owners == {user}

    # The knowledge base: its own single collection on the same server.
    [added] = await mem.kb_add(Document(ROUTING, doc_id="routing"))
    assert (added.doc_id, added.status) == ("routing", "added")
    [hit] = await mem.kb_search(ROUTING, top_k=3)
    assert hit.doc_id == "routing" and hit.text == ROUTING
    assert f"{settings.key_prefix}_kb" in {c.name for c in client.list_collections()}
    kb = client.get_collection(f"{settings.key_prefix}_kb")
    assert kb.count() == 1
    result = await mem.context(users["dog"], "s3", ROUTING)
    assert "knowledge" not in result.degraded
    assert len(result.kept("knowledge")) == 1 and ROUTING in result.text

    # Nothing of the vectors under the home folder: no embedded store was opened.
    written = [p for p in settings.home.rglob("*")] if settings.home.exists() else []
    assert not [p for p in written if "chroma" in p.name or "qdrant" in p.name], written
