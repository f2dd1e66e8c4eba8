"""The offline rule extractor and the vocabulary it normalises through."""

from __future__ import annotations

from typing import Any

import pytest

from memstack.core.facts.vocabulary import (
    VOCABULARY,
    normalise_money,
    normalise_value,
    parse_number,
)
from memstack.ingest.extraction import Fact, RulesExtractor, canonical_key

CNY_5000 = {"amount": 5000, "currency": "CNY"}


@pytest.fixture
def rules() -> RulesExtractor:
    return RulesExtractor()


def by_key(facts: list[Fact]) -> dict[str, Fact]:
    keys = [f.key for f in facts]
    assert len(keys) == len(set(keys)), f"one fact per key per message, got {keys}"
    return {f.key: f for f in facts}


async def extract(
    rules: RulesExtractor, text: str, known: dict[str, Any] | None = None
) -> dict[str, Fact]:
    return by_key(await rules.extract(text, known=known))


# --- the budget scenario of docs/spec.md (Facts and the ledger) ---------------------------


async def test_budget_statement(rules: RulesExtractor) -> None:
    facts = await extract(rules, "我预算不超过五千")
    b = facts["budget_limit"]
    assert b.value == CNY_5000
    assert b.type == "constraint"
    assert b.source == "user_stated"
    assert b.override is False
    assert b.supersedes is None


async def test_budget_change_supersedes_known_value(rules: RulesExtractor) -> None:
    facts = await extract(rules, "其实我可以到八千", known={"budget_limit": CNY_5000})
    b = facts["budget_limit"]
    assert b.value == {"amount": 8000, "currency": "CNY"}
    assert b.override is True
    assert b.supersedes == CNY_5000


async def test_change_within_one_message_is_the_new_value_not_a_range(
    rules: RulesExtractor,
) -> None:
    b = (await extract(rules, "其实预算从五千改到八千"))["budget_limit"]
    assert b.value == {"amount": 8000, "currency": "CNY"}
    assert b.supersedes == CNY_5000
    assert b.override is True


async def test_turn_word_range_is_the_new_value(rules: RulesExtractor) -> None:
    b = (await extract(rules, "其实五千到八千吧", known={"budget_limit": CNY_5000}))["budget_limit"]
    assert b.value["amount"] == 8000


async def test_a_lower_new_value_wins_over_the_upper_bound(rules: RulesExtractor) -> None:
    b = (await extract(rules, "预算从八千降到五千"))["budget_limit"]
    assert b.value == CNY_5000
    assert b.supersedes == {"amount": 8000, "currency": "CNY"}


async def test_plain_range_takes_the_upper_bound(rules: RulesExtractor) -> None:
    b = (await extract(rules, "想看看五千到八千的"))["budget_limit"]
    assert b.value == {"amount": 8000, "currency": "CNY"}
    assert b.override is False
    assert b.supersedes is None


async def test_later_clause_after_turn_word_wins(rules: RulesExtractor) -> None:
    facts = await extract(rules, "我想买一台笔记本，预算不超过五千，改一下，八千吧")
    assert facts["budget_limit"].value["amount"] == 8000
    assert facts["budget_limit"].supersedes == CNY_5000
    # The turn word speaks for what follows it, not for the goal stated before it.
    assert facts["goal"].value == "笔记本"
    assert facts["goal"].override is False


async def test_turn_word_in_its_own_sentence_carries_over(rules: RulesExtractor) -> None:
    b = (await extract(rules, "其实，我改主意了。预算八千。", known={"budget_limit": CNY_5000}))[
        "budget_limit"
    ]
    assert b.value["amount"] == 8000
    assert b.override is True
    assert b.supersedes == CNY_5000


async def test_bare_amount_after_turn_word_needs_a_budget_in_play(rules: RulesExtractor) -> None:
    with_known = await extract(rules, "其实八千吧", known={"budget_limit": CNY_5000})
    assert with_known["budget_limit"].value["amount"] == 8000
    assert with_known["budget_limit"].source == "user_stated"
    # Without a known budget the amount alone is a guess, marked as such.
    alone = await extract(rules, "其实八千吧")
    assert alone["budget_limit"].source == "extract"
    assert alone["budget_limit"].confidence < 0.9


async def test_same_value_again_supersedes_nothing(rules: RulesExtractor) -> None:
    b = (await extract(rules, "预算还是五千", known={"budget_limit": CNY_5000}))["budget_limit"]
    assert b.value == CNY_5000
    assert b.supersedes is None


# --- English ----------------------------------------------------------------------------


async def test_english_budget_and_change(rules: RulesExtractor) -> None:
    first = (await extract(rules, "My budget is at most $5,000."))["budget_limit"]
    assert first.value == {"amount": 5000, "currency": "USD"}
    assert first.override is False
    second = (
        await extract(rules, "Actually, I can go up to $8,000.", known={"budget": first.value})
    )["budget_limit"]
    assert second.value == {"amount": 8000, "currency": "USD"}
    assert second.override is True
    assert second.supersedes == {"amount": 5000, "currency": "USD"}


@pytest.mark.parametrize(
    ("text", "amount", "currency"),
    [
        ("预算两万", 20000, "CNY"),
        ("1.5万", 15000, "CNY"),
        ("5000元", 5000, "CNY"),
        ("¥8000", 8000, "CNY"),
        ("budget is $5,000", 5000, "USD"),
        ("I can go up to 8000 yuan", 8000, "CNY"),
        ("under 3k USD", 3000, "USD"),
        ("I'd like to stay under 3000", 3000, "USD"),
        ("€3000 max", 3000, "EUR"),
        ("预算一万二人民币", 12000, "CNY"),
        ("my budget is 5000 to 8000", 8000, "USD"),
        ("续航至少10小时，预算五千左右", 5000, "CNY"),
    ],
)
async def test_budget_forms(rules: RulesExtractor, text: str, amount: int, currency: str) -> None:
    assert (await extract(rules, text))["budget_limit"].value == {
        "amount": amount,
        "currency": currency,
    }


async def test_missing_currency_follows_the_known_budget(rules: RulesExtractor) -> None:
    b = (
        await extract(
            rules, "其实可以到八千", known={"budget_limit": {"amount": 5000, "currency": "USD"}}
        )
    )["budget_limit"]
    assert b.value == {"amount": 8000, "currency": "USD"}


@pytest.mark.parametrize(
    "text",
    [
        "我上个月花了5000元买了手机",  # spending history, not a limit
        "续航至少10小时",  # hours
        "想要4K屏",  # resolution
        "改一下吧",  # 一 is not a number here
        "千万别买太重的",  # 千万 means "by all means"
        "我用的是i7-13700",  # model number
    ],
)
async def test_numbers_that_are_not_budgets(rules: RulesExtractor, text: str) -> None:
    assert "budget_limit" not in await extract(rules, text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("五千", 5000),
        ("八千", 8000),
        ("两万", 20000),
        ("1.5万", 15000),
        ("一万二", 12000),
        ("三千五", 3500),
        ("十万", 100000),
        ("八千零五", 8005),
        ("两万五千", 25000),
        ("一万零五百", 10500),
        ("十二万", 120000),
        ("二十五", 25),
        ("5,000", 5000),
        ("3k", 3000),
        ("2w", 20000),
        ("1.2 million", 1200000),
    ],
)
def test_numerals(text: str, value: int) -> None:
    assert parse_number(text) == value


def test_not_numbers() -> None:
    assert parse_number("续航") is None
    assert parse_number("") is None


# --- preferences, bans, profile --------------------------------------------------------------


async def test_chinese_preferences_keep_the_users_words(rules: RulesExtractor) -> None:
    facts = await extract(rules, "我喜欢轻薄的笔记本，重点关注续航和重量，不要推荐游戏本")
    assert facts["likes"].value == ["轻薄的笔记本"]
    assert facts["focus"].value == ["续航", "重量"]
    assert facts["do_not_recommend"].value == ["游戏本"]
    assert facts["do_not_recommend"].type == "constraint"
    assert facts["likes"].type == "preference"
    assert "dislikes" not in facts


async def test_chinese_dislike_is_not_a_like(rules: RulesExtractor) -> None:
    facts = await extract(rules, "我不喜欢太重的电脑")
    assert facts["dislikes"].value == ["太重的电脑"]
    assert "likes" not in facts


async def test_english_preferences(rules: RulesExtractor) -> None:
    facts = await extract(
        rules,
        "I prefer light laptops. I hate glossy screens. I care most about battery life and weight.",
    )
    assert facts["likes"].value == ["light laptops"]
    assert facts["dislikes"].value == ["glossy screens"]
    assert facts["focus"].value == ["battery life", "weight"]


async def test_english_dont_like_is_a_dislike(rules: RulesExtractor) -> None:
    facts = await extract(rules, "I don't like touchscreens")
    assert facts["dislikes"].value == ["touchscreens"]
    assert "likes" not in facts


async def test_long_messages_stay_fast(rules: RulesExtractor) -> None:
    import time

    # One unpunctuated 64 KB run of statements used to be quadratic (tens of seconds).
    # Judged by growth, not by a clock limit a busy machine can miss: four times the
    # text takes about four times as long when linear, sixteen times when quadratic.
    async def seconds(size: int) -> float:
        start = time.perf_counter()
        facts = await extract(rules, ("I like a, " * 6600)[:size])
        assert facts["likes"].value == ["a"]
        return time.perf_counter() - start

    small = min([await seconds(16384) for _ in range(2)])
    large = min([await seconds(65536) for _ in range(2)])
    assert large < 8 * small + 0.05, (small, large)


async def test_a_new_statement_ends_an_english_list(rules: RulesExtractor) -> None:
    facts = await extract(rules, "do not recommend Dell, do not recommend HP")
    assert facts["do_not_recommend"].value == ["Dell", "HP"]


async def test_english_list_over_commas(rules: RulesExtractor) -> None:
    assert (await extract(rules, "I love hiking, reading and chess"))["likes"].value == [
        "hiking",
        "reading",
        "chess",
    ]


@pytest.mark.parametrize(
    ("text", "item"),
    [
        ("别再推荐游戏本了", "游戏本"),
        ("以后不要给我推荐二手机", "二手机"),
        ("Do not recommend gaming laptops, they are too heavy.", "gaming laptops"),
        ("Please stop suggesting Dell", "Dell"),
    ],
)
async def test_do_not_recommend(rules: RulesExtractor, text: str, item: str) -> None:
    assert (await extract(rules, text))["do_not_recommend"].value == [item]


async def test_bans_accumulate_even_after_a_turn_word(rules: RulesExtractor) -> None:
    f = (await extract(rules, "其实别推荐游戏本", known={"do_not_recommend": ["二手机"]}))[
        "do_not_recommend"
    ]
    assert f.value == ["二手机", "游戏本"]
    assert f.supersedes == ["二手机"]


async def test_list_values_come_back_whole(rules: RulesExtractor) -> None:
    added = (await extract(rules, "我也喜欢ThinkPad", known={"likes": ["Mac"]}))["likes"]
    assert added.value == ["Mac", "ThinkPad"]
    replaced = (await extract(rules, "其实我更喜欢ThinkPad", known={"likes": ["Mac"]}))["likes"]
    assert replaced.value == ["ThinkPad"]
    assert replaced.supersedes == ["Mac"]
    assert replaced.override is True


async def test_chinese_profile(rules: RulesExtractor) -> None:
    facts = await extract(rules, "我叫张三，住在上海，我是一名医生。请用英文回答")
    assert facts["name"].value == "张三"
    assert facts["city"].value == "上海"
    assert facts["occupation"].value == "医生"
    assert facts["language"].value == "en"
    assert {facts[k].type for k in ("name", "city", "occupation")} == {"profile"}


async def test_english_profile(rules: RulesExtractor) -> None:
    facts = await extract(rules, "My name is Alice and I live in Berlin. I work as a nurse.")
    assert facts["name"].value == "Alice"
    assert facts["city"].value == "Berlin"
    assert facts["occupation"].value == "nurse"
    more = await extract(rules, "Call me Bob. I'm a software engineer. Please answer in Chinese.")
    assert more["name"].value == "Bob"
    assert more["occupation"].value == "software engineer"
    assert more["language"].value == "zh"


@pytest.mark.parametrize(
    "text",
    [
        "我叫什么名字？",  # a question, not a statement
        "我是一个喜欢户外的人",  # not an occupation
        "他住在北京",  # someone else
        "I'm a big fan of long walks",  # not an occupation
    ],
)
async def test_profile_false_friends(rules: RulesExtractor, text: str) -> None:
    facts = await extract(rules, text)
    assert not {"name", "city", "occupation"} & facts.keys()


@pytest.mark.parametrize("text", ["你好呀，今天天气不错", "Thanks, that helps!", "好的", "   "])
async def test_small_talk_yields_nothing(rules: RulesExtractor, text: str) -> None:
    assert await rules.extract(text) == []


@pytest.mark.parametrize("role", ["assistant", "system", "tool"])
async def test_only_user_messages_yield_facts(rules: RulesExtractor, role: str) -> None:
    text = "我预算不超过五千，不要推荐游戏本"
    assert await rules.extract(text, role=role) == []
    assert len(await rules.extract(text, role="user")) == 2


# --- vocabulary ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("budget", "budget_limit"),
        ("预算", "budget_limit"),
        ("Max Budget", "budget_limit"),
        ("max-budget", "budget_limit"),
        ("favourites", "likes"),
        ("不要推荐", "do_not_recommend"),
        ("job", "occupation"),
        ("Favourite Colour", "favourite_colour"),  # unknown keys pass through, snake_cased
    ],
)
def test_canonical_key(raw: str, key: str) -> None:
    assert canonical_key(raw) == key


def test_every_vocabulary_key_is_documented() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "facts.md").read_text("utf-8")
    for key in VOCABULARY:
        assert f"`{key}`" in doc, f"{key} missing from docs/facts.md"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (8000, {"amount": 8000, "currency": "CNY"}),
        ("八千", {"amount": 8000, "currency": "CNY"}),
        ("¥8,000", {"amount": 8000, "currency": "CNY"}),
        ("$5,000", {"amount": 5000, "currency": "USD"}),
        ({"amount": "8000", "currency": "rmb"}, {"amount": 8000, "currency": "CNY"}),
        ({"min": 5000, "max": 8000, "currency": "usd"}, {"amount": 8000, "currency": "USD"}),
        ("5000-8000", {"amount": 8000, "currency": "CNY"}),
    ],
)
def test_money_normaliser(value: Any, expected: dict[str, Any]) -> None:
    assert normalise_money(value) == expected


def test_unusable_values_are_rejected() -> None:
    with pytest.raises(ValueError):
        normalise_money("a lot")
    with pytest.raises(ValueError):
        normalise_value("likes", [])
    assert normalise_value("language", "English") == "en"
    assert normalise_value("focus", "续航、重量") == ["续航", "重量"]


# --- numbers nobody writes: never a crash, never an infinite amount ----------------------------


def test_an_absurdly_long_or_infinite_number_is_not_a_number() -> None:
    assert parse_number("一" + "万" * 3000) is None  # recursed once per 万
    assert parse_number("9" * 400) is None  # float("99…9") is inf
    assert parse_number("1" + "0" * 39) == 1e39  # 40 characters: still read


async def test_a_numeral_of_3000_characters_yields_no_budget(rules: RulesExtractor) -> None:
    assert await rules.extract("我预算一" + "万" * 3000 + "元") == []
    assert await rules.extract("My budget is $" + "9" * 400) == []


@pytest.mark.parametrize(
    "value", [{"amount": 10**400}, {"amount": {"amount": {"amount": {"amount": {"amount": 1}}}}}]
)
def test_unreadable_amounts_are_refused_not_raised(value: Any) -> None:
    with pytest.raises(ValueError):
        normalise_money(value)
