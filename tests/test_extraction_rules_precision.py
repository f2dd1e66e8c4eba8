"""Precision mechanisms of the rule extractor, on sentences written for these tests.

Whose statement a subjectless Chinese clause is (it keeps the subject before it); a meat-
free diet ended by eating meat; a goal put off or replaced by an unread change of plan; a
trailing "instead"; "too" as a degree word, not "also"; "our" family; "上到" a new budget.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fact_rules import after, money

# --- a subjectless clause keeps the subject before it ---------------------------------------


def test_a_relatives_allergy_in_a_topic_chain_is_not_the_users() -> None:
    got = after("我儿子叫豆豆，上小学了，对鸡蛋过敏")
    assert "allergies" not in got
    assert got["family"] == ["儿子: 豆豆"]


def test_the_user_taking_the_subject_back_keeps_their_own_facts() -> None:
    got = after("我老公在上海上班，我对虾过敏")
    assert got["allergies"] == ["虾"]


def test_buying_for_the_relative_is_the_users_goal() -> None:
    assert after("我爸喜欢钓鱼，想给他买个鱼竿")["goal"] == "鱼竿"


# --- a meat-free diet ended by eating meat ----------------------------------------------------


@pytest.mark.parametrize(
    "messages",
    [
        ("我吃素好几年了", "不过现在什么都吃了"),
        ("I'm vegetarian", "well, used to be. went back to eating meat over the summer"),
    ],
)
def test_eating_meat_ends_a_meat_free_diet(messages: tuple[str, ...]) -> None:
    assert "diet" not in after(*messages)


def test_eating_meat_does_not_end_a_diet_that_has_meat() -> None:
    got = after("I'm keto", "now eating meat again with every meal")
    assert got.get("diet") == "keto"


# --- a goal put off, or replaced by a plan the rules cannot read -------------------------------


@pytest.mark.parametrize(
    "messages",
    [
        ("想买个投影仪", "投影仪先放放，最近太忙"),
        ("looking for a rowing machine", "the rowing machine can wait, money's tight"),
        ("打算十一去大理玩", "改主意了，十一去草原露营"),
        ("planning a trip to Lisbon", "changed my mind, heading somewhere colder for skiing"),
    ],
)
def test_a_goal_put_off_or_replanned_is_not_current(messages: tuple[str, ...]) -> None:
    assert "goal" not in after(*messages)


def test_a_goal_after_want_first_is_read() -> None:
    assert after("想买个烤箱", "烤箱不急，我打算先买台洗碗机")["goal"] == "洗碗机"


# --- list turns: a trailing "instead", and "too" grading a word --------------------------------


@pytest.mark.parametrize(
    ("messages", "kept"),
    [
        (("I like sweet wines", "I prefer dry reds instead, sweet ones are too sticky"), False),
        (("I like thrillers", "I like comedies too"), True),
        (("I like tea", "I like coffee instead of juice"), True),
    ],
)
def test_trailing_instead_replaces_and_too_sticky_does_not_add(
    messages: tuple[str, ...], kept: bool
) -> None:
    likes = after(*messages)["likes"]
    first = after(messages[0])["likes"][0]
    assert (first in likes) is kept
    assert len(likes) == (2 if kept else 1)


# --- "our" family; "上到" a new budget ---------------------------------------------------------


def test_our_kids_are_the_users_family() -> None:
    assert after("it's me, my husband Omar and our twins")["family"] == ["husband: Omar", "twins"]


@pytest.mark.parametrize(
    ("messages", "budget"),
    [
        (("想买个显示器，预算两千", "比较了一下，决定上到两千五"), money(2500, "CNY")),
    ],
)
def test_a_decided_raise_is_the_new_budget(messages: tuple[str, ...], budget: Any) -> None:
    assert after(*messages)["budget_limit"] == budget


# --- general phrasings: a shared "I'm", hyphened diets, a listed household, 搬来 ----------------


def test_a_second_predicate_shares_the_users_i_am() -> None:
    got = after("I'm a pescatarian and allergic to shellfish")
    assert got["diet"] == "pescatarian"
    assert got["allergies"] == ["shellfish"]
    assert "allergies" not in after("the puppy is tiny and allergic to chicken")


@pytest.mark.parametrize(("text", "diet"), [("I'm semi-vegetarian", "semi-vegetarian")])
def test_hyphened_qualifiers_stay_with_the_diet(text: str, diet: str) -> None:
    assert after(text)["diet"] == diet
    assert "diet" not in after("I'm non-vegetarian")


def test_a_birthday_as_an_introduction_list_item() -> None:
    assert after("hi, Tomasz here, bday's 1988-07-21")["birthday"] == "1988-07-21"


@pytest.mark.parametrize(
    ("text", "family"),
    [
        ("家里有老婆和一个女儿", ["老婆", "一个女儿"]),
        ("我家里有爸妈和两个弟弟，挺热闹", ["爸妈", "两个弟弟"]),
    ],
)
def test_a_listed_household_is_family_only_when_every_item_is_kin(
    text: str, family: list[str]
) -> None:
    assert after(text)["family"] == family
    assert "family" not in after("家里有猫和狗")


@pytest.mark.parametrize(
    ("text", "city"), [("前年从南宁搬来厦门了", "厦门"), ("去年搬回洛阳了", "洛阳")]
)
def test_moving_here_or_back_names_the_city(text: str, city: str) -> None:
    assert after(text)["city"] == city
