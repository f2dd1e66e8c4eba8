"""The rule extractor on the ways a stated fact goes wrong: changes, someone else's facts,
what is not a statement, junk values, moves, goals, reply language, the personal keys,
retractions, continued lists and currencies.

Each class has cases in Chinese and in English, written for these tests. ``after`` feeds
messages in order the way ingest does: each message sees the facts the earlier ones left.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fact_rules import after, facts_of, money

# --- a change: the new value wins ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "amount", "currency"),
    [
        (["预算四千", "还是五千吧，四千的配置都太低了"], 5000, "CNY"),
        (["预算一万", "不对，八千就够了"], 8000, "CNY"),
        (["预算八百", "八百太少了，提到一千二"], 1200, "CNY"),
        (["My budget is about $700", "Actually make that 850"], 850, "USD"),
        (["I can spend around 300 pounds", "correction: 350"], 350, "GBP"),
        (["up to 1000 bucks", "hmm 1000 is too tight, let's say 1300"], 1300, "USD"),
    ],
)
def test_the_new_value_of_a_budget_change_wins(
    messages: list[str], amount: int, currency: str
) -> None:
    assert after(*messages)["budget_limit"] == money(amount, currency)


def test_an_increment_is_not_the_new_total() -> None:
    assert after("预算两万", "再加三千，两万三")["budget_limit"] == money(23000, "CNY")


# --- someone else's facts -------------------------------------------------------------------------


def test_another_persons_budget_is_not_the_users_chinese() -> None:
    got = after("我自己预算两千就够，我老婆的预算是三千")
    assert got["budget_limit"] == money(2000, "CNY")
    got = after("我朋友预算五千买手机，我的话三千以内")
    assert got["budget_limit"] == money(3000, "CNY")


def test_another_persons_budget_is_not_the_users_english() -> None:
    got = after("My sister's budget is $250 for her bike. Mine's closer to 400")
    assert got["budget_limit"] == money(400, "USD")


@pytest.mark.parametrize(
    ("text", "family"),
    [
        ("我老公特别讨厌香菜", ["老公"]),
        ("我女儿对牛奶过敏", ["女儿"]),
        ("my husband loves sushi", ["husband"]),
        ("My mom lives in Phoenix", ["mom"]),
        ("my son is allergic to eggs", ["son"]),
        ("My wife's birthday is May 2", ["wife"]),
    ],
)
def test_other_peoples_facts_leave_only_the_family(text: str, family: list[str]) -> None:
    assert after(text) == {"family": family}


@pytest.mark.parametrize(
    "text",
    ["他住在广州", "我同事养了一只猫", "my roommate is vegan", "my friend has a dog named Rex"],
)
def test_facts_of_people_outside_the_family_yield_nothing(text: str) -> None:
    assert after(text) == {}


def test_the_users_family_with_a_name() -> None:
    assert after("My husband Luis and I have a daughter")["family"] == [
        "husband: Luis",
        "daughter",
    ]
    assert after("我老婆叫小芸，我们有两个孩子")["family"] == ["老婆: 小芸"]
    assert after("我和爸妈带着妹妹去厦门")["family"] == ["爸妈", "妹妹"]


# --- not statements: hypotheticals, questions, quotes, pasted text -------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "如果中了大奖，预算就十万，直接买最好的",
        "要是我住在昆明就好了",
        "if I won the lottery I'd spend 40k on a watch",
        "If I lived in Lisbon I'd surf every day",
        "预算三千够吗？",
        "what's a good budget for a first guitar?",
        "我叫什么名字来着？",
        "is the keto diet healthy?",
        "素食真的健康吗？",
        "我朋友说“我最讨厌下雨天了”",
        "客服回复：建议预算控制在五千以内",
        'my brother keeps saying "I hate Fridays"',
        'Pasting the ad: "Perfect for anyone who loves camping and lives in Boise"',
        "我妈一直说我应该住在北京",
    ],
)
def test_what_is_not_the_users_statement_yields_nothing(text: str) -> None:
    assert after(text) == {} or set(after(text)) == {"family"}


def test_a_question_after_a_statement_keeps_the_statement() -> None:
    assert after("my birthday is June 9th, any restaurant ideas?")["birthday"] == "06-09"
    assert after("我对虾过敏，这道菜能吃吗？")["allergies"] == ["虾"]


def test_a_hedge_is_not_a_hypothetical() -> None:
    assert after("如果可以的话，预算控制在三千以内")["budget_limit"] == money(3000, "CNY")
    assert after("under $400 if possible")["budget_limit"] == money(400, "USD")


# --- junk values and names ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("佳能的我也挺喜欢的", "likes", ["佳能"]),
        ("我在意的点主要是噪音", "focus", ["噪音"]),
        ("我最关注的还是售后", "focus", ["售后"]),
        ("叫我阿杰就行", "name", "阿杰"),
        ("I hate them", "dislikes", None),
        ("I love it", "likes", None),
        ("那个我也喜欢", "likes", None),
        ("I like jazz, especially live shows", "likes", ["jazz"]),
        ("thanks, I like your suggestions", "likes", None),
        ("sounds good, I prefer the cheaper one", "likes", None),
        ("谢谢，我喜欢这个推荐", "likes", None),
        ("我更喜欢第一个", "likes", None),
        ("I prefer Airbnb over hotels", "likes", ["Airbnb"]),
        ("I love to cook", "likes", ["cook"]),
        ("I hate to say it, but the first one is better", "dislikes", None),
        ("别推荐大疆以外的", "do_not_recommend", None),
    ],
)
def test_values_are_what_the_user_named(text: str, key: str, value: Any) -> None:
    assert after(text).get(key) == value


# --- moves ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "city"),
    [
        (["我住在南京", "今年又调到了武汉"], "武汉"),
        (["我住在广州", "上个月搬家到佛山了"], "佛山"),
        (["I live in Boston", "we just moved to Portland"], "Portland"),
        (["I'm based in Leeds", "relocated to Glasgow in the spring"], "Glasgow"),
        (["I live in Tampa", "just got transferred to Atlanta"], "Atlanta"),
    ],
)
def test_a_move_replaces_the_city(messages: list[str], city: str) -> None:
    assert after(*messages)["city"] == city


@pytest.mark.parametrize(
    "text", ["我下个月要搬到杭州", "I'm moving to Berlin next year", "我在医院上班"]
)
def test_no_city_from_a_plan_or_a_workplace(text: str) -> None:
    assert "city" not in after(text)


# --- one-line self-introductions -----------------------------------------------------------------


def test_an_english_self_introduction() -> None:
    got = after(
        "Hey! I'm Tomas, data analyst in Lisbon. Pescatarian. "
        "Looking for a quiet dishwasher under 600 euros"
    )
    assert got == {
        "name": "Tomas",
        "occupation": "data analyst",
        "city": "Lisbon",
        "diet": "Pescatarian",
        "goal": "quiet dishwasher",
        "budget_limit": money(600, "EUR"),
    }


def test_a_chinese_self_introduction() -> None:
    got = after("大家好，我是李娜，在成都当护士，想买个投影仪，预算三千五")
    assert got == {
        "name": "李娜",
        "city": "成都",
        "occupation": "护士",
        "goal": "投影仪",
        "budget_limit": money(3500, "CNY"),
    }


# --- goals ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "goal"),
    [
        (["最近想入手一台微单"], "微单"),
        (["给我爸挑个剃须刀，预算五百"], "剃须刀"),
        (["计划国庆去云南旅游"], "云南"),
        (["想买个电饭煲", "算了，还是买个空气炸锅吧"], "空气炸锅"),
        (["I'm shopping for an espresso machine"], "espresso machine"),
        (["need a cheap gaming chair asap"], "cheap gaming chair"),
        (["We're planning a trip to Japan next spring"], "Japan"),
        (["I want to buy a tent", "actually, I'm looking for a hammock instead"], "hammock"),
        (["I work nights so I need a good eye mask"], "good eye mask"),
    ],
)
def test_goals(messages: list[str], goal: str) -> None:
    assert after(*messages)["goal"] == goal


def test_a_need_that_justifies_a_goal_is_not_the_goal() -> None:
    assert after("I'm looking for a tablet, I need the stylus support")["goal"] == "tablet"


# --- reply language ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "code"),
    [
        (["以后用韩语跟我聊吧"], "ko"),
        (["用日语回复我", "还是换成中文吧"], "zh"),
        (["reply in Spanish please", "actually English is fine"], "en"),
        (["answer in German", "nvm, French please"], "fr"),
        (["can we switch to Italian?"], "it"),
    ],
)
def test_language_changes_are_followed(messages: list[str], code: str) -> None:
    assert after(*messages)["language"] == code


@pytest.mark.parametrize("text", ["I'm learning Spanish", "my English isn't great", "我在学法语"])
def test_talk_about_a_language_is_no_reply_language(text: str) -> None:
    assert "language" not in after(text)


# --- the personal keys: diet, allergies, birthday, family, pets ----------------------------------


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("我是素食主义者", "diet", "素食"),
        ("我们家吃清真", "diet", "清真"),
        ("I've been vegetarian for years", "diet", "vegetarian"),
        ("I'm on a keto diet", "diet", "keto"),
        ("我对海鲜和花粉过敏", "allergies", ["海鲜", "花粉"]),
        (
            "I'm allergic to shellfish, dairy and gluten",
            "allergies",
            ["shellfish", "dairy", "gluten"],
        ),
        ("I have a peanut allergy", "allergies", ["peanut"]),
        ("我生日是1992年11月3号", "birthday", "1992-11-03"),
        ("我的生日是十二月一号", "birthday", "12-01"),
        ("I was born on 4 July 1985", "birthday", "1985-07-04"),
        ("my bday's the 12th of August", "birthday", "08-12"),
        ("我有两个孩子", "family", ["两个孩子"]),
        ("I'm married with three kids", "family", ["three kids"]),
        ("I have a son and a daughter", "family", ["son", "daughter"]),
        ("我养了一只橘猫，叫大橘", "pets", ["橘猫: 大橘"]),
        ("我家有两条狗", "pets", ["两条狗"]),
        ("I have a beagle called Snoopy and a parrot", "pets", ["beagle: Snoopy", "parrot"]),
        ("my cat Luna hates the vacuum", "pets", ["cat: Luna"]),
    ],
)
def test_personal_keys(text: str, key: str, value: Any) -> None:
    assert after(text)[key] == value


@pytest.mark.parametrize(
    "text",
    [
        "我儿子对牛奶过敏",
        "I'm allergic to cats",
        "I have a cat allergy",
        "我以前养过一只狗",
        "I was born in 1990",
        "my birthday is next week",
        "I used to be vegetarian",
    ],
)
def test_no_pet_or_date_where_there_is_none(text: str) -> None:
    got = after(text)
    assert not {"pets", "birthday", "diet"} & got.keys()


# --- retractions ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "known", "key"),
    [
        ("不过我现在已经不吃素了", {"diet": "素食"}, "diet"),
        ("I'm not vegetarian anymore", {"diet": "vegetarian"}, "diet"),
        ("I quit being vegan last month", {"diet": "vegan"}, "diet"),
        ("我的猫去年走了", {"pets": ["猫"]}, "pets"),
        ("the dog passed away in March", {"pets": ["dog: Rex"]}, "pets"),
    ],
)
def test_a_withdrawal_is_a_retraction(text: str, known: dict[str, Any], key: str) -> None:
    fact = facts_of(text, known=known)[key]
    assert fact.retracts is True


def test_a_withdrawal_of_one_item_leaves_the_rest() -> None:
    got = after("I'm not allergic to cats anymore", known={"allergies": ["peanuts", "cats"]})
    assert got["allergies"] == ["peanuts"]
    pets = after("狗狗前几天去世了", known={"pets": ["两只猫", "狗"]})
    assert pets["pets"] == ["两只猫"]


def test_a_pet_that_is_gone_is_not_a_pet() -> None:
    assert "pets" not in after("we had a rabbit but he died last spring")
    assert "pets" not in after("我家以前有只兔子，去年死了")


# --- lists that lean on an earlier statement -----------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "key", "value"),
    [
        (["我讨厌下雨天", "还有堵车，真的受不了"], "dislikes", ["下雨天", "堵车"]),
        (
            ["I care most about battery life", "oh and weight too"],
            "focus",
            ["battery life", "weight"],
        ),
        (["我喜欢简约风，黑白灰那种"], "likes", ["简约风", "黑白灰"]),
        (["My top priority is safety, then comfort"], "focus", ["safety", "comfort"]),
        (["性价比最重要，其次是外观"], "focus", ["性价比", "外观"]),
        (
            ["don't recommend Apple", "also no Samsung please"],
            "do_not_recommend",
            ["Apple", "Samsung"],
        ),
    ],
)
def test_lists_continued(messages: list[str], key: str, value: list[str]) -> None:
    assert after(*messages)[key] == value


def test_a_name_typo_is_corrected() -> None:
    assert after("我叫李雷", "写错了，是李蕾")["name"] == "李蕾"
    assert after("My name is Jon", "sorry, it's John")["name"] == "John"


# --- currencies -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "amount", "currency"),
    [
        ("Looking for a laptop under 90k rupees", 90000, "INR"),
        ("预算500欧", 500, "EUR"),
        ("spend no more than 600 quid", 600, "GBP"),
        ("预算：5000", 5000, "CNY"),
        ("预算5000-8000", 8000, "CNY"),
        ("准备在香港买手表，预算3万5港币", 35000, "HKD"),
    ],
)
def test_currencies_and_forms(text: str, amount: int, currency: str) -> None:
    assert after(text)["budget_limit"] == money(amount, currency)


@pytest.mark.parametrize("text", ["想买把菜刀，预算200", "想买北欧风的沙发，预算5000"])
def test_a_word_that_only_looks_like_a_currency(text: str) -> None:
    assert after(text)["budget_limit"]["currency"] == "CNY"


def test_an_unknown_currency_is_not_guessed() -> None:
    assert "budget_limit" not in after("budget is 500 XYZ")
