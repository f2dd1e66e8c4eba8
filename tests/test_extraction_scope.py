"""The general readings behind precision: what is not the user's statement (code,
transcripts, forwards, sarcasm, denial), what no longer holds (the past, an origin, a
trip, a move to come), slips corrected in the same message, withdrawals of any key,
names of pets and relatives however introduced, amounts in words and currencies by
name. Each pair of sentences here was read wrongly before these readings existed."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fact_rules import after, money

ABSENT = object()

CASES: list[tuple[tuple[str, ...], str, Any]] = [
    # code and pasted data
    (("I set `budget = 900` in the script",), "budget_limit", ABSENT),
    (("my config:\nbudget: 900\ncity: Paris",), "city", ABSENT),
    (('{"city": "Oslo", "budget": 400}',), "budget_limit", ABSENT),
    (("我在脚本里写了 budget=3000",), "budget_limit", ABSENT),
    (("forwarded from the family chat:\n[Mum]: we're in Zakopane till the 20th",), "city", ABSENT),
    (("I live in Lyon. Fwd: I moved to Paris",), "city", "Lyon"),
    # sarcasm and denial
    (("love Mondays 🙄",), "likes", ABSENT),
    (("I just LOVE budget airlines 🙄🙄 anyway I'm vegetarian",), "diet", "vegetarian"),
    (
        ("I love waiting 40 minutes for my oven to preheat. best part of my day 🙄",),
        "likes",
        ABSENT,
    ),
    (("不是我不喜欢韩餐哈，是我对芝麻过敏",), "dislikes", ABSENT),
    # slips corrected in the message
    (("I'm in Lyon, sorry, I meant Lille",), "city", "Lille"),
    (("I live in Gdańsk — sorry, typo brain, I mean Gdynia.",), "city", "Gdynia"),
    (("以后用日语回复我吧，啊不，韩语",), "language", "ko"),
    (("预算五百，打错了，六百",), "budget_limit", money(600, "CNY")),
    (("我叫林可，生日是7月12号，啊不是，12月7号",), "birthday", "12-07"),
    (("can you reply in French from now on? — wait no, Spanish!!",), "language", "es"),
    # the past, an origin, a trip, a move to come
    (("I used to live in Leeds but moved to York",), "city", "York"),
    (("grew up in Leeds, live in York now",), "city", "York"),
    (("我是呼和浩特人，不过在卡托维兹待了快五年了",), "city", "卡托维兹"),
    (("这周在呼和浩特出差",), "city", ABSENT),
    (("以前住在上海，现在搬到杭州了",), "city", "杭州"),
    (("我在大连，在一家外企做HR",), "city", "大连"),
    (("I live in Paris", "I was a nurse, retired in May"), "occupation", ABSENT),
    (("I'm a line cook", "well, WAS a line cook. quit yesterday"), "occupation", ABSENT),
    (("我是老师", "我以前是老师，现在退休了"), "occupation", ABSENT),
    # withdrawals of any key
    (("I live in Reno", "we left Reno in june"), "city", ABSENT),
    (("住在延吉", "延吉以后应该不会回去住了"), "city", ABSENT),
    (
        ("my wife Karolina and I", "well. ex-wife. the divorce was finalised on Monday"),
        "family",
        ABSENT,
    ),
    (("I'm really into running", "I've fallen out of love with running"), "likes", ABSENT),
    (("Planning a trip to Tromsø", "not travelling anywhere this winter."), "goal", ABSENT),
    (("预算五千", "不设上限了"), "budget_limit", ABSENT),
    (("家里那只虎皮鹦鹉叫阿福", "前天开窗没注意飞走了，估计回不来了"), "pets", ABSENT),
    # lists that grow
    (
        ("please don't recommend whisky tours", "also no ghost tours"),
        "do_not_recommend",
        ["whisky tours", "ghost tours"],
    ),
    (("挑笔记本我主要看重续航", "另外重量也很关键"), "focus", ["续航", "重量"]),
    (("我喜欢游泳和跑步，还有瑜伽",), "likes", ["游泳", "跑步", "瑜伽"]),
    (("I'm allergic to penicillin and to cats",), "allergies", ["penicillin", "cats"]),
    (
        ("my hobbies are rock climbing and trail running",),
        "likes",
        ["rock climbing", "trail running"],
    ),
    # pets and relatives by name
    (
        ("I've got two rescue greyhounds, Luna and Blitz",),
        "pets",
        ["rescue greyhound: Luna", "rescue greyhound: Blitz"],
    ),
    (("Biscuit, my golden retriever, loves the beach",), "pets", ["golden retriever: Biscuit"]),
    (("养了两只巴西龟，一只叫大宝一只叫二宝",), "pets", ["巴西龟: 大宝", "巴西龟: 二宝"]),
    (("我一个人住，就一只金毛作伴，它叫可乐",), "pets", ["金毛: 可乐"]),
    (
        ("I'm married, wife's name is Aiko, and we have a daughter, Hana",),
        "family",
        ["daughter: Hana", "wife: Aiko"],
    ),
    (("我有个儿子叫乐乐",), "family", ["儿子: 乐乐"]),
    (("my friend has a dog named Rex",), "pets", ABSENT),
    # amounts in words, currencies by name
    (("I can spend twelve hundred bucks",), "budget_limit", money(1200, "USD")),
    (("the cap for the new faucet is like half a grand",), "budget_limit", money(500, "USD")),
    (("budget 1k-1.5k for a laptop",), "budget_limit", money(1500, "USD")),
    (("Budget for the worktops is £2,000-£2,500",), "budget_limit", money(2500, "GBP")),
    (("max 80 lari a session",), "budget_limit", money(80, "GEL")),
    (("I'm thinking 3000 zł max",), "budget_limit", money(3000, "PLN")),
    (("不超过200镑",), "budget_limit", money(200, "GBP")),
    (("budget around 6,000 pesos",), "budget_limit", ABSENT),
    (("预算是不是至少得三千？",), "budget_limit", ABSENT),
]


@pytest.mark.parametrize(("messages", "key", "value"), CASES)
def test_reading(messages: tuple[str, ...], key: str, value: Any) -> None:
    got = after(*messages)
    if value is ABSENT:
        assert key not in got, got
    else:
        assert key in got, got
        want = value if not isinstance(value, list) else sorted(value)
        have = got[key] if not isinstance(got[key], list) else sorted(got[key])
        assert have == want
