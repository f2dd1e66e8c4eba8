"""The rule extractor on chat forms a fifth round of unseen sentences showed it missed.

Each class has cases in Chinese and in English, written for these tests (not taken from
any evaluation set): self-introductions that list facts without verbs, withdrawals that
name nothing, changes said through a role, a place or a plan, households listed at once,
and statements whose subject chat leaves out.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fact_rules import after, money

# --- self-introductions ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "自我介绍一下：邵明川，住在绍兴，牙科护士，生日1991年7月3日",
            {"name": "邵明川", "city": "绍兴", "occupation": "牙科护士", "birthday": "1991-07-03"},
        ),
        (
            "哈喽～我是欧阳晓，在札幌做翻译",
            {"name": "欧阳晓", "city": "札幌", "occupation": "翻译"},
        ),
        ("我叫龚晨，九江的，平时做木工", {"name": "龚晨", "city": "九江", "occupation": "木工"}),
        (
            "Hola! Lucia, 37, Porto-based pharmacist, pescatarian.",
            {"name": "Lucia", "city": "Porto", "occupation": "pharmacist", "diet": "pescatarian"},
        ),
        (
            "Name's Bram, maths teacher, living in Utrecht.",
            {"name": "Bram", "occupation": "maths teacher", "city": "Utrecht"},
        ),
        ("Denver-based line cook here", {"city": "Denver", "occupation": "line cook"}),
    ],
)
def test_a_self_introduction_lists_facts_without_verbs(text: str, expected: dict[str, Any]) -> None:
    got = after(text)
    assert {k: got.get(k) for k in expected} == expected


@pytest.mark.parametrize("text", ["我是王者，", "我是张老师，", "我是新来的，"])
def test_a_word_after_i_am_is_a_name_only_when_it_reads_as_one(text: str) -> None:
    assert "name" not in after(text)


# --- withdrawals that name nothing -----------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "key"),
    [
        (["我对芒果过敏", "做了脱敏，复查说现在已经不过敏了"], "allergies"),
        (["I'm allergic to kiwi", "good news, I outgrew it"], "allergies"),
        (["我家有只兔子叫团团", "上个月送人了，现在一只宠物都没了"], "pets"),
        (["we have a hamster called Biscuit", "we had to put Biscuit down"], "pets"),
        (["we have a hamster called Biscuit", "Biscuit passed away on Sunday"], "pets"),
        (["I live in Tulsa", "moved out last week, staying with friends for now"], "city"),
        (["我在药房当店员", "那活儿早辞了"], "occupation"),
    ],
)
def test_a_withdrawal_that_names_nothing_ends_the_value(messages: list[str], key: str) -> None:
    assert key not in after(*messages)


def test_a_withdrawal_about_a_relative_is_not_the_users() -> None:
    assert after("我对花生过敏", "我儿子，现在已经不过敏了")["allergies"] == ["花生"]


# --- changes through a role, a place, a plan -------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "key", "value"),
    [
        (["我是超市理货员", "下个月开始正式当店长"], "occupation", "店长"),
        (["我在物业上班", "现在在一家快递公司做调度"], "occupation", "调度"),
        (["I'm a cashier", "just got hired as a paralegal"], "occupation", "paralegal"),
        (["五一打算去潮汕", "那边太热了，我爸受不了，改去丽江吧"], "goal", "丽江"),
        (
            ["thinking Crete for our anniversary", "Crete is full. Malta is the plan now"],
            "goal",
            "Malta",
        ),
        (["我住在常州", "今年暑假带着孩子搬去大连了"], "city", "大连"),
        (["I live in Reno", "just swapped Reno for Halifax"], "city", "Halifax"),
        (["我一直是生酮饮食", "现在改成高纤维饮食了"], "diet", "高纤维饮食"),
        (["I'm vegetarian", "well, fully vegan since spring"], "diet", "vegan"),
    ],
)
def test_a_change_said_another_way_replaces_the_value(
    messages: list[str], key: str, value: Any
) -> None:
    assert after(*messages)[key] == value


@pytest.mark.parametrize(
    ("messages", "budget"),
    [
        (["looking for a kayak, somewhere from 700 to 1.1k"], money(1100, "USD")),
        (["want a rice cooker, £30-£45"], money(45, "GBP")),
        (["budget €2,000 for the trip", "ok let's drop it to 1,650"], money(1650, "EUR")),
        (["a standing desk, 400 bucks max", "fine, 520 it is"], money(520, "USD")),
    ],
)
def test_budget_forms(messages: list[str], budget: dict[str, Any]) -> None:
    assert after(*messages)["budget_limit"] == budget


def test_a_place_jieba_reads_as_a_name_is_still_a_city() -> None:
    assert after("国庆想去桂林转转")["goal"] == "桂林"
    assert after("我在三明治店打工").get("city") is None


# --- households ------------------------------------------------------------------------------


def test_a_household_listed_at_once() -> None:
    got = after("我们家四口人：我、我先生，还有儿子乐乐和闺女")
    assert got["family"] == ["先生", "儿子: 乐乐", "闺女"]
    got = after("it's just me and my son Eli, plus our beagle Scout")
    assert got["family"] == ["son: Eli"] and got["pets"] == ["beagle: Scout"]
    got = after("household: me, my partner, a rabbit called Clover and a parrot named Kiwi")
    assert got["pets"] == ["rabbit: Clover", "parrot: Kiwi"]


def test_a_pet_list_goes_on_after_a_comma() -> None:
    assert after("家里有只柯基叫馒头，还有两只仓鼠")["pets"] == ["柯基: 馒头", "两只仓鼠"]


# --- the subject chat leaves out -------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "key", "value"),
    [
        (["我喜欢爬山", "算了，现在喜欢游泳"], "likes", ["游泳"]),
        (["我喜欢看电影，不过恐怖片不喜欢"], "dislikes", ["恐怖片"]),
        (["我喜欢茶", "其实我现在只喜欢普洱"], "likes", ["普洱"]),
        (["I like jazz", "I only like blues now"], "likes", ["blues"]),
        (["I love pottery", "also love rock climbing"], "likes", ["pottery", "rock climbing"]),
        (["I love sailing", "can't stand motorboats though"], "dislikes", ["motorboats"]),
        (["我对桃子过敏", "芒果也过敏"], "allergies", ["桃子", "芒果"]),
        (
            ["for headphones I mostly care about comfort", "actually battery is what matters"],
            "focus",
            ["battery"],
        ),
        (["想买个烤箱，容量优先"], "focus", ["容量"]),
    ],
)
def test_a_statement_without_its_subject_is_the_users(
    messages: list[str], key: str, value: Any
) -> None:
    assert after(*messages)[key] == value


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("我老公说，现在喜欢钓鱼", "likes"),
        ("小王也不喜欢，", "dislikes"),
        ("我讨厌香菜，闻着就受不了", "dislikes"),
    ],
)
def test_a_left_out_subject_after_someone_else_is_not_the_user(text: str, key: str) -> None:
    assert after(text).get(key) in (None, ["香菜"])


def test_same_goes_for_adds_to_the_last_list() -> None:
    got = after("please stop recommending Zara", "same goes for H&M")
    assert got["do_not_recommend"] == ["Zara", "H&M"]


# --- a later round: corrections, withdrawals by name, lists --------------------------------


@pytest.mark.parametrize(
    ("messages", "key", "value"),
    [
        (["用法语回复我", "不好意思写错了，是荷兰语"], "language", "nl"),
        (["reply in polish please", "sorry, I meant czech"], "language", "cs"),
        (
            ["for a blender I care about noise", "nah actually the jar size matters more"],
            "focus",
            ["jar size"],
        ),
        (["I love camping, fishing, and kayaking"], "likes", ["camping", "fishing", "kayaking"]),
        (
            ["想买个剃须刀，两百以内", "好的都贵，再加点吧，两百五"],
            "budget_limit",
            money(250, "CNY"),
        ),
        (["don't recommend Ikea, mine fell apart"], "do_not_recommend", ["Ikea"]),
    ],
)
def test_corrections_and_list_forms(messages: list[str], key: str, value: Any) -> None:
    assert after(*messages)[key] == value


@pytest.mark.parametrize(
    ("messages", "key"),
    [
        (["my corgi Pippin turned 10 today", "rip pippin, we said goodbye this morning"], "pets"),
        (["I like board games", "honestly I'm so over them"], "likes"),
        (["我是外卖员", "今年考上了，现在在区里当文书"], "occupation"),
    ],
)
def test_a_change_the_rules_cannot_read_withdraws_the_old_value(
    messages: list[str], key: str
) -> None:
    assert key not in after(*messages)


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("不过榴莲还是不喜欢，味道受不了", "dislikes", ["榴莲"]),
        ("带娃出门得小心，朵朵（我女儿）吃虾过敏", "allergies", None),
    ],
)
def test_a_reason_or_a_relative_is_not_the_users_item(text: str, key: str, value: Any) -> None:
    assert after(text).get(key) == value
