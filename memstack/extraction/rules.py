"""The offline rule extractor: Chinese and English patterns for explicit statements.

Rules only fire on things the user said outright, so their facts are ``user_stated``;
anything that needs judgement is the LLM extractor's job. Assistant, system and tool
messages yield nothing: a rule cannot tell an assistant restating the user from an
assistant suggesting something, and a suggestion must never become a user fact.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from memstack.extraction.base import Fact
from memstack.extraction.vocabulary import (
    NUMBER_PATTERN,
    VOCABULARY,
    currency_code,
    default_currency,
    find_currency,
    has_cjk,
    normalise_fact,
    normalise_known,
    normalise_list,
    parse_number,
    reconcile,
    same_value,
    tidy_number,
)

# --- sentences, turn words, questions ----------------------------------------------------

TURN_WORDS = re.compile(
    r"其实|不过|改一下|改成|改为|改到|还是|算了|换成|更正|说错了|改主意"
    r"|(?i:\bactually\b|\binstead\b|\bchanged? my mind\b|\bon second thought\b"
    r"|\bscratch that\b|\bcorrection\b|\bmake (?:it|that)\b|\blet me correct\b)"
)
_ADDITIVE = re.compile(r"也|还有|另外|(?i:\balso\b|\btoo\b|\bas well\b)")
_SENTENCE = re.compile(r"[^。！？!?；;\n]+?(?:[。！？!?；;]+|\.(?=\s|$)|\n|$)")
_QUESTION_START = re.compile(
    r"^(?:是否|能不能|可不可以|有没有|会不会|要不要|怎么|怎样|如何|为什么|为啥|哪)"
    r"|^(?i:what|how|why|when|where|which|who)\b"
)


def has_turn_word(text: str) -> bool:
    return TURN_WORDS.search(text) is not None


def _turn_at(sentence: str) -> int | None:
    m = TURN_WORDS.search(sentence)
    return m.start() if m else None


def split_sentences(text: str) -> list[str]:
    """Sentences with their end punctuation kept (questions are told apart by it)."""
    return [s.strip() for s in _SENTENCE.findall(text) if s.strip(" \t\n。！？!?；;.")]


def is_question(sentence: str) -> bool:
    s = sentence.strip()
    if s.endswith(("?", "？")):
        return True
    body = s.rstrip("。.!！~～ ")
    if body.endswith(("吗", "呢", "么")):
        return True
    return not s.endswith(("。", ".", "!", "！")) and _QUESTION_START.search(body) is not None


def text_locale(text: str) -> str:
    """ "zh" when Chinese characters carry the text, else "en"."""
    cjk = len(re.findall(r"[\u4e00-\u9fff]", text))
    latin = len(re.findall(r"[A-Za-z]+", text))
    return "zh" if cjk and cjk >= latin else "en"


# --- budgets ---------------------------------------------------------------------------

_MONEY = re.compile(
    r"(?<![A-Za-z\d.\-_#])"
    r"(?P<pre>US\$|HK\$|[¥￥$€£]|(?i:rmb|cny|usd|eur|gbp|hkd|jpy)(?=\s*\d))?\s?"
    rf"(?P<num>{NUMBER_PATTERN})"
    r"(?P<suf>\s*(?:块钱|人民币|元|块|美元|美金|欧元|英镑|日元|港币|港元|刀"
    r"|(?i:rmb|cny|usd|eur|gbp|hkd|jpy|yuan|dollars?|bucks|euros?|pounds?|yen)\b))?"
)
# A number followed by one of these measures something other than money.
_NOT_MONEY = re.compile(
    r"\s*(?:个?小时|寸|英寸|公斤|斤|克|年|个月|月|天|日|号|岁|人|个|台|部|次|分钟|分|秒|核|毫米|厘米"
    r"|米|公里|周|星期|倍|屏|显示|帧|瓦|伏|尼特|位|楼|层|代|系列|款|英里|磅|%|％|\""
    r"|(?i:h|hrs?|hours?|inch(?:es)?|kg|g|grams?|gb|tb|mb|t|min|mins|minutes?|hz|w|mah|mm|cm"
    r"|km|days?|years?|months?|weeks?|people|persons?|times|p|fps|v|nits?|miles?|lbs?|oz"
    r"|screen|display|monitor|tv|video|resolution)\b)"
)
_BUDGET_CUE = re.compile(
    r"预算|价位|价格|价钱|花费|开销|费用|以内|之内|以下|不超过|超过|上限|最多|顶多|最高|可以到|能到"
    r"|接受|控制在|左右|出头|加到|放宽到|预留"
    r"|(?i:\bbudget|\bafford|\bspend|\bup to\b|\bat most\b|\bmax(?:imum)?\b|\bno more than\b"
    r"|\bnot more than\b|\bunder\b|\bbelow\b|\bwithin\b|\bless than\b|\bprice|\bcost"
    r"|\blimit\b|\bcap\b|\baround\b|\broughly\b|\bstretch\b|\bgo to\b)"
)
_PAST_SPEND = re.compile(r"花了|付了|买了|用了|花掉|(?i:\bspent\b|\bpaid\b|\bcost me\b|\bbought\b)")
_BUDGET_WORD = re.compile(r"预算|(?i:\bbudget)")
_JOIN = re.compile(
    r"^\s*(?:到|至|-|–|—|~|～|到了|(?i:to|and|through))\s*$"
    r"|^\s*(?P<change>改到|改成|改为|提到|提高到|涨到|加到|降到|降低到|调到|调整到|变成|换成|->|→|=>)\s*$"
)
_CHANGE_VERB = re.compile(r"改|调|提高|涨|降|(?i:\bchang|\braise|\bincreas|\bbump|\blower|\bmov)")
_CLAUSE = re.compile(r"[，；;:：]|,(?!\d{3}\b)|\s+but\s+")


@dataclass(frozen=True)
class _Amount:
    value: float
    currency: str | None
    start: int
    end: int
    magnitude: bool  # written with 千/万/k: clearly a sum, not a count


def _amounts(clause: str) -> list[_Amount]:
    found: list[_Amount] = []
    for m in _MONEY.finditer(clause):
        num = m.group("num")
        value = parse_number(num)
        if value is None or value <= 0:
            continue
        marker = m.group("pre") or m.group("suf")
        magnitude = bool(re.search(r"[十百千万亿kKw]|thousand|grand|million", num))
        if not marker and _NOT_MONEY.match(clause, m.end()):
            continue
        if not marker and not magnitude and (has_cjk(num) or value < 20):
            continue  # 一下, 两个, "up to 8": numerals that are not sums
        currency = currency_code(marker) if marker else None
        found.append(_Amount(value, currency, m.start("num"), m.end(), magnitude))
    return found


def _clause_budget(
    clause: str, *, turn: bool, in_context: bool
) -> tuple[_Amount, _Amount | None] | None:
    """The limit stated in one clause and, for "从五千改到八千", the value it replaced.

    ``in_context``: a budget is already under discussion (an earlier clause, or a known
    budget plus a turn word), so a bare "八千吧" counts without a cue word.
    """
    amounts = _amounts(clause)
    if not amounts:
        return None
    if _PAST_SPEND.search(clause) and not _BUDGET_WORD.search(clause):
        return None
    pairs = [
        (a, b, m)
        for a, b in itertools.pairwise(amounts)
        if (m := _JOIN.match(clause[a.end : b.start]))
    ]
    contextual = in_context and any(a.currency or a.magnitude for a in amounts)
    if not (_BUDGET_CUE.search(clause) or pairs or contextual):
        return None
    if pairs:
        first, second, m = pairs[-1]
        if m.group("change") or turn or _CHANGE_VERB.search(clause):
            # A turn word makes "5000 to 8000" a change, never a compromise: the new value.
            return second, first
        return (first if first.value > second.value else second), None
    return amounts[-1], None


def _clauses(sentence: str) -> list[tuple[int, str]]:
    starts = [0, *(m.end() for m in _CLAUSE.finditer(sentence))]
    ends = [*(m.start() for m in _CLAUSE.finditer(sentence)), len(sentence)]
    return [(a, sentence[a:b]) for a, b in zip(starts, ends, strict=True)]


def _budget_fact(
    sentence: str,
    *,
    turn_at: int | None,
    in_context: bool,
    known_currency: str | None,
    short_message: bool,
) -> Fact | None:
    chosen: tuple[_Amount, _Amount | None, str] | None = None
    end = len(sentence)
    for offset, clause in _clauses(sentence):
        turn = turn_at is not None and turn_at < offset + len(clause)
        got = _clause_budget(clause, turn=turn, in_context=in_context or chosen is not None)
        if got:
            new, old = got
            chosen = (new, old or (chosen[0] if chosen else None), clause)
            end = offset + len(clause)
    confidence, source = 0.95, "user_stated"
    if chosen is None and short_message:
        # "5000元", "1.5万" as a whole message: nearly always the answer to "what is your
        # budget?", but that is our guess, so it is marked extracted, not stated.
        amounts = [a for a in _amounts(sentence) if a.currency or a.magnitude]
        if len(amounts) == 1 and not _PAST_SPEND.search(sentence):
            chosen = (amounts[0], None, sentence)
            confidence, source = 0.6, "extract"
    if chosen is None:
        return None
    new, old, clause = chosen
    currency = (
        new.currency
        or (old.currency if old else None)
        or find_currency(clause)
        or find_currency(sentence)
        or known_currency
        or default_currency(sentence)
    )
    supersedes = None
    if old is not None and old.value != new.value:
        supersedes = {"amount": tidy_number(old.value), "currency": old.currency or currency}
    return Fact(
        key="budget_limit",
        value={"amount": tidy_number(new.value), "currency": currency},
        type="constraint",
        confidence=confidence,
        source=source,  # type: ignore[arg-type]
        supersedes=supersedes,
        override=turn_at is not None and turn_at < end,
    )


# --- statements with a free-text value -----------------------------------------------------

_STOP_WORDS = frozenset(
    "i i'm i'd my me you we they it it's he she but so because since please and then also "
    "however though although if which that this do don't dont not no never stop".split()
)
_HARD_STOP = re.compile(
    r"[，；;：:。！？!?\n]|但是|可是|因为|所以|不过|而且|并且|然后|预算"
    r"|(?i:\s+(?:but|because|since|so|though|although|while|whereas|unless|if|and i|and my)\b)"
)
_CJK = r"[\u4e00-\u9fff·]"
_ZH_END = r"(?=$|[\s，,。.!！?？;；、~～]|今年|住在|住|来自|从事|在|是|的|了|吧|啊|呀)"
_OCCUPATIONS_ZH = (
    r"医生|护士|律师|老师|教师|学生|大学生|研究生|博士生|程序员|工程师|设计师|产品经理|经理|会计|司机"
    r"|记者|编辑|作家|厨师|主播|警察|军人|农民|公务员|研究员|教授|销售|客服|运营|分析师|架构师"
    r"|摄影师|画家|演员|歌手|模特|老板|创业者|咨询师|顾问|药剂师|建筑师|科学家|翻译|自由职业者"
)
_OCCUPATIONS_EN = (
    r"engineer|developer|programmer|doctor|physician|surgeon|nurse|teacher|professor|student"
    r"|designer|manager|lawyer|attorney|accountant|writer|journalist|editor|scientist|researcher"
    r"|analyst|consultant|architect|chef|cook|driver|pilot|artist|photographer|musician|dentist"
    r"|pharmacist|farmer|officer|salesperson|entrepreneur|founder|freelancer|translator|tester"
)
_LANG_ZH = r"中文|汉语|普通话|简体中文|英文|英语|日语|日文|韩语|韩文|法语|德语|西班牙语|粤语"
_LANG_EN = r"English|Chinese|Mandarin|Japanese|Korean|French|German|Spanish|Cantonese"
_EN_TEXT = r"[A-Za-z][\w'-]*(?:\s+[A-Z][\w'-]*){0,2}"
_EN_PHRASE = r"[A-Za-z][\w-]*(?:\s+[\w-]+){0,3}?"
_EN_PHRASE_END = r"(?=$|[,.;!?]|\s+(?:at|in|for|and|but|with|since|from|now)\b)"


@dataclass(frozen=True)
class _Rule:
    key: str
    pattern: re.Pattern[str]
    confidence: float
    # Profile statements inside a question ("我叫什么名字？") are not statements.
    statements_only: bool = False
    reject: re.Pattern[str] | None = None


def _rule(key: str, pattern: str, confidence: float, **kw: Any) -> _Rule:
    return _Rule(key, re.compile(pattern), confidence, **kw)


# Order matters: the first rule to claim a stretch of text wins it ("不要推荐" before "喜欢").
# A rule without a ``v`` group takes the rest of the clause as its value.
_RULES: tuple[_Rule, ...] = (
    _rule(
        "do_not_recommend",
        r"(?:不要|别|不用|请勿|勿|不必)(?:再|给我|帮我|向我)*(?:推荐|推|介绍|安利)(?:给我)?(?:任何|什么)?",
        0.95,
    ),
    _rule(
        "do_not_recommend",
        r"(?i:\b(?:do not|don't|dont|never|stop|quit|no more|please don't|please do not)\s+"
        r"(?:ever\s+)?(?:recommend|suggest|show|offer|pitch)(?:ing)?\s+(?:me\s+)?(?:any\s+)?(?:more\s+)?)",
        0.95,
    ),
    _rule(
        "dislikes",
        r"我(?:真的|一直|实在|特别|非常|很|比较|也|还|其实|都)*"
        r"(?:不喜欢|不太喜欢|讨厌|不想要|受不了|反感|不爱|接受不了|不能接受)",
        0.9,
    ),
    _rule(
        "dislikes",
        r"(?i:\bI\s+(?:really\s+|just\s+|also\s+|absolutely\s+)*"
        r"(?:(?:don't|do not|dont)\s+(?:really\s+)?(?:like|love|enjoy|want)"
        r"|hate|dislike|detest|can't stand|cannot stand)\s+"
        r"|\bI(?:'m|\s+am)\s+not\s+(?:a\s+(?:big\s+)?fan\s+of|into)\s+)",
        0.9,
    ),
    _rule(
        "likes",
        r"我(?:真的|一直|特别|非常|很|比较|最|也|还|其实|都|更|还是|挺|蛮)*"
        r"(?:喜欢|偏好|偏爱|倾向于|热爱|爱)(?!吗|不)(?:的是|用)?",
        0.9,
    ),
    _rule(
        "likes",
        r"(?i:\bI\s+(?:really\s+|also\s+|do\s+|just\s+|absolutely\s+|definitely\s+|much\s+|generally\s+"
        r"|usually\s+|would\s+|still\s+)*(?:like|love|prefer|enjoy|adore)\s+(?!to\s+know)"
        r"|\bI'd\s+(?:rather\s+have|prefer)\s+|\bI(?:'m|\s+am)\s+(?:really\s+)?(?:into|a\s+(?:big\s+)?fan\s+of)\s+)",
        0.9,
    ),
    _rule(
        "focus",
        r"(?:我)?(?:最|比较|更|特别|主要|重点|尤其)?(?<!不)(?<!不太)(?<!没)(?<!不怎么)"
        r"(?:关注|看重|在意|在乎|注重|重视|关心)(?:的是)?|最(?:重要|关键)的是|重点是",
        0.9,
    ),
    _rule(
        "focus",
        r"(?i:\bI\s+(?:really\s+|mostly\s+|mainly\s+)?care\s+"
        r"(?:(?:the\s+)?most|mostly|a lot|mainly)?\s*about\s+"
        r"|\bwhat\s+(?:matters|counts)\s+(?:most\s+)?(?:to me\s+)?(?:most\s+)?is\s+"
        r"|\bmy\s+(?:top\s+|main\s+|biggest\s+)?priorit(?:y|ies)\s+(?:is|are)\s+"
        r"|\bI(?:'m|\s+am)\s+(?:mostly\s+|mainly\s+)?(?:focused|concerned)\s+(?:on|about|with)\s+"
        r"|\bmost\s+important(?:ly)?(?:\s+to\s+me)?(?:\s+(?:is|are)|:)?\s+)",
        0.9,
    ),
    _rule(
        "name",
        rf"(?:我(?:的)?名字(?:是|叫)|我叫(?:做)?(?![了过车外醒])|叫我|称呼我为?)\s*(?P<v>{_CJK}{{1,6}}?{_ZH_END}"
        r"|[A-Za-z][A-Za-z.'-]*)",
        0.95,
        statements_only=True,
        reject=re.compile(r"什么|啥|谁"),
    ),
    _rule(
        "name",
        r"(?i:\b(?:my name is|my name's|call me|i'm called|i am called))\s+"
        r"(?P<v>[A-Za-z][\w'-]*(?:\s+[A-Z][\w'-]*)?)",
        0.95,
        statements_only=True,
        reject=re.compile(r"^(?i:a|an|the|what|not|anything|whatever)$"),
    ),
    _rule(
        "city",
        r"(?:我|^|(?<=[，,\s]))(?:现在|目前|一直|平时)?(?:住在|生活在|定居在|定居|常住在?)(?P<v>[\u4e00-\u9fffA-Za-z]{2,10}?)"
        r"(?=$|[\s，,。.!！?？;；]|附近|这边|那边|一带|工作|上班|生活|的|了|很|已经)",
        0.85,
        statements_only=True,
    ),
    _rule(
        "city",
        r"(?:我|^|(?<=[，,\s]))(?:现在|目前)?在(?P<v>[\u4e00-\u9fff]{2,6}?)(?:工作|上班|生活|读书|上学)",
        0.8,
        statements_only=True,
        reject=re.compile(r"考虑|找|想|看|用|做|等|忙|学|准备|家|公司|这|那"),
    ),
    _rule(
        "city",
        r"(?i:\bI\s+(?:live|am living|'m living|reside|am based|'m based|moved)\s+(?:in|to))"
        rf"\s+(?P<v>{_EN_TEXT})",
        0.85,
        statements_only=True,
        reject=re.compile(r"^(?i:a|an|the|my|this|that|here|there)\b"),
    ),
    _rule(
        "occupation",
        rf"我(?:现在|目前)?是一[名位](?P<v>{_CJK}{{1,10}}?){_ZH_END}"
        rf"|我的(?:职业|工作)是(?P<v2>{_CJK}{{1,10}}?){_ZH_END}"
        rf"|我(?:现在|目前)?是做(?P<v3>{_CJK}{{1,8}}?)(?:工作)?的"
        rf"|我(?:现在|目前)?从事(?P<v4>{_CJK}{{1,8}}?)(?:相关)?(?:工作|行业)?{_ZH_END}"
        rf"|我(?:现在|目前)?是(?:个|一个)?(?P<v5>{_CJK}{{0,6}}(?:{_OCCUPATIONS_ZH})){_ZH_END}",
        0.85,
        statements_only=True,
    ),
    _rule(
        "occupation",
        rf"(?i:\bI\s+(?:work|am working|'m working)\s+as|\bmy\s+(?:job|occupation|profession)\s+is)"
        rf"\s+(?:an?\s+)?(?P<v>{_EN_PHRASE}){_EN_PHRASE_END}"
        rf"|(?i:\bI(?:'m|\s+am)\s+an?\s+(?P<v2>(?:[\w-]+\s+){{0,2}}(?:{_OCCUPATIONS_EN})s?)\b)",
        0.85,
        statements_only=True,
    ),
    _rule(
        "language",
        rf"(?:用|使用|以|说)(?P<v>{_LANG_ZH})(?:来|跟我|和我|给我)?(?:回答|回复|交流|沟通|说|写|聊|对话|回)",
        0.95,
    ),
    _rule(
        "language",
        r"(?i:\b(?:answer|reply|respond|talk|speak|write|communicate|chat)(?:\s+to\s+me|\s+back)?"
        rf"(?:\s+only)?\s+in\s+(?P<v>{_LANG_EN})\b|\bin\s+(?P<v2>{_LANG_EN})\s+please\b)",
        0.95,
    ),
    _rule(
        "goal",
        r"我(?:想|要|打算|准备|计划|需要)(?:买|换|选|入手|购买|配)(?:一?[台部个款辆套双件只])?"
        r"|(?:帮我|给我)(?:选|挑|推荐|找|配)(?:一?[台部个款辆套双件只])?",
        0.8,
    ),
    _rule(
        "goal",
        r"(?i:\bI(?:'m|\s+am)\s+(?:looking|shopping|searching)\s+for\s+(?:an?\s+|some\s+)?"
        r"|\bI\s+(?:want|need|plan|intend)\s+to\s+(?:buy|get|purchase)\s+(?:an?\s+|some\s+)?"
        r"|\bhelp\s+me\s+(?:choose|pick|find|select)\s+(?:an?\s+)?)",
        0.8,
    ),
)


_MAX_VALUE_CHARS = 60
_MAX_VALUE_WINDOW = 4 * _MAX_VALUE_CHARS


def _cut(rest: str) -> str:
    """The value part of "…喜欢X，…": up to the end of the clause.

    English lists run over commas ("hiking, reading and chess") when the next piece is
    short and does not start a new statement.
    """
    rest = rest[:_MAX_VALUE_WINDOW]  # values are short; scanning further is quadratic
    m = _HARD_STOP.search(rest)
    if m:
        rest = rest[: m.start()]
    parts = rest.split(",")
    kept = [parts[0]]
    for part in parts[1:]:
        words = part.split()
        if not words or len(words) > 4 or words[0].casefold() in _STOP_WORDS or has_cjk(part):
            break
        kept.append(part)
    return ",".join(kept).strip()


def _rule_facts(sentence: str, *, turn_at: int | None, question: bool) -> Iterable[Fact]:
    claimed = bytearray(len(sentence))  # per character: a bitmap keeps long inputs linear
    for rule in _RULES:
        if rule.statements_only and question:
            continue
        for m in rule.pattern.finditer(sentence):
            if any(claimed[m.start() : m.end()]):
                continue
            groups = {k: v for k, v in m.groupdict().items() if v}
            raw = next(iter(groups.values())) if groups else _cut(sentence[m.end() :])
            if not raw or len(raw) > _MAX_VALUE_CHARS or (rule.reject and rule.reject.search(raw)):
                continue
            end = m.end() + (0 if groups else len(raw))
            claimed[m.start() : end] = b"\x01" * (end - m.start())
            yield Fact(
                key=rule.key,
                value=raw,
                type=VOCABULARY[rule.key].type,
                confidence=rule.confidence,
                source="user_stated",
                # A turn word speaks for what follows it: "我喜欢A，不过预算改成八千".
                override=turn_at is not None and turn_at < end,
            )


# --- the extractor ------------------------------------------------------------------------


class RulesExtractor:
    """Regex rules over each sentence of a user message; offline and deterministic."""

    name = "rules"

    async def extract(
        self, text: str, *, role: str = "user", known: Mapping[str, Any] | None = None
    ) -> list[Fact]:
        return self.extract_sync(text, role=role, known=known)

    def extract_sync(
        self, text: str, *, role: str = "user", known: Mapping[str, Any] | None = None
    ) -> list[Fact]:
        if role != "user" or not text.strip():
            return []
        known_n = normalise_known(known)
        budget = known_n.get("budget_limit")
        known_currency = budget.get("currency") if isinstance(budget, dict) else None
        compact = re.sub(r"[\s，,。.!！?？~～]", "", text)
        short_message = len(compact) <= 12
        found: dict[str, Fact] = {}
        additive: set[str] = set()
        carried_turn = False
        for sentence in split_sentences(text):
            turn_at = 0 if carried_turn else _turn_at(sentence)
            facts = list(_rule_facts(sentence, turn_at=turn_at, question=is_question(sentence)))
            money = _budget_fact(
                sentence,
                turn_at=turn_at,
                in_context="budget_limit" in found
                or (turn_at is not None and "budget_limit" in known_n),
                known_currency=known_currency,
                short_message=short_message,
            )
            if money:
                facts.insert(0, money)
            # "其实，我改主意了。预算八千。": the turn word speaks for the next statement.
            carried_turn = turn_at is not None and not facts
            currency = default_currency(sentence)
            adds = _ADDITIVE.search(sentence) is not None
            for raw in facts:
                fact = normalise_fact(raw, default_currency=currency)
                if fact is None:
                    continue
                if adds:
                    additive.add(fact.key)
                found[fact.key] = _merge_within_message(found.get(fact.key), fact)
        return [reconcile(f, known_n, additive=f.key in additive) for f in found.values()]


def _merge_within_message(earlier: Fact | None, later: Fact) -> Fact:
    """Later statements in one message win; list items add up; the replaced value is kept."""
    if earlier is None:
        return later
    spec = VOCABULARY.get(later.key)
    if spec is not None and spec.kind == "list" and not (later.override and not spec.accumulate):
        return later.model_copy(update={"value": normalise_list([*earlier.value, *later.value])})
    if same_value(earlier.value, later.value) or later.supersedes is not None:
        return later
    return later.model_copy(update={"supersedes": earlier.value})
