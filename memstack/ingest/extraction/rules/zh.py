"""Chinese rules for text-valued and list-valued keys.

Chinese drops subjects and fronts objects freely ("佳能的我也挺喜欢的", "淘宝也别推荐"),
so besides "我 + verb + object" most keys have a fronted form. Place names are cut with
jieba's part-of-speech tags: "搬到佛山了" must yield 佛山, not 佛山了, and "在医院上班"
must not yield a city.
"""

from __future__ import annotations

import re
from typing import Any

from memstack.ingest.extraction.rules.engine import NICKNAME, Rule, cut, rule
from memstack.ingest.extraction.rules.lexicon import OCCUPATION_ZH
from memstack.ingest.extraction.rules.sentences import other_subject
from memstack.ingest.extraction.rules.zh_words import (
    ADV,
    CJK,
    END,
    JOB_END,
    LANG_ZH,
    LEAD,
    ME,
    PERSON,
    person_name,
    place,
    proper_name,
    tags,
)

# --- value builders --------------------------------------------------------------------------


def _fronted(m: re.Match[str], sentence: str) -> str | None:
    """The object put before the verb: "佳能的我也挺喜欢的" → "佳能"; a topic before it
    ("推荐餐馆的话拉面店就别推了") is not part of it."""
    v = LEAD.sub("", m.group("v").rpartition("的话")[2]).strip()
    v = re.sub(r"(?:的|呢|吧|啊)+$", "", v)
    return v or None


def _same_speaker(m: re.Match[str], sentence: str) -> str | None:
    """The rest of a subjectless clause, if nobody but the user was named before it: chat
    drops "我" ("算了，深色穿腻了，现在喜欢浅色系"), but after "我老公说…" the subject
    left out may be the husband."""
    opening = sentence[: m.start()]
    # Only what follows the user's last "我" counts: "我妈说…，其实我一口都不吃，从小就不喜欢X".
    me = max(opening.rfind("我"), 0)
    if opening.strip() and (PERSON.search(opening[me:]) or other_subject(opening[me:])):
        return None
    return cut(sentence[m.end() :]) or None


_ATTRIBUTE = re.compile(r"味儿?|味道|气味|口感|质量|声音|价格|颜色|样子|感觉|款式|设计")


def _fronted_own(m: re.Match[str], sentence: str) -> str | None:
    """A fronted object with the user left out ("剧本杀不喜欢"): a thing, not a person
    ("小王也喜欢") nor an action ("闻着就受不了"), and no person named before it."""
    words = tags(LEAD.sub("", m["v"]))
    if PERSON.search(sentence[: m.end()]) or any(f.startswith("nr") for _, f in words):
        return None
    if _ATTRIBUTE.fullmatch(words[-1][0] if words else ""):
        # "味儿受不了", "价格不喜欢": a quality of something, a reason, not a thing
        return None
    nouns = [f for _, f in words if f[:1] in ("n", "s", "j") or f == "eng"]
    if not nouns or words[-1][1][:1] in ("u", "d", "p", "r", "c"):
        return None  # "闻着就受不了": how, not what
    return _fronted(m, sentence)


def _place_after(strict: bool) -> Any:
    def value(m: re.Match[str], sentence: str) -> str | None:
        return place(sentence[m.end() :], strict=strict)

    return value


# --- rules -----------------------------------------------------------------------------------

_SPOUSES = ["老婆", "老公", "妻子", "丈夫", "爱人", "媳妇", "太太"]

# Withdrawals come first: "我不住在X了" must not read as living in X.
_RETRACTIONS = (
    # "离开了延吉", "延吉以后应该不会回去住了": the city left, no new one named.
    rule(
        "city",
        rf"(?:我|我们|^|(?<=[，,]))(?:已经|早就|上个月|去年|今年|刚)*(?:离开了?|搬离了?|搬出了?)(?P<v>{CJK}{{2,6}}?)(?=$|[，,。了])"
        rf"|(?P<v2>{CJK}{{2,6}}?)(?:以后|这辈子)?(?:应该|大概|估计)?(?:不会|不打算)(?:再)?回去(?:住|生活)?了",
        0.8,
        statements_only=True,
        retracts=True,
    ),
    rule(
        "city",
        rf"我(?:已经|早就|现在)?(?:不(?:再)?住在|不在)(?P<v>{CJK}{{2,6}}?)(?:住|生活|工作)?了",
        0.85,
        statements_only=True,
        retracts=True,
    ),
    rule(
        "occupation",
        r"(?:我|^|(?<=[，,]))(?:现在|已经|刚|上个月|最近|去年|今年|也)*(?:辞职了|失业了|被裁了|离职了|下岗了"
        r"|没工作了|退休了|退了休|办了退休|(?:提前)?退休在家|待业在家|转行了)"
        # "收银那活儿早辞了": the job named, then quit
        r"|(?:工作|活儿?|班|职位)(?:我)?(?:早就?|已经|刚)?(?:辞了|辞掉了|不干了|不做了)",
        0.85,
        statements_only=True,
        retracts=True,
        value=lambda m, s: None,
    ),
    rule(
        "goal",
        r"(?:^|(?<=[，,]))(?:我)?(?:暂时|先|还是|也)?(?:不买了|不想买了|不打算买了|不用买了|不需要了|不去了|不想去了"
        r"|去不成了|取消了|泡汤了|黄了|搁置了|作罢)"
        r"|(?:行程|旅行|计划|旅游|这趟)(?:也|就|已经)?(?:取消了|泡汤了|黄了|作罢了?)",
        0.8,
        statements_only=True,
        retracts=True,
        value=lambda m, s: None,
    ),
    # "不设上限了", "预算不限": no limit any more.
    rule(
        "budget_limit",
        r"不设(?:预算|上限)|(?:预算|价格|钱)(?:上)?(?:不设限|不限|没上限|没有上限|无上限)|不差钱",
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
# "把默认语言改成英文", "界面换成日语", "字幕改成中文": a setting's language, not the replies'.
_SETTING = re.compile(r"默认|界面|系统|设置|字幕|键盘|软件|配置|app|APP|网站|页面|手机")


def _reply_language(m: re.Match[str], sentence: str) -> str | None:
    start = max(sentence.rfind(c, 0, m.start()) for c in "，,。！!；;\n") + 1
    if _SETTING.search(sentence[start : m.end()]):
        return None
    return next(v for k, v in m.groupdict().items() if v and k.startswith("v"))


_INTRO_ZH = (
    r"(?:自我介绍(?:一)?下|(?:简单)?介绍一下(?:我)?自己|简单介绍一下|报个家门"
    r"|(?:先)?(?:说|交代)(?:一)?下(?:我的)?(?:情况|背景)(?:哈|啊)?)"
)
# A sentence where the user introduces themselves: its bare clauses ("，眼科医生，") are
# about the user.
_INTRODUCES = re.compile(rf"我是|我叫|本人|{_INTRO_ZH}")


# Things one does at work that are not a role: "在公司做项目", "在店里干活".
_NOT_ROLES = re.compile(r"^(?:项目|事|事情|饭|作业|生意|实验|活|活儿|兼职|加班|好|完|了)")


def _role(m: re.Match[str], sentence: str) -> str | None:
    v = m.group("v")
    words = tags(v)
    if _NOT_ROLES.match(v) or not all(f[:1] in ("n", "v", "j") for _, f in words):
        return None
    return v if words[-1][1][:1] == "n" else None


def _intro_place(m: re.Match[str], sentence: str) -> str | None:
    if not _INTRODUCES.search(sentence[: m.start()]):
        return None
    rest = sentence[m.end() :]
    found = place(rest, strict=True)
    return (
        found if found and re.match(re.escape(found) + r"(?:的|人)(?:$|[，,。！!])", rest) else None
    )


def _intro_job(m: re.Match[str], sentence: str) -> str | None:
    """A bare job noun as one clause of a self-introduction; a clause with a verb in it
    ("在名古屋做导游") is left to the rules that read verbs."""
    v = m.group("v")
    if re.search(r"[在做当是的了和跟也]", v) or not _INTRODUCES.search(sentence[: m.start()]):
        return None
    return v


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
        r"(?:不要|别|不用|请勿|勿|不必)(?:再|老|总|总是|一直|给我|帮我|向我)*(?:推荐|推|介绍|安利)(?:给我)?"
        r"(?:任何|什么)?",
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
        r"(?:^|(?<=[，,]))(?:但是?|不过|可是|平时|一直|从小|现在|也|还|就|更|同样|只是)*"
        r"(?:真的|特别|非常|很|挺|最|超)*"
        r"(?:不喜欢|讨厌|受不了|反感|不爱|不太爱|不太喜欢|最烦|特烦)",
        value=_same_speaker,
    ),
    rule(
        "dislikes",
        rf"{_CLAUSE_START}(?P<v>[^，,。！？!?我]{{1,12}}?)我{ADV}(?:不喜欢|不太喜欢|讨厌|受不了|不爱)",
        value=_fronted,
    ),
    # "荧光色是真不喜欢", "剧本杀不喜欢": the object first, the user left out.
    rule(
        "dislikes",
        rf"{_CLAUSE_START}(?:但是?|不过|可是)?(?P<v>[^，,。！？!?我你]{{1,10}}?)(?:是|就|倒是|真的?|实在|也|还|都)*"
        r"(?:不喜欢|不太喜欢|受不了|不爱|不太行|不行|无感)(?:了|啊|呀)?(?=$|[，,。！!~～])",
        value=_fronted_own,
    ),
    rule(
        "likes",
        rf"{ME}{ADV}(?:喜欢|偏好|偏爱|倾向于|热爱|迷上了?|爱上了?|爱)(?!吗|不|上了?你)(?:的是|用)?",
    ),
    rule(
        "likes",
        r"(?:^|(?<=[，,]))(?:但是?|不过|可是|平时|一直|从小|本来|现在|也|还|更|同样)*"
        # "平时没事就喜欢…", "周末也爱去…": a short stretch of when and how
        r"(?:(?:没事|有空|闲了|周末|晚上|下班后?|最近|每天)(?:就|也|都|还)?)?"
        r"(?:真的|特别|非常|很|挺|最|比较|超|只)*"
        r"(?:喜欢|偏爱|热爱|迷上了?|爱上了?|爱(?!情|心|人|好|护|吃不吃))"
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
        r"(?:关注|看重|在意|在乎|注重|重视|关心|重点看|主要看)"
        r"(?:的(?:点|地方|方面|东西)?(?:主要|就|其实)?(?:还是|是))?|最(?:重要|关键)的是|重点是",
    ),
    rule(
        "focus",
        rf"{_CLAUSE_START}(?P<v>[^，,。！？!?我]{{1,8}}?)(?:对我来说)?(?:最重要|最关键|是我最看重的|是重点)",
        value=_fronted,
    ),
    # "音质优先", "主要看支撑性": what decides the choice.
    rule(
        "focus",
        rf"{_CLAUSE_START}(?P<v>[^，,。！？!?我你他她]{{1,6}}?)(?:优先|第一|最要紧)(?=$|[，,。！!])"
        rf"|{_CLAUSE_START}(?:我)?(?:主要|重点|最)看(?P<v2>[^，,。！？!?]{{1,8}}?)(?=$|[，,。！!])",
        value=lambda m, s: _fronted_own(m, s) if m["v"] else m["v2"],
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
        rf"(?:^|(?<=[，,！!～~：:\s]))我是(?P<v>{CJK}{{2,4}})(?=$|[，,。！!])"
        # "先报个家门：钟予安，…": the name right after the opener of a self-introduction
        rf"|{_INTRO_ZH}[：:，,]\s*(?:我是|我叫)?(?P<v2>{CJK}{{2,4}})(?=$|[，,。！!])",
        0.9,
        statements_only=True,
        value=person_name,
    ),
    # "本人欧阳澜，..." opening a self-introduction: a name only as jieba reads it.
    rule(
        "name",
        rf"(?:^|(?<=[，,！!～~]))本人(?P<v>{CJK}{{2,3}})(?=$|[，,。！!])",
        0.9,
        statements_only=True,
        value=proper_name,
    ),
    rule(
        "city",
        r"(?:我|^|(?<=[，,\s]))(?:现在|目前|一直|平时)?(?:租房|租|一个人|自己)?(?:住在|生活在|定居在|定居于?|常住在?)"
        r"|(?:^|(?<=[，,\s]))现居(?:于|在)?",
        0.85,
        statements_only=True,
        value=_place_after(strict=False),
    ),
    rule(
        "city",
        r"(?:^|(?<=[，,\s]))(?:坐标|人在|常驻|base(?:在)?)\s*|我(?:现在|目前|一直)?住(?![在了过])",
        0.8,
        statements_only=True,
        value=_place_after(strict=True),
    ),
    rule(
        "city",
        r"(?:我|^|(?<=[，,\s]))(?:们)?(?:去年|今年|上个月|上周|最近|刚刚?|已经|又|就|也|前年|年初|终于"
        r"|开春|年底|月初|月底|春天|夏天|秋天|冬天|前段时间|前阵子|上半年|下半年|五一|十一|国庆|春节|过年"
        r"|暑假|寒假)*"
        # "从重庆落户福州": the city left comes first, the new one after the verb
        # "带着老婆和我家德牧搬去嘉兴了": who moves along does not change where to
        r"(?:从\S{2,6}?|带着[^，,。]{1,10}?|(?:辞职|辞了职|离职|毕业|退休)(?:后|了)?)?"
        r"(?:搬到|搬去|搬来|搬回到|搬回|搬家到|迁到|落户)(?:了)?",
        0.85,
        statements_only=True,
        value=_place_after(strict=False),
        claims=False,  # "带着老婆…搬去": who came along is the family rule's
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
        r"|留学|念书|实习|做|当|定居|安家|落户|扎根|开了?(?:家|个|间)))",
        0.8,
        statements_only=True,
        value=_place_after(strict=True),
        claims=False,
    ),
    # "我叫甘文博，宜昌的，…": where the user is from, in a self-introduction.
    rule(
        "city",
        r"(?<=[，,])(?=\S{2,6}?(?:的|人)(?:$|[，,。！!]))",
        0.8,
        statements_only=True,
        value=_intro_place,
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
        rf"(?:^|(?<=[，,]))\S{{2,4}}的一[名位](?P<v>{CJK}{{0,6}}?(?:{OCCUPATION_ZH})){JOB_END}",
        0.8,
        statements_only=True,
        reject=_NOT_JOBS,
    ),
    rule(
        "occupation",
        rf"(?:我|^|(?<=[，,]))(?:现在|目前)?是(?:一[名位个]|个)(?P<v>{CJK}{{0,8}}?(?:{OCCUPATION_ZH})){JOB_END}"
        rf"|我的(?:职业|工作)是(?P<v2>{CJK}{{0,8}}?(?:{OCCUPATION_ZH})){JOB_END}"
        rf"|(?:我|^|(?<=[，,]))(?:自己)?(?:现在|目前)?(?:是)?(?:做|干|搞)(?P<v3>{CJK}{{1,8}}?)(?:工作)?的(?=$|[，,。！!])"
        rf"|(?:^|(?<=[，,]))(?P<v6>{CJK}{{0,6}}?(?:{OCCUPATION_ZH}))一枚"
        rf"|(?<=[，,])(?:现在|目前)?是(?P<v7>{CJK}{{0,6}}?(?:{OCCUPATION_ZH}))(?=$|[，,。！!])"
        rf"|我(?:现在|目前)?从事(?P<v4>{CJK}{{1,8}}?)(?:相关)?(?:工作|行业)?{JOB_END}"
        # "上个月已经转岗做销售了": a new job said with the change
        rf"|(?:转岗|转行|改行|跳槽)(?:去)?(?:做|当|干)(?P<v8>{CJK}{{1,6}}?)(?=了|$|[，,。！!])"
        rf"|我(?:自己)?(?:现在|目前)?是(?:个|一个)?(?P<v5>{CJK}{{0,6}}(?:{OCCUPATION_ZH})){JOB_END}",
        0.85,
        statements_only=True,
        reject=_NOT_JOBS,
    ),
    # "在物流公司做调度": a role at a workplace, read as a noun even when the role is not
    # a word the job list knows.
    rule(
        "occupation",
        r"(?:我|^|(?<=[，,\s]))(?:现在|目前|已经|也|还|就)*在(?:一家|一所|一个)?\S{1,8}?"
        r"(?:公司|单位|集团|医院|学校|工厂|厂|银行|店|酒店|餐厅|机构|工作室)(?:里)?(?:做|当|干)"
        rf"(?P<v>{CJK}{{2,4}}?)(?=$|[，,。！!]|了|呢|啊)",
        0.8,
        statements_only=True,
        value=_role,
    ),
    rule(
        "occupation",
        rf"(?<=[，,])(?P<v>{CJK}{{0,6}}?(?:{OCCUPATION_ZH}))(?=$|[，,。！!])",
        0.8,
        statements_only=True,
        reject=_NOT_JOBS,
        value=_intro_job,
    ),
    rule(
        "occupation",
        r"(?:我|^|(?<=[，,\s]))(?:现在|目前|已经|也|还|就|平时|开始|正式|终于|这周|本周|下周|这个月"
        r"|下个月|今天|明天|今年|明年|从今天起|从下周起|从下个月起)*(?:在\S{2,6}?)?"
        r"(?:转行做|改行做|转行当|改行当|转做|改做|做|当|干)(?:了)?(?:一名|名)?"
        rf"(?P<v>{CJK}{{0,6}}?(?:{OCCUPATION_ZH})){JOB_END}",
        0.85,
        statements_only=True,
        reject=_NOT_JOBS,
    ),
    rule(
        "language",
        rf"(?:用|使用|以|说)(?P<v>{LANG_ZH})(?:来|跟我|和我|给我)?(?:回答|回复|交流|沟通|说|写|聊|对话|回)"
        rf"|(?:换成|改成|改用|切换到|切换成|换回|改回|切回|切成|切到|换到|换|改)(?P<v2>{LANG_ZH})(?=$|[，,。！!吧啊呀哈]|回|来|交流|聊)"
        rf"|{_CLAUSE_START}(?:那|就|那就)?(?:还是)?(?:用|说)?(?P<v3>{LANG_ZH})(?:就行|就好|就可以|吧)"
        # "能不能都用X" asks for it: a polite request, not a question about the language
        rf"|{_CLAUSE_START}(?:请|麻烦你?|以后|之后|往后)?[^，,。]{{0,4}}?(?:能不能|可不可以|可以)?"
        r"(?:从(?:现在|这条|今天|下一条|这句|明天)(?:开始|起))?"
        rf"(?:都)?(?:说|讲|用)(?P<v4>{LANG_ZH})"
        r"(?=$|[，,。！!？?吧啊哦呀]|回|来|交流|沟通|聊)"
        rf"|(?:回复|回答|回)(?:我)?(?:请|都|尽量|最好|能|可以|麻烦)*(?:用|说)(?P<v5>{LANG_ZH})",
        0.95,
        value=_reply_language,
    ),
)


__all__ = ["RULES", "cut", "place", "tags"]
