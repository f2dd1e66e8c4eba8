"""The rule extractor on phrasings its rules were not first written for.

Each class has cases in Chinese and in English, written for these tests: values that are
no values (a judgement, a vague tail, a word that is no name), number forms, budget and
goal changes without a turn word, moves and self-introductions.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fact_rules import after, money

# --- values that are no values -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("I like Lego and stuff like that", "likes", ["Lego"]),
        ("I love board games and things like that", "likes", ["board games"]),
        ("I don't like cruise ships, way too crowded", "dislikes", ["cruise ships"]),
        ("I hate theme parks, too noisy", "dislikes", ["theme parks"]),
    ],
)
def test_a_vague_tail_or_a_judgement_is_not_an_item(text: str, key: str, value: Any) -> None:
    assert after(text).get(key) == value


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("我喜欢的那款好像没货了", "likes"),
        ("call me whatever, it's fine", "name"),
        ("call me anything you like", "name"),
        ("我叫不出这个牌子的名字", "name"),
    ],
)
def test_what_only_sits_where_a_value_goes_is_dropped(text: str, key: str) -> None:
    assert key not in after(text)


# --- money -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "budget"),
    [
        (["去日本玩几天，预算2w5左右"], money(25000, "CNY")),
        (["looking for a used bike, somewhere between 3 and 5k"], money(5000, "USD")),
        (["Budgt ~£1.5k for a desk"], money(1500, "GBP")),
        (["budget £600", "raise it to 700, prices went up"], money(700, "GBP")),
        (["预算500美金", "往上调到600吧"], money(600, "USD")),
    ],
)
def test_number_forms_and_changes_without_a_turn_word(
    messages: list[str], budget: dict[str, Any]
) -> None:
    assert after(*messages)["budget_limit"] == budget


def test_two_bare_numbers_joined_by_and_are_no_range() -> None:
    assert "budget_limit" not in after("we were 3 and 5k away")


# --- goals -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "goal"),
    [
        (["换台电视，预算控制在五千以内"], "电视"),
        (["入手个相机"], "相机"),
        (["去越南玩五天"], "越南"),
        (["想买个吹风机", "改成卷发棒吧，头发太短了"], "卷发棒"),
        (["lookin at kayaks, nothing fancy"], "kayaks"),
        (["Planning a week in Portugal this summer", "actually thinking Spain instead"], "Spain"),
        (["I want to buy a Kindle", "actually getting a Kobo instead"], "Kobo"),
        (["Budget for the winter coat is £300"], "winter coat"),
    ],
)
def test_verb_first_goals_and_goal_switches(messages: list[str], goal: str) -> None:
    assert after(*messages)["goal"] == goal


@pytest.mark.parametrize(
    "text", ["换个思路吧", "去年去泰国玩了七天", "改成五千吧", "thinking pasta instead"]
)
def test_no_goal_from_a_switch_with_nothing_to_switch(text: str) -> None:
    assert "goal" not in after(text)


# --- moves, language, intros -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "city"),
    [
        (["我老家是长沙的", "不过现在在成都定居了，工作也稳定"], "成都"),
        (["I'm from Boston originally", "been living in Denver for like 5 years now"], "Denver"),
        (["I used to live in Austin", "moved down to Houston last fall"], "Houston"),
    ],
)
def test_moves_said_without_moved_to(messages: list[str], city: str) -> None:
    assert after(*messages)["city"] == city


@pytest.mark.parametrize(
    ("messages", "language"),
    [
        (["以后用日语跟我聊吧", "算了，还是中文吧，太难了"], "zh"),
        (["switch to Spanish please", "ugh never mind, back to English please"], "en"),
    ],
)
def test_a_language_changed_back(messages: list[str], language: str) -> None:
    assert after(*messages)["language"] == language


def test_going_back_to_a_class_is_no_language() -> None:
    assert "language" not in after("I went back to English class today")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "你好，我叫林晓，杭州的一名护士，素食主义者",
            {"name": "林晓", "city": "杭州", "occupation": "护士", "diet": "素食"},
        ),
        ("我是回族，只吃清真的", {"diet": "清真"}),
        ("在伦敦读研，想买台电脑", {"city": "伦敦", "goal": "电脑"}),
        (
            "Hey there, Zoë here, pianist in Vienna, pescatarian.",
            {"name": "Zoë", "occupation": "pianist", "city": "Vienna", "diet": "pescatarian"},
        ),
        (
            "Priya here 🙂 product manager, based in Austin",
            {"name": "Priya", "occupation": "product manager", "city": "Austin"},
        ),
        ("hi! I'm Mei, a dental hygienist based in Perth.", {"occupation": "dental hygienist"}),
    ],
)
def test_self_introductions(text: str, expected: dict[str, Any]) -> None:
    got = after(text)
    assert {k: got.get(k) for k in expected} == expected


# --- lists and corrections -----------------------------------------------------------------------


def test_more_into_replaces_the_likes_after_a_turn_word() -> None:
    got = after("I like film cameras", "actually I'm more into instant cameras now")
    assert got["likes"] == ["instant cameras"]


def test_no_x_period_adds_to_do_not_recommend() -> None:
    got = after("never suggest cruise deals to me", "actually no all-inclusive resorts, period")
    assert got["do_not_recommend"] == ["cruise deals", "all-inclusive resorts"]


def test_a_spelling_note_is_not_part_of_a_corrected_name() -> None:
    assert after("name's Ana", "sorry typo, it's Anna with two n's")["name"] == "Anna"


# --- guards: the new rules must not misfire ------------------------------------------------------


@pytest.mark.parametrize(
    "messages",
    [
        ["budget £600", "the price dropped to 500 though"],
        ["预算三千", "价格降到两千五了"],
    ],
)
def test_a_price_moving_is_not_a_budget_change(messages: list[str]) -> None:
    assert after(*messages)["budget_limit"]["amount"] in (600, 3000)


@pytest.mark.parametrize(
    "text", ["去北京玩的时候丢了手机", "looking at my calendar now", "买个教训", "换个发型"]
)
def test_chat_verbs_that_are_not_shopping(text: str) -> None:
    assert "goal" not in after(text)


def test_a_title_is_not_a_name() -> None:
    assert "name" not in after("call me Dr. Lee")


@pytest.mark.parametrize(
    ("messages", "key", "value"),
    [
        (["我老婆叫王丽，我们有个儿子"], "family", ["老婆: 王丽", "儿子"]),
        (["打算和老婆去三亚度假"], "family", ["老婆"]),
        (["it'll be me, my wife Ana and our two kids"], "family", ["wife: Ana", "two kids"]),
        (["I have a cat named Mo and a bearded dragon"], "pets", ["cat: Mo", "bearded dragon"]),
        (["我养了一只柯基，叫豆豆", "还有一只仓鼠"], "pets", ["柯基: 豆豆", "仓鼠"]),
        (["I have a dog named Rex", "and a gecko too"], "pets", ["dog: Rex", "gecko"]),
        (["我喜欢猫", "还有狗"], "likes", ["猫", "狗"]),
    ],
)
def test_second_members_of_family_and_pets(messages: list[str], key: str, value: Any) -> None:
    assert after(*messages)[key] == value


@pytest.mark.parametrize(
    ("text", "goal"),
    [
        ("我爸喜欢喝茶，想给他买个智能茶壶", "智能茶壶"),
        ("想买一些婴儿用品", "婴儿用品"),
    ],
)
def test_a_stop_character_inside_a_noun_does_not_cut_the_goal(text: str, goal: str) -> None:
    assert after(text)["goal"] == goal


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("born 14 Mar 1988 fwiw", {"birthday": "1988-03-14"}),
        ("keto diet.", {"diet": "keto"}),
        ("Let's say 200 euros for a stand mixer", {"goal": "stand mixer"}),
        ("Hey, Zoë here. Trying to find a good road bike", {"goal": "good road bike"}),
        ("在上海买台相机，预算八千", {"goal": "相机"}),
    ],
)
def test_subjectless_chat_fragments(text: str, expected: dict[str, Any]) -> None:
    got = after(text)
    assert {k: got.get(k) for k in expected} == expected


@pytest.mark.parametrize(
    "text",
    [
        "I paid $500 for a bike last year",
        "trying to find the bathroom",
        "going to get a haircut",
        "my brother is trying to find a used car",
        "他想换台电脑",
    ],
)
def test_no_goal_from_spending_errands_or_others(text: str) -> None:
    assert "goal" not in after(text)
