"""Query expansion by word neighbours: the table, the expansion, and recall through it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memstack.core.errors import ModelUnavailable
from memstack.core.settings import Settings
from memstack.memory import AsyncMemory
from memstack.recall import word_neighbours
from memstack.recall.lexical import rewrite_query
from memstack.recall.word_neighbours import CALENDAR_AND_COUNTS, expand, neighbour_table, table
from memstack.text.terms import lexical_terms
from tests.conftest import new_id

NOW = datetime(2025, 6, 1, 12, tzinfo=UTC)


def test_the_shipped_table_holds_near_words_and_never_a_word_itself() -> None:
    t = table()
    assert len(t) > 10_000
    assert "children" in t["kids"]
    assert "father" in t["dad"]
    for word, near in t.items():
        assert 0 < len(near) <= word_neighbours.TOP
        own = set(lexical_terms(word))
        assert not any(own & set(lexical_terms(n)) for n in near), word
        # "sunday" would bring monday: calendar words and counts are never expanded.
        assert word not in CALENDAR_AND_COUNTS
        assert not CALENDAR_AND_COUNTS & set(near), word
    assert "weekend" in CALENDAR_AND_COUNTS and "weekend" not in t


def test_expand_adds_each_words_neighbours_at_its_weight() -> None:
    rewrite = rewrite_query("Which dogs did Caroline adopt?")
    assert rewrite.weights["caroline"] == 1.5  # a name counts more
    out = expand(rewrite, {"dogs": ["puppy", "adopt"], "caroline": ["carol"]})
    assert out.weights["puppy"] == 1.0
    assert out.weights["carol"] == 1.5
    # A term the query has already keeps its own weight and is not listed as added.
    assert out.weights["adopt"] == 1.0
    assert out.expanded == ("puppy", "carol")
    assert out.terms == rewrite.terms  # the dense rewrite reads these: unchanged
    assert rewrite.expanded == ()  # the input is not modified


def test_expand_leaves_chinese_stopwords_and_unknown_words_alone() -> None:
    zh = rewrite_query("我的孩子喜欢什么")
    assert expand(zh, table()) is zh
    # "what" is a stopword: no term of the query, so its neighbours must not come in.
    en = rewrite_query("What about the zyzzyva?")
    assert expand(en, {"what": ["which"], "zyzzyva": []}) is en


def test_neighbour_table_keeps_close_words_of_another_stem() -> None:
    words = ["car", "child", "kid", "kids"]
    vectors = [[0.0, 1.0], [0.8, 0.6], [1.0, 0.0], [1.0, 0.0]]
    assert neighbour_table(words, vectors) == {
        "child": ["kid", "kids"],
        "kid": ["child"],
        "kids": ["child"],
    }
    # Just under the threshold: no neighbour.
    cos = word_neighbours.MIN_SCORE - 0.01
    assert neighbour_table(["a1x", "b2y"], [[1.0, 0.0], [cos, (1 - cos**2) ** 0.5]]) == {}


async def _said(mem: AsyncMemory, user: str) -> str:
    session = new_id("s")
    texts = [
        "The children adore the aquarium downtown.",
        # Newer, and sharing no word with the questions: without the table these rank
        # first on recency.
        "I went running before work.",
        "Pizza on Fridays is our thing.",
        "The holiday plans are still open.",
    ]
    ids = [
        await mem.remember(user, session, "user", t, ts=NOW - timedelta(days=30, minutes=-i))
        for i, t in enumerate(texts)
    ]
    await mem.drain(summarize=False)
    return ids[0]


async def test_a_synonym_in_the_question_finds_the_users_word(
    mem: AsyncMemory, any_settings: Settings
) -> None:
    """Tests embed by hashing words, so "kids" finds "children" only through the table."""
    user, asked = new_id("u"), new_id("s")
    target = await _said(mem, user)
    query = "Where do the kids like to go?"

    async def first(m: AsyncMemory) -> tuple[str, ...]:
        result = await m.context(user, asked, query, now=NOW, locale="en", budget_tokens=120)
        kept = result.kept("semantic")
        assert kept, result.text
        return kept[0].msg_ids

    assert await first(mem) == (target,)
    result = await mem.context(user, asked, query, now=NOW, locale="en")
    assert "children" in result.rewrite.expanded
    off = await AsyncMemory.open(any_settings.model_copy(update={"word_neighbours": False}))
    try:
        assert await first(off) != (target,)
    finally:
        await off.close()


async def test_an_unreadable_table_degrades_and_the_context_still_comes(
    mem: AsyncMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> None:
        raise ModelUnavailable("word_neighbours.json is unreadable: test")

    monkeypatch.setattr(word_neighbours, "table", broken)
    user, asked = new_id("u"), new_id("s")
    target = await _said(mem, user)
    result = await mem.context(user, asked, "What do the children adore?", now=NOW, locale="en")
    assert "unreadable" in result.degraded["word_neighbours"]
    assert target in {i for item in result.kept("semantic") for i in item.msg_ids}
