"""A Chinese question that names the user in the third person is searched by its topic.

A dense hit's text opens with its author's name, so the name in "周雨桐的仓鼠怎么了？"
matches every unit of hers and drowns the topic; the names bound with set_identity are
left out of the question's dense query (docs/benchmarks.md, the Chinese set)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from memstack.core.settings import Settings
from memstack.memory import AsyncMemory
from memstack.recall.ranking import without_names


def test_without_names_drops_bound_names_from_a_chinese_question() -> None:
    assert without_names("周雨桐的仓鼠得了什么病？", ["周雨桐"]) == "的仓鼠得了什么病？"
    # The longer name first, whatever the order given; Latin names ignore case.
    assert without_names("欧阳雨桐和雨桐的猫", ["雨桐", "欧阳雨桐"]) == "和的猫"
    assert without_names("Anna 最近在学什么乐器？", ["anna"]) == "最近在学什么乐器？"
    # A Latin name as a whole word only; a one-character name not at all.
    assert without_names("Ann 的 annual 计划是什么？", ["Ann"]) == "的 annual 计划是什么？"
    assert without_names("Ann的计划是什么？", ["Ann"]) == "的计划是什么？"
    assert without_names("芳的芳香疗法学得怎么样？", ["芳"]) is None


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("Where did Zhou Yutong go hiking?", ["Zhou Yutong"]),  # English: kept
        ("周雨桐的仓鼠得了什么病？", []),  # nothing bound
        ("周雨桐的仓鼠得了什么病？", ["王浩"]),  # another name
        ("周雨桐？", ["周雨桐"]),  # nothing left to search for
    ],
)
def test_without_names_leaves_other_questions_alone(query: str, names: list[str]) -> None:
    assert without_names(query, names) is None


async def _dense_queries(mem: AsyncMemory, question: str) -> list[str]:
    """The texts context() embeds for ``question``."""
    seen: list[str] = []
    embedder = mem.stores.embedder
    embed_queries = embedder.embed_queries

    async def spy(texts: Sequence[str]) -> list[list[float]]:
        seen.extend(texts)
        return await embed_queries(texts)

    embedder.embed_queries = spy  # type: ignore[method-assign]
    try:
        await mem.context("u", "ask", question)
    finally:
        del embedder.embed_queries
    return seen


async def test_context_searches_a_question_about_the_bound_user_without_her_name(
    any_settings: Settings,
) -> None:
    question = "周雨桐养的小动物生了什么病？"
    async with await AsyncMemory.open(any_settings) as mem:
        await mem.remember("u", "s", "user", "我家仓鼠上周开始掉毛，兽医说是螨虫。", name="周雨桐")
        await mem.drain(summarize=False)
        assert (await _dense_queries(mem, question))[0] == question  # no name bound yet

        await mem.set_identity("u", display_name="周雨桐", aliases=["Zhou Yutong"])
        assert (await _dense_queries(mem, question))[0] == "养的小动物生了什么病？"
        english = "What illness did Zhou Yutong's pet have?"
        assert (await _dense_queries(mem, english))[0] == english
        result = await mem.context("u", "ask", question)
        assert "仓鼠" in " ".join(result.sections["history"].lines)
        await mem.forget_user("u")
