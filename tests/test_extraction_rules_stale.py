"""Mechanisms that keep the rule extractor honest on text it was not written for.

Sentences here are written for these tests, in Chinese and English: a change the rules
notice but cannot read ends the old value; pasted assistant text yields nothing; a bare
amount keeps the known budget's currency; an elliptical echo ("焦糖的也爱") adds to a
list only the user already has; a few general phrasings of moves, goals and requests.
"""

from __future__ import annotations

from typing import Any

import pytest

from memstack.ingest.extraction.rules import has_turn_word
from tests.fact_rules import after, money

# --- a change the rules cannot read ends the old value -------------------------------------------


@pytest.mark.parametrize(
    ("messages", "key"),
    [
        (("我是一名会计", "更正一下，早就不干那行了，现在在老家开了家民宿当老板"), "occupation"),
        (
            ("I'm a teacher", "left the school, started a new job now at the harbour"),
            "occupation",
        ),
        (("我住在苏州", "现在搬走了，房子也卖了"), "city"),
        (("I live in Leeds", "moved away in spring, so not living there now"), "city"),
        (("预算三千以内", "再多给点预算吧，看情况"), "budget_limit"),
        (("I'm getting a kettle", "the kettle's out, found one in the attic"), "goal"),
        (("想买个空气炸锅", "空气炸锅不买了，家里有烤箱"), "goal"),
    ],
)
def test_an_unread_change_does_not_leave_the_old_value_current(
    messages: tuple[str, ...], key: str
) -> None:
    assert key not in after(*messages)


@pytest.mark.parametrize(
    "messages",
    [
        ("我是一名会计", "今天加班到很晚，好累"),
        ("I'm a teacher", "now I need a new lamp for my desk"),
        ("我住在苏州", "现在想买个电饭煲"),
        ("预算三千以内", "刚看到一款电饭煲很好看"),
    ],
)
def test_talk_without_a_change_of_that_key_keeps_it(messages: tuple[str, ...]) -> None:
    first = after(messages[0])
    assert after(*messages).items() >= first.items()


@pytest.mark.parametrize(
    ("messages", "code"),
    [
        (("reply in German please", "no wait, Dutch is what I meant"), "nl"),
        (("Spanish answers from now on", "I asked for Spanish, but plain French from here"), "fr"),
        (("请用日语回复", "不对，改用韩语回答吧"), "ko"),
    ],
)
def test_a_corrected_reply_language_is_read(messages: tuple[str, ...], code: str) -> None:
    assert after(*messages)["language"] == code


def test_a_language_named_in_passing_does_not_touch_the_reply_language() -> None:
    assert after("reply in English please", "I'm learning Korean now")["language"] in {"en", None}


@pytest.mark.parametrize(
    ("text", "code"),
    [("Turkish replies from now on, please", "tr"), ("Polish answers only, thanks", "pl")],
)
def test_a_language_before_replies_is_a_request(text: str, code: str) -> None:
    assert after(text)["language"] == code


# --- pasted assistant text ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "Pasting your previous reply: 'Assistant: since you're in Oslo with a budget of 400 euros, "
        "I'd go for the cheaper one' — none of that is true",
        'copying what you wrote: "AI: you live in Perth and love hiking"',
        "你上次的回答是这样的：“助手：既然你住在杭州，预算五千，我建议……”这不对",
    ],
)
def test_quoted_assistant_text_yields_nothing(text: str) -> None:
    assert after(text) == {}


def test_an_apostrophe_inside_a_word_does_not_end_a_quote() -> None:
    assert "city" not in after("my friend wrote 'I'd move to Lisbon if I were you' lol")


# --- budgets --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "value"),
    [
        (
            ("a new mattress, 30,000 rupees and not a rupee more", "fine, I'll stretch to 35k"),
            money(35000, "INR"),
        ),
        (("Looking for a desk, ceiling is 300 pounds", "wait no, 350"), money(350, "GBP")),
        (("想买个键盘，八百块以内", "再多给点空间，一千也行"), money(1000, "CNY")),
        (("找个背包，别超过五十欧", "其实六十也可以"), money(60, "EUR")),
        (("a lamp, 60 dollars at the very most",), money(60, "USD")),
    ],
)
def test_budget_cues_and_a_bare_amount_keeps_the_known_currency(
    messages: tuple[str, ...], value: dict[str, Any]
) -> None:
    assert after(*messages)["budget_limit"] == value


# --- ellipsis adds only to a list the user has ---------------------------------------------


@pytest.mark.parametrize(
    ("messages", "key", "value"),
    [
        (("我爱榴莲", "山竹的也爱"), "likes", ["榴莲", "山竹"]),
        (
            ("I don't like loud bars", "not a fan of karaoke either"),
            "dislikes",
            ["loud bars", "karaoke"],
        ),
        (("别给我推荐塑料的，铝的也不要",), "do_not_recommend", ["塑料", "铝"]),
    ],
)
def test_an_echo_adds_to_the_earlier_list(
    messages: tuple[str, ...], key: str, value: list[str]
) -> None:
    assert after(*messages)[key] == value


@pytest.mark.parametrize("text", ["山竹的也爱", "not a fan of karaoke either"])
def test_an_echo_with_nothing_before_it_is_left_alone(text: str) -> None:
    assert after(text) == {}


def test_not_at_all_is_emphasis_not_also() -> None:
    facts = after("我一点也不喜欢香菜的味道")
    assert facts.get("dislikes") == ["香菜的味道"] and "likes" not in facts


# --- general phrasings of goals, moves and suppositions ------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("想弄个鱼缸放客厅", "goal", "鱼缸"),
        ("我自己就想买双跑鞋", "goal", "跑鞋"),
        ("想趁双十一买台洗碗机", "goal", "洗碗机"),
        ("I've been eyeing kayaks for a while", "goal", "kayaks"),
        ("Hunting for a standing desk, nothing fancy", "goal", "standing desk"),
        ("从西安落户成都了", "city", "成都"),
        ("说来话长：毕业后漂了几年，现在算是在厦门扎根了", "city", "厦门"),
        ("grew up in Cork but Dublin's been home since 2019", "city", "Dublin"),
        ("my employer sent me off to Lyon in March", "city", "Lyon"),
        ("florist living in Bergen, vegan", "city", "Bergen"),
    ],
)
def test_general_goal_and_move_phrasings(text: str, key: str, value: str) -> None:
    assert after(text)[key] == value


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("我想弄清楚这个问题", "goal"),
        ("想买点东西犒劳一下自己", "goal"),
        ("Say I moved to Calgary, would I need a block heater?", "city"),
        ("My sister's home is Madrid", "city"),
    ],
)
def test_vague_or_supposed_statements_stay_out(text: str, key: str) -> None:
    assert key not in after(text)


@pytest.mark.parametrize(
    ("messages", "key"),
    [
        (("我是一名会计", "现在工作好累，老板天天让我加班"), "occupation"),
        (("I'm a teacher", "I'm now a member of the climbing gym"), "occupation"),
        (("I live in Leeds", "I'm home now, finally"), "city"),
        (("预算三千以内", "再多说一句，颜色要白的"), "budget_limit"),
        (("I'm looking for a phone", "the phone case is sorted, thanks"), "goal"),
        (("想买个手机", "手机壳买到了"), "goal"),
    ],
)
def test_near_misses_of_a_change_keep_the_value(messages: tuple[str, ...], key: str) -> None:
    assert key in after(*messages)


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("大家好，本人司马青，在成都做会计", "name", "司马青"),
        ("Tomasz's the name, nurse in Gdansk", "name", "Tomasz"),
        ("and please, nothing from Temu", "do_not_recommend", ["Temu"]),
        ("I'm officially a pharmacist now", "occupation", "pharmacist"),
        ("我吃素，另外对花生过敏", "allergies", ["花生"]),
        ("我在青岛当健身教练", "occupation", "健身教练"),
        ("This is Ola, UX writer living in Porto", "occupation", "UX writer"),
    ],
)
def test_general_intro_and_list_phrasings(text: str, key: str, value: Any) -> None:
    assert after(text)[key] == value


@pytest.mark.parametrize(
    ("text", "key"), [("本人觉得，还行", "name"), ("nothing from Ikea fits", "do_not_recommend")]
)
def test_intro_cues_need_a_value_of_their_kind(text: str, key: str) -> None:
    assert key not in after(text)


@pytest.mark.parametrize(
    ("text", "code"),
    [("以后能不能都用西班牙语？我在学", "es"), ("可不可以用德语回答", "de")],
)
def test_a_polite_request_for_a_language_is_a_request(text: str, code: str) -> None:
    assert after(text)["language"] == code


@pytest.mark.parametrize("text", ["你会说日语吗？", "他们能不能用英语交流？"])
def test_asking_about_a_language_is_no_request(text: str) -> None:
    assert "language" not in after(text)


@pytest.mark.parametrize("text", ["想了想，黑色更好看", "转念一想，先租一台试试"])
def test_reconsidering_is_a_turn_word(text: str) -> None:
    assert has_turn_word(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (
            "家里三只猫：一只橘猫叫可乐，一只黑猫叫煤球，一只白猫叫汤圆",
            ["橘猫: 可乐", "黑猫: 煤球", "白猫: 汤圆"],
        ),
        ("我养了两只猫，一只狗叫旺财", ["两只猫", "狗: 旺财"]),
        (
            "we have two cats, a tabby called Miso and a tuxedo cat called Oreo",
            ["tabby: Miso", "tuxedo cat: Oreo"],
        ),
        ("I have two cats and a dog called Rex", ["two cats", "dog: Rex"]),
    ],
)
def test_a_pet_count_heads_the_pets_it_lists(text: str, value: list[str]) -> None:
    assert after(text)["pets"] == value
