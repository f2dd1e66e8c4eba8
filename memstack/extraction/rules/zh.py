"""Chinese rules for text-valued and list-valued keys.

Chinese drops subjects and fronts objects freely ("佳能的我也挺喜欢的", "淘宝也别推荐"),
so besides "我 + verb + object" most keys have a fronted form. Place names are cut with
jieba's part-of-speech tags: "搬到佛山了" must yield 佛山, not 佛山了, and "在医院上班"
must not yield a city.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from typing import Any

from memstack.extraction.rules.engine import NICKNAME, SWITCHED_GOAL, WEAK_GOAL, Rule, cut, rule
from memstack.extraction.rules.lexicon import (
    OCCUPATION_ZH,
)
from memstack.extraction.rules.sentences import other_subject
from memstack.extraction.vocabulary import LANGUAGES

CJK = r"[\u4e00-\u9fff·]"
ADV = (
    r"(?:真的|一直|实在|特别|非常|很|比较|最|也|还|其实|都|更|还是|挺|蛮|现在|目前|向来|超级?|平时"
    r"|本来就?|一点儿?|压根儿?|根本)*"
)
END = r"(?=$|[\s，,。.!！?？;；、~～]|今年|住在|住|来自|从事|在|是|的|了|吧|啊|呀|哦|就|哈|呢)"
# After a job: "我是老师的女儿" names no job.
_JOB_END = r"(?=$|[\s，,。.!！?？;；、~～]|今年|住在|住|来自|在|了|吧|啊|呀|哦|哈|呢)"
# The user as subject, alone or with others ("我和老婆都喜欢日料").
ME = r"(?:我们?|我(?:和|跟)[^，,。我]{1,5}?(?=都|也|一起))"
_LANG = "|".join(sorted((w for w in LANGUAGES if re.search(r"[\u4e00-\u9fff]", w)), key=len)[::-1])
_CLASSIFIER = r"(?:一|两|几)?(?:些|[台部个款辆套双件只张把条块副本])?"
_LEAD = re.compile(r"^(?:其实|不过|还有|另外|那么|就是|然后|而且|对了|哦|嗯|还|也|但是?|可是)+")

# --- jieba, loaded on first use: the CLI must start fast -------------------------------------

_lock = threading.Lock()
_posseg: Any = None


@lru_cache(maxsize=4096)
def tags(text: str) -> tuple[tuple[str, str], ...]:
    """jieba's words and part-of-speech tags for ``text`` (ns place, nr person ...)."""
    global _posseg
    if _posseg is None:
        with _lock:
            if _posseg is None:
                import logging

                import jieba
                import jieba.posseg

                jieba.setLogLevel(logging.WARNING)
                _posseg = jieba.posseg
    return tuple((p.word, p.flag) for p in _posseg.cut(text))


# Nouns that name where someone is without naming a town.
_NOT_PLACES = frozenset(
    "这里 那里 这边 那边 家里 老家 附近 国外 外地 城里 乡下 农村 市区 郊区 市中心 学校 公司 宿舍 "
    "一起 新家 楼上 楼下 单位 医院 工厂 店里 海边 山里 南方 北方 国内 大城市 小城市 "
    "一线城市".split()
)


def place(text: str, *, strict: bool) -> str | None:
    """The place that ``text`` starts with. ``strict``: only a word jieba tags as a place
    (after "在X上班", where X may as well be 医院); otherwise any noun that is not a
    generic location (after "住在", which only takes places)."""
    m = re.match(r"[A-Z][A-Za-z]+(?:\s[A-Z][A-Za-z]+)?", text)
    if m:
        return m.group()
    words = tags(text[:12])
    if not words:
        return None
    word, flag = words[0]
    if len(word) < 2 or word in _NOT_PLACES or not re.fullmatch(r"[\u4e00-\u9fff]+", word):
        return None
    if flag == "ns" or (not strict and flag[:1] in ("n", "s", "d", "j")):
        return word
    return None


# --- value builders --------------------------------------------------------------------------


def _fronted(m: re.Match[str], sentence: str) -> str | None:
    """The object put before the verb: "佳能的我也挺喜欢的" → "佳能"."""
    v = _LEAD.sub("", m.group("v")).strip()
    v = re.sub(r"(?:的|呢|吧|啊)+$", "", v)
    return v or None


def _person(m: re.Match[str], sentence: str) -> str | None:
    """ "我是李娜": a name only when jieba reads the words as one (我是学生 is no name)."""
    words = tags(m.group("v"))
    return m.group("v") if len(words) == 1 and words[0][1] in ("nr", "nrt", "nrfg") else None


def _proper_name(m: re.Match[str], sentence: str) -> str | None:
    """After a self-reference ("本人X，"): a name when jieba reads only proper nouns there
    (it splits rare names into surname and place, but "本人觉得" is a verb)."""
    words = tags(m.group("v"))
    return (
        m.group("v") if words and all(f in ("nr", "nrt", "nrfg", "ns") for _, f in words) else None
    )


def _same_speaker(m: re.Match[str], sentence: str) -> str | None:
    """The rest of a subjectless clause, if the sentence opened with the user speaking."""
    opening = sentence[: m.start()]
    opener = r"\W*(?:(?:大家好|你好|您好|嗨|哈喽)\W*)?(?:我|其实我|不过我|但我)"
    # At the start of a sentence the speaker is the user ("最讨厌排队了").
    if opening.strip() and (not re.match(opener, opening) or other_subject(opening)):
        return None
    return cut(sentence[m.end() :]) or None


def _place_after(strict: bool) -> Any:
    def value(m: re.Match[str], sentence: str) -> str | None:
        return place(sentence[m.end() :], strict=strict)

    return value


def _goal(m: re.Match[str], sentence: str) -> str | None:
    rest = sentence[m.end() :]
    # "一台5000左右的电脑": the price is the budget's business, the goal is what is bought.
    rest = re.sub(
        r"^[\d.一二两三四五六七八九十百千万kKw]+(?:块|元)?(?:左右|以内|以下)?的", "", rest
    )
    rest = re.sub(r"^一?下", "", rest)  # "帮我推荐一下": no object yet
    v = rest[: _goal_end(rest)]
    return v if 2 <= len(v) <= 10 or re.fullmatch(r"[A-Za-z]\w*", v) else None


_GOAL_STOP_ZH = re.compile(
    r"[\s，,。.!！?？;；、~～]|给|送|用|放|穿|带|我|你|预算|左右|以内|以下|的话|吧|了|呢|啊|呀|来|去"
    r"|比较|最好|要|想|可以|能|推荐|怎么|什么|哪|有没有|之类|预计|大概|差不多|玩"
)


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
        if m.start() not in inside:
            return m.start()
    return len(window)


# What a chat verb can take that is not shopping: "换个思路", "改成五千", "换成英文".
_NOT_GOODS = re.compile(
    r"^(?:思路|话题|方式|方法|说法|角度|问题|时间|地方|工作|心情|口味|位置|题|个|教训|经验|心态|环境"
    r"|发型|名字|号|姿势|活法)"
    rf"|^[\d.一二两三四五六七八九十百千万kKw]+(?:块|元)?$|^(?:{_LANG})$|预算"
)


def _trip(m: re.Match[str], sentence: str) -> str | None:
    """A place the user is going to, read only from a sentence not about the past."""
    if re.search(r"去年|上次|之前|以前|那次|小时候", sentence):
        return None
    return place(m.group("p"), strict=True)


def _travel(m: re.Match[str], sentence: str) -> str | None:
    return place(m.group("p"), strict=False)


# --- rules -----------------------------------------------------------------------------------

_SPOUSES = ["老婆", "老公", "妻子", "丈夫", "爱人", "媳妇", "太太"]

# Withdrawals come first: "我不住在X了" must not read as living in X.
_RETRACTIONS = (
    rule(
        "city",
        rf"我(?:已经|早就|现在)?(?:不(?:再)?住在|不在)(?P<v>{CJK}{{2,6}}?)(?:住|生活|工作)?了",
        0.85,
        statements_only=True,
        retracts=True,
    ),
    rule(
        "occupation",
        r"(?:我|^|(?<=[，,]))(?:已经|刚|上个月|最近|去年)*(?:辞职了|失业了|被裁了|离职了|下岗了|没工作了)",
        0.85,
        statements_only=True,
        retracts=True,
        value=lambda m, s: None,
    ),
    rule(
        "goal",
        r"(?:^|(?<=[，,]))(?:我)?(?:暂时|先|还是)?(?:不买了|不想买了|不打算买了|不用买了|不需要了)",
        0.8,
        statements_only=True,
        retracts=True,
        value=lambda m, s: None,
    ),
    rule(
        "family",
        r"(?:我|我们|^)(?:已经|去年|前年)?离婚了",
        0.8,
        statements_only=True,
        retracts=True,
        value=lambda m, s: list(_SPOUSES),
    ),
    rule(
        "likes",
        rf"{ME}(?:现在|已经)?不(?:再)?(?:喜欢|爱)(?P<v>[^，,。！？!?]{{1,12}}?)了",
        0.85,
        retracts=True,
        claims=False,
    ),
)
_CLAUSE_START = r"(?:^|(?<=[，,。！!；;]))"
# "别推荐大疆以外的" bans everything but 大疆: no item to store.
_EXCEPTIONS = re.compile(
    r"以外|之外|除了|(?i:\bother than\b|\bexcept\b|\bbesides\b|\bapart from\b)"
)
# Nouns ending like a job that name a membership or a level, not work.
_NOT_JOBS = re.compile(r"会员|成员|队员|粉丝|用户|新手|小白|学员")

RULES: tuple[Rule, ...] = (
    *_RETRACTIONS,
    rule(
        "do_not_recommend",
        r"(?:不要|别|不用|请勿|勿|不必)(?:再|给我|帮我|向我)*(?:推荐|推|介绍|安利)(?:给我)?(?:任何|什么)?",
        0.95,
        reject=_EXCEPTIONS,
    ),
    rule(
        "do_not_recommend",
        rf"{_CLAUSE_START}(?P<v>[^，,。！？!?]{{1,12}}?)(?:也|就|都|再)?(?:别|不要|不用)(?:再)?"
        r"(?:给我)?(?:推荐|推|介绍)了?",
        0.9,
        value=_fronted,
        reject=_EXCEPTIONS,
    ),
    rule(
        "dislikes", rf"{ME}{ADV}(?:不喜欢|不太喜欢|讨厌|不想要|受不了|反感|不爱|接受不了|不能接受)"
    ),
    # "我不喜欢X，也讨厌Y": a later clause keeps the subject the sentence opened with.
    rule(
        "dislikes",
        r"(?:^|(?<=[，,]))(?:也|还|更|同样)?(?:真的|特别|非常|很|挺|最|超)*(?:不喜欢|讨厌|受不了|反感|不爱)",
        value=_same_speaker,
    ),
    rule(
        "dislikes",
        rf"{_CLAUSE_START}(?P<v>[^，,。！？!?我]{{1,12}}?)我{ADV}(?:不喜欢|不太喜欢|讨厌|受不了|不爱)",
        value=_fronted,
    ),
    rule("likes", rf"{ME}{ADV}(?:喜欢|偏好|偏爱|倾向于|热爱|爱)(?!吗|不|上了?你)(?:的是|用)?"),
    rule(
        "likes",
        r"(?:^|(?<=[，,]))(?:也|还|更|同样)?(?:真的|特别|非常|很|挺|最|比较|超)*(?:喜欢|偏爱|热爱)"
        r"(?!吗|不|的话|什么|哪)",
        value=_same_speaker,
    ),
    rule(
        "likes",
        rf"{_CLAUSE_START}(?P<v>[^，,。！？!?我]{{1,12}}?)我{ADV}(?:喜欢|爱)(?:的)?(?:吧|啊|呀)?(?=$|[，,。！!])",
        value=_fronted,
    ),
    rule(
        "focus",
        r"(?:我)?(?:最|比较|更|特别|主要|重点|尤其)?(?<!不)(?<!不太)(?<!没)(?<!不怎么)"
        r"(?:关注|看重|在意|在乎|注重|重视|关心)"
        r"(?:的(?:点|地方|方面|东西)?(?:主要|就|其实)?(?:还是|是))?|最(?:重要|关键)的是|重点是",
    ),
    rule(
        "focus",
        rf"{_CLAUSE_START}(?P<v>[^，,。！？!?我]{{1,8}}?)(?:对我来说)?(?:最重要|最关键|是我最看重的|是重点)",
        value=_fronted,
    ),
    rule(
        "name",
        rf"(?:我(?:的)?名字(?:是|叫)|我叫(?:做)?(?![了过车外醒]))\s*(?P<v>{CJK}{{1,6}}?{END}"
        r"|[A-Za-z][A-Za-z.'-]*)",
        0.95,
        statements_only=True,
        reject=re.compile(r"什么|啥|谁"),
    ),
    rule(
        "name",
        rf"(?:叫我|称呼我为?)\s*(?P<v>{CJK}{{1,6}}?{END}|[A-Za-z][A-Za-z.'-]*)",
        NICKNAME,
        statements_only=True,
        reject=re.compile(r"什么|啥|谁"),
    ),
    rule(
        "name",
        rf"(?:^|(?<=[，,！!]))我是(?P<v>{CJK}{{2,3}})(?=$|[，,。！!])",
        0.9,
        statements_only=True,
        value=_person,
    ),
    # "本人欧阳澜，..." opening a self-introduction: a name only as jieba reads it.
    rule(
        "name",
        rf"(?:^|(?<=[，,！!～~]))本人(?P<v>{CJK}{{2,3}})(?=$|[，,。！!])",
        0.9,
        statements_only=True,
        value=_proper_name,
    ),
    rule(
        "city",
        r"(?:我|^|(?<=[，,\s]))(?:现在|目前|一直|平时)?(?:住在|生活在|定居在|定居于?|常住在?)",
        0.85,
        statements_only=True,
        value=_place_after(strict=False),
    ),
    rule(
        "city",
        r"(?:^|(?<=[，,\s]))(?:坐标|人在|常驻|base(?:在)?)\s*",
        0.8,
        statements_only=True,
        value=_place_after(strict=True),
    ),
    rule(
        "city",
        r"(?:我|^|(?<=[，,\s]))(?:们)?(?:去年|今年|上个月|上周|最近|刚刚?|已经|又|就|也|前年|年初|终于)*"
        # "从重庆落户福州": the city left comes first, the new one after the verb
        r"(?:从\S{2,6}?)?(?:搬到|搬去|搬来|搬回到|搬回|搬家到|迁到|落户)(?:了)?",
        0.85,
        statements_only=True,
        value=_place_after(strict=False),
    ),
    rule(
        "city",
        r"(?:我|^|(?<=[，,\s]))(?:去年|今年|上个月|最近|刚刚?|已经|又|就|也)*"
        # "(今年三月)被公司外派到X": sent by the employer, still the user's move
        r"(?:\S{0,4}?被[^，,。]{0,4}?)?(?:调到|调去|派到|外派到|转到)(?:了)?",
        0.8,
        statements_only=True,
        value=_place_after(strict=True),
    ),
    rule(
        "city",
        r"(?:我|^|(?<=[，,\s]))(?:不过|但是?|可是|其实)?(?:现在|目前|一直)?(?:算是|也算)?在"
        r"(?=\S{2,6}?(?:工作|上班|生活|读书|上学|读研|读博"
        r"|留学|念书|实习|做|当|定居|安家|落户|扎根))",
        0.8,
        statements_only=True,
        value=_place_after(strict=True),
        claims=False,
    ),
    # "广州的一名会计" opening a clause of a self-introduction: the city, then the job.
    rule(
        "city",
        r"(?:^|(?<=[，,]))(?=\S{2,4}的一[名位])",
        0.8,
        statements_only=True,
        value=_place_after(strict=True),
        claims=False,
    ),
    rule(
        "occupation",
        rf"(?:^|(?<=[，,]))\S{{2,4}}的一[名位](?P<v>{CJK}{{0,6}}?(?:{OCCUPATION_ZH})){_JOB_END}",
        0.8,
        statements_only=True,
        reject=_NOT_JOBS,
    ),
    rule(
        "occupation",
        rf"(?:我|^|(?<=[，,]))(?:现在|目前)?是一[名位](?P<v>{CJK}{{0,8}}?(?:{OCCUPATION_ZH})){_JOB_END}"
        rf"|我的(?:职业|工作)是(?P<v2>{CJK}{{0,8}}?(?:{OCCUPATION_ZH})){_JOB_END}"
        rf"|(?:我|^|(?<=[，,]))(?:现在|目前)?(?:是)?做(?P<v3>{CJK}{{1,8}}?)(?:工作)?的(?=$|[，,。！!])"
        rf"|(?:^|(?<=[，,]))(?P<v6>{CJK}{{0,6}}?(?:{OCCUPATION_ZH}))一枚"
        rf"|我(?:现在|目前)?从事(?P<v4>{CJK}{{1,8}}?)(?:相关)?(?:工作|行业)?{_JOB_END}"
        rf"|我(?:现在|目前)?是(?:个|一个)?(?P<v5>{CJK}{{0,6}}(?:{OCCUPATION_ZH})){_JOB_END}",
        0.85,
        statements_only=True,
        reject=_NOT_JOBS,
    ),
    rule(
        "occupation",
        r"(?:我|^|(?<=[，,\s]))(?:现在|目前|已经|也|还|就)*(?:在\S{2,6}?)?"
        r"(?:转行做|改行做|转行当|改行当|转做|改做|做|当|干)(?:了)?(?:一名|名)?"
        rf"(?P<v>{CJK}{{0,6}}?(?:{OCCUPATION_ZH})){_JOB_END}",
        0.85,
        statements_only=True,
        reject=_NOT_JOBS,
    ),
    rule(
        "language",
        rf"(?:用|使用|以|说)(?P<v>{_LANG})(?:来|跟我|和我|给我)?(?:回答|回复|交流|沟通|说|写|聊|对话|回)"
        rf"|(?:换成|改成|改用|切换到|切换成|换回|改回|切回)(?P<v2>{_LANG})"
        rf"|{_CLAUSE_START}(?:那|就|那就)?(?:还是)?(?:用|说)?(?P<v3>{_LANG})(?:就行|就好|就可以|吧)"
        # "能不能都用X" asks for it: a polite request, not a question about the language
        rf"|{_CLAUSE_START}(?:请|麻烦你?|以后|之后|往后)?[^，,。]{{0,4}}?(?:能不能|可不可以|可以)?"
        rf"(?:都)?(?:说|讲|用)(?P<v4>{_LANG})"
        r"(?=$|[，,。！!？?吧啊哦呀]|回|来|交流|沟通|聊)"
        rf"|(?:回复|回答|回)(?:我)?(?:请)?(?:都)?(?:用|说)(?P<v5>{_LANG})",
        0.95,
    ),
    rule(
        "goal",
        r"(?:我|^|(?<=[，,\s]))(?:也|还|现在|最近|正在|一直|自己|就|又|转而|这次|所以)*"
        r"(?:想|要|打算|准备|计划|需要|得|想要|还是)(?:先|再)?"  # "想先买…": the order of plans
        r"(?:给[^，,。]{1,6}?|在[^，,。]{1,6}?|帮[^，,。]{1,4}?|为[^，,。]{1,4}?|趁[^，,。]{1,6}?)?"
        rf"(?:(?:买|换|挑|选|入手|购买|配|找|订|租|添置|置办)(?!成|掉|到|回)"
        # Loose verbs ("弄个", "添台", "搭个") name a purchase only with a classifier after them.
        r"|(?:添|入|弄|整|搞|搭|装)(?=一?[台部个辆套双件只张把条副款]))"
        rf"{_CLASSIFIER}",
        0.8,
        value=_goal,
    ),
    rule(
        "goal",
        r"(?:我|^|(?<=[，,\s]))(?:也|还|现在|最近|一直)?(?:在|正在)(?:找|物色|挑|选|看)"
        rf"(?=一?[台部个款辆套双件只张把条副]){_CLASSIFIER}",
        0.8,
        value=_goal,
    ),
    rule(
        "goal",
        rf"(?:帮我|给我|替我|帮忙)(?:[^，,。]{{0,4}}?)(?:选|挑|推荐|找|配){_CLASSIFIER}",
        0.8,
        value=_goal,
    ),
    rule("goal", r"^(?:买|选|挑)(?=[^，,。]{1,8}?(?:我|的话|时))", 0.8, value=_goal),
    rule("goal", rf"求推荐{_CLASSIFIER}", 0.8, value=_goal),
    rule(
        "goal",
        r"(?:我|^|(?<=[，,\s]))(?:也|还|现在|最近)?(?:想要|需要|要)(?=一?[台部个款辆套双件只张把条副])"
        rf"{_CLASSIFIER}",
        WEAK_GOAL,
        statements_only=True,
        value=_goal,
    ),
    rule(
        "goal",
        r"(?:计划|打算|准备|想)(?:[^，,。去]{0,6}?)去(?P<p>[^，,。]{2,8}?)(?:旅游|旅行|玩|度假|度蜜月|自驾|看看)",
        0.8,
        value=_travel,
        claims=False,  # "打算和老婆去三亚": the company is the family rule's
    ),
    # Chat drops the "我想": "换台洗衣机", "入手个相机". A classifier after the verb keeps
    # "换个思路" out only together with the reject list.
    rule(
        "goal",
        rf"(?:^|(?<=[，,\s]))(?:先|再|准备)?(?:在[^，,。]{{1,6}}?)?(?:换|买|入手|添|挑|整)"
        rf"(?=一?[台部个辆套双件只张把条块副款]){_CLASSIFIER}",
        0.8,
        statements_only=True,
        value=_goal,
        reject=_NOT_GOODS,
    ),
    # A trip without a plan word: "去泰国玩七天", "下个月去云南旅游" (not "去年去…玩过").
    rule(
        "goal",
        r"(?:^|(?<=[，,\s]))(?:下个?月|下周|今年|明年|暑假|寒假|国庆|五一|春节|过年)?"
        r"去(?P<p>[^，,。]{2,6}?)(?:旅游|旅行|玩|度假|度蜜月|自驾)(?![了过的])",
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
    ),
    # A switch of goal: "改成冲牙器吧", "还是买扫地机吧"; kept only when a goal is known.
    rule(
        "goal",
        r"(?:^|(?<=[，,\s]))(?:那|那就|算了)?(?:改成|换成|改买|还是买|改为)",
        SWITCHED_GOAL,
        statements_only=True,
        value=_goal,
        reject=_NOT_GOODS,
    ),
)


__all__ = ["RULES", "cut", "place", "tags"]
