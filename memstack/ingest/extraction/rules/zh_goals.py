"""Chinese rules for the goal: what the user is shopping for or planning a trip to.

A goal is read from a plan or a purchase verb ("想买", "入手个", "打算去…玩"), and from a
switch ("改成…", "换去…") only while a goal is in play.
"""

from __future__ import annotations

import re

from memstack.ingest.extraction.rules.engine import SWITCHED_GOAL, WEAK_GOAL, Rule, rule
from memstack.ingest.extraction.rules.zh_words import CLASSIFIER, LANG_ZH, as_thing, place, tags


def _goal(m: re.Match[str], sentence: str) -> str | None:
    rest = sentence[m.end() :]
    # "一台5000左右的电脑": the price is the budget's business, the goal is what is bought.
    rest = re.sub(
        r"^[\d.一二两三四五六七八九十百千万kKw]+(?:块|元)?(?:左右|以内|以下)?的", "", rest
    )
    rest = re.sub(r"^一?下", "", rest)  # "帮我推荐一下": no object yet
    # "通勤用的电动滑板车": what it is for, then the thing
    rest = re.sub(r"^[\u4e00-\u9fff]{1,4}用的", "", rest)
    v = rest[: _goal_end(rest)]
    if re.search(r"[\u4e00-\u9fff]", v):
        v = as_thing(v) or ""  # "换台新的": "新" names no thing
    return v if 2 <= len(v) <= 10 or re.fullmatch(r"[A-Za-z]\w*", v) else None


_GOAL_STOP_ZH = re.compile(
    r"[\s，,。.!！?？;；、~～]|给|送|用|放|穿|带|我|你|预算|左右|以内|以下|的话|吧|了|呢|啊|呀|来|去"
    r"|比较|最好|要|想|可以|能|推荐|怎么|什么|哪|有没有|之类|预计|大概|差不多|玩|拍照|最(?!新)|当(?:礼物|生日)"
    r"|出去|出门"
)


_LATIN_SPACE = re.compile(r"[A-Za-z0-9] [A-Za-z0-9]")


def _goal_end(rest: str) -> int:
    """Where the goal in ``rest`` ends: at the first stop word. A stop character inside a
    noun ("智能花盆", "婴儿用品", "未来") does not end it; inside a verb ("包送") it does."""
    window = rest[:24]
    inside: set[int] = set()
    pos = 0
    for word, flag in tags(window):
        if flag[:1] in ("n", "t"):
            inside.update(range(pos + 1, pos + len(word)))
        pos += len(word)
    for m in _GOAL_STOP_ZH.finditer(window):
        # "Surface Pro": a space between two Latin words is inside a name
        if m.start() not in inside and not _LATIN_SPACE.match(window, m.start() - 1):
            return m.start()
    return len(window)


# What a chat verb can take that is not shopping: "换个思路", "改成五千", "换成英文".
_NOT_GOODS = re.compile(
    r"^(?:思路|话题|方式|方法|说法|角度|问题|时间|地方|工作|心情|口味|位置|题|个|教训|经验|心态|环境"
    r"|发型|名字|号|姿势|活法|朋友|人|孩子|娃|同事)"
    rf"|^[\d.一二两三四五六七八九十百千万kKw]+(?:块|元)?$|^(?:{LANG_ZH})$|预算"
)


# What one goes somewhere to do: "去腾冲玩", "去维也纳听音乐会", "去呼伦贝尔骑马".
_TRIP_VERBS = (
    r"旅游|旅行|玩|度假|度蜜月|自驾|看看|转转|逛逛|走走|听|看|骑|滑雪|潜水|爬山|徒步|露营|冲浪"
    r"|拍|吃|泡温泉|过年|过节|跨年"
)


def _trip(m: re.Match[str], sentence: str) -> str | None:
    """A place the user is going to, read only from a sentence not about the past."""
    if re.search(r"去年|上次|之前|以前|那次|小时候", sentence):
        return None
    return place(m.group("p"), strict=True)


def _travel(m: re.Match[str], sentence: str) -> str | None:
    return place(m.group("p"), strict=False)


RULES: tuple[Rule, ...] = (
    rule(
        "goal",
        r"(?:我|^|(?<=[，,\s]))(?:也|还|现在|最近|正在|一直|自己|就|又|转而|这次|所以|今年|明年|下个月|周末"
        r"|过年|年底|双十一|七夕|其实)*"
        r"(?:想|要|打算|准备|计划|需要|得|想要|还是)(?:先|再|直接|干脆|顺手|赶紧)?"  # "想先买…"
        r"(?:给[^，,。]{1,6}?|在[^，,。]{1,6}?|帮[^，,。]{1,4}?|为[^，,。]{1,4}?|趁[^，,。]{1,6}?)?"
        rf"(?:(?:买|换|挑|选|入手|购买|配|找|订|租(?!屋|房)|添置|置办|送(?=[^，,。]{{0,4}}?一?[台部个款辆套双件只张把条副]))(?!成|掉|到|回)"
        # Loose verbs ("弄个", "添台", "搭个") name a purchase only with a classifier after them.
        r"|(?:添|入|弄|整|搞|搭|装|带)(?=一?[台部个辆套双件只张把条副款])"
        # "想直接上洗地机", "想收台二手摩托": chat's verbs for buying, after a wish
        r"|(?:上|收|冲)(?=一?[台部个辆套双件只张把条副款]|[^，,。了]{2,8}(?:了|吧|$)))"
        rf"{CLASSIFIER}",
        0.8,
        value=_goal,
        reject=_NOT_GOODS,
    ),
    rule(
        "goal",
        r"(?:我|^|(?<=[，,\s]))(?:也|还|现在|最近|一直)?(?:在|正在)(?:找|物色|挑|选|看)"
        rf"(?=一?[台部个款辆套双件只张把条副]){CLASSIFIER}",
        0.8,
        value=_goal,
    ),
    # Comparing models is shopping: "看了几款二手车", "最近在看几款跑鞋".
    rule(
        "goal",
        r"(?:我|^|(?<=[，,\s]))(?:最近|这两天|这几天|也|还)*(?:看了|在看|正在看|对比了|比较了)"
        r"(?:好)?(?:几|两|三)(?:款|台|个|辆|部|家)",
        0.8,
        statements_only=True,
        value=_goal,
    ),
    rule(
        "goal",
        rf"(?:帮我|给我|替我|帮忙)(?:[^，,。]{{0,4}}?)(?:选|挑|推荐|找|配){CLASSIFIER}",
        0.8,
        value=_goal,
    ),
    rule("goal", r"^(?:买|选|挑)(?=[^，,。]{1,8}?(?:我|的话|时|最|主要))", 0.8, value=_goal),
    rule("goal", rf"求推荐{CLASSIFIER}", 0.8, value=_goal),
    rule(
        "goal",
        r"(?:我|^|(?<=[，,\s]))(?:也|还|现在|最近)?(?:想要|需要|要)(?=一?[台部个款辆套双件只张把条副])"
        rf"{CLASSIFIER}",
        WEAK_GOAL,
        statements_only=True,
        value=_goal,
    ),
    rule(
        "goal",
        r"(?:计划|打算|准备|想)(?:[^，,。去]{0,6}?)去(?P<p>[^，,。]{2,8}?)"
        rf"(?:{_TRIP_VERBS}|(?=$|[，,。！!]))",
        0.8,
        value=_travel,
        claims=False,  # "打算和老婆去三亚": the company is the family rule's
    ),
    # Chat drops the "我想": "换台洗衣机", "入手个相机". A classifier after the verb keeps
    # "换个思路" out only together with the reject list.
    rule(
        "goal",
        rf"(?:^|(?<=[，,\s]))(?:先|再|准备)?(?:在[^，,。]{{1,6}}?|给(?:我)?自己)?(?:换|买|入手|添|挑|整|订|配)"
        rf"(?=一?[台部个辆套双件只张把条块副款]){CLASSIFIER}",
        0.8,
        statements_only=True,
        value=_goal,
        reject=_NOT_GOODS,
    ),
    # A trip without a plan word: "去泰国玩七天", "下个月去云南旅游" (not "去年去…玩过").
    rule(
        "goal",
        r"(?:^|(?<=[，,\s]))(?:下个?月|下周|今年|明年|暑假|寒假|国庆|五一|春节|过年)?"
        rf"去(?P<p>[^，,。]{{2,6}}?)(?:{_TRIP_VERBS})(?![了过的])",
        0.8,
        statements_only=True,
        value=_trip,
    ),
    # A switch of destination: "换去西安吧", "改去大理看看"; kept only when a goal is known.
    rule(
        "goal",
        r"(?:^|(?<=[，,\s]))(?:那|那就|还是|干脆)?(?:换去|改去)(?P<p>[^，,。]{2,8})",
        SWITCHED_GOAL,
        statements_only=True,
        value=_trip,
        # "我妈受不了，改去北海吧": the switch changes the user's own plan, whoever the
        # clause before it was about
        any_subject=True,
    ),
    # The goal named as such: "现在目标变成折叠晾衣架了", "目标是一台投影仪".
    rule(
        "goal",
        rf"(?:我的?|现在|所以|那)*目标(?:就)?(?:变成|改成|换成|是|就是)(?:了)?{CLASSIFIER}",
        0.8,
        statements_only=True,
        value=_goal,
        reject=_NOT_GOODS,
    ),
    # A switch of goal: "改成冲牙器吧", "还是买扫地机吧"; kept only when a goal is known.
    rule(
        "goal",
        r"(?:^|(?<=[，,\s]))(?:那|那就|算了|看了看|想了想|想来想去|思来想去|最后|最终|其实)?"
        rf"(?:改成|换成|改买|还是买|还是入|还是选|还是上|改为){CLASSIFIER}",
        SWITCHED_GOAL,
        statements_only=True,
        value=_goal,
        reject=_NOT_GOODS,
        any_subject=True,
    ),
)
