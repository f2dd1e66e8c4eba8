"""Budgets: the most the user says they will spend, in Chinese, English or a mix.

A number is a budget only with something that makes it one: a cue word (预算, 以内, under,
max), a range or a change ("从五千改到八千"), or a budget already under discussion. A
number the user mentions only to dismiss it ("四千的配置都太低了", "the $500 ones"), money
already spent, and someone else's budget are not the user's limit.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memstack.core.facts.fact import Fact
from memstack.core.facts.vocabulary import (
    AMBIGUOUS_CURRENCY,
    CURRENCY_WORDS,
    NUMBER_PATTERN,
    currency_code,
    default_currency,
    has_han,
    parse_number,
    spelled_out,
    tidy_number,
)
from memstack.ingest.extraction.rules.lexicon import KIN_EN, KIN_ZH, OTHERS_EN, OTHERS_ZH
from memstack.ingest.extraction.rules.sentences import other_subject


def _spellings(symbols: bool) -> str:
    words = [w for w, _ in CURRENCY_WORDS if (unicodedata.category(w[-1]) == "Sc") == symbols]
    return "|".join(re.escape(w) for w in words)  # already longest first


# Spelt currencies that stand before the amount ("RM2,500", "Rp 50.000", "KSh 800").
_CODES_BEFORE = "|".join(
    sorted({w for w, _ in CURRENCY_WORDS if re.fullmatch(r"[a-z]{2,3}", w)}, key=len, reverse=True)
)
_MONEY = re.compile(
    r"(?<![A-Za-z\d.\-_#])"
    rf"(?P<pre>(?i:{_spellings(True)})|(?i:{_CODES_BEFORE})(?=\s*\d))?\s?"
    rf"(?P<num>{NUMBER_PATTERN})"
    rf"(?P<suf>\s*(?:(?i:{_spellings(False)})(?![A-Za-z'’])))?"
)
# A number followed by one of these measures something other than money.
_NOT_MONEY = re.compile(
    r"\s*(?:个?小时|寸|英寸|公斤|斤|克|年|个月|月|天|日|号|岁|人|口人|个|台|部|次|分钟|分|秒|核|毫米"
    r"|厘米|米|公里|周|星期|倍|屏|显示|帧|瓦|伏|尼特|位|楼|层|代|系列|款|英里|磅|点|晚|折|星|%|％|\""
    r"|(?i:h|hrs?|hours?|inch(?:es)?|kg|g|grams?|gb|tb|mb|t|min|mins|minutes?|hz|w|mah|mm|cm"
    r"|km|days?|nights?|years?|yrs?|months?|weeks?|people|persons?|times|p|fps|v|nits?|miles?"
    r"|lbs?|oz|stars?|percent|pm|am|of us|kids?|screen|display|monitor|tv|video|resolution"
    # (no \b: "1080p的" has no word boundary between p and 的)
    r"|y/?o|years? old)(?![A-Za-z0-9]))"
)
# The number names a price tier, not a limit ("四千的配置", "the $500 ones"), unless it
# closes a range ("五千到八千的").
_TIER_AFTER = re.compile(
    # ("两三百块的就行": the tier the user will take is the limit)
    r"\s*(?:块|元)?的(?!预算|价位|价格|上限|范围|以内|左右|就行|就好|就够|就可以|也行)"
    r"|(?i:\s*(?:ones?|models?|options?|versions?|tier)\b)"
)
# The number is mentioned to be dismissed: "五千太少了", "1000 is too low".
# A number said to be wrong: "四百！不是四千", "it's 400, not 4000".
_NEGATED_BEFORE = re.compile(r"(?:不是|而不是|并非|(?i:\bnot\b|\bisn't\b|\bnever\b))\s*[$€£¥]?\s*$")
_DISMISSED_AFTER = re.compile(
    r"\s*(?:(?:块|元)?(?:的)?(?:都|也)?(?:太|有点|还是)(?:少|低|紧|贵|高|便宜|多)|不够|不行)"
    r"|(?i:\s*(?:is|was|seems|feels|'s)\s+(?:way\s+|a bit\s+|too\s+|kinda\s+)*(?:too|not enough)\b)"
)
# "再加两千", "another 200": an increment, not the new total.
_INCREMENT_BEFORE = re.compile(
    r"(?:再加|多加|加|(?<![最至])多出|再多|(?i:\badd(?:ing)?|\banother|\bextra|\bplus))\s*$"
)
# A question about the amount itself asks, it does not set: "预算五千够吗？", "is $800 enough?"
_ASKS_ABOUT_AMOUNT = re.compile(
    r"够|合理|合适|值得|值不值|贵不贵|多不多|高不高|应该|是不是|至少|起码|最少|得多少|要多少|需要多少"
    r"|(?i:\benough\b|\breasonable\b|\brealistic\b|\bworth\b|\btoo (?:much|little|low|high)\b"
    r"|\bshould I\b|\bdo you think\b|\bat least\b|\bdo I need\b|\bwould I need\b|\bis that\b)"
)
_UNKNOWN_CODE = re.compile(r"\s*[A-Z]{3}\b")
_AMBIGUOUS_AFTER = re.compile(rf"\s*(?:{AMBIGUOUS_CURRENCY})(?![A-Za-z])")
_SHARED_UNIT = re.compile(
    r"\s*(?:到|至|-|–|~|～|(?i:to|and))\s*(?P<upper>\d+(?:\.\d+)?)\s*(?P<unit>[kKw千万]|(?i:thousand|grand))"
    r"(?![A-Za-z\d])"
)
# A change of a known budget needs no turn word when the user tells it to change: "bump it
# to 750", "往上调到六千". Only at the head of a clause: "the price dropped to 800" and
# "价格降到三千了" report a price, not a new limit. "决定上到…" decides the new limit.
_CHANGE_TO = re.compile(
    r"^\s*(?:那|就|再|我|预算|要不|还是|可以|决定|打算|准备)*(?:往上|往下)?(?:调|提|提高|涨|降|降低|改|加|放宽|压|减|砍|上)到"
    r"|^\W*(?i:(?:ok|okay|hmm|so|let's|can you|could you|please|I'll|I will|I'd|I'm gonna)\s+)*"
    r"(?i:bump|rais|increas|lower|push|cut|reduc|chang|mov|bring|drop|trim|knock)\w*"
    r"(?i:\s+(?:it|that|this|the\s+budget|my\s+budget|the\s+limit))?(?i:\s+(?:up|down))?\s+to\b"
)
# Loosening (or tightening) the known budget without saying "to": "再多给点空间，两百也行",
# "I can stretch a little, 900 works". Its bare amounts are the new limit.
LOOSEN = re.compile(
    r"再多(?:给|加|出|花)|多给(?:点|些)?(?:空间|预算)|再加(?:点|些|一点)|放宽|(?:往上|往下)(?:调|提|加|浮|走)"
    r"|预算再(?:加|多|提|高)|(?i:\bstretch (?:to|it|the budget|my budget|a (?:bit|little))\b"
    r"|\bgo (?:a bit |a little )?higher\b|\bwiggle room\b|\d\s+it\s+is\b"
    r"|\b(?:raise|increase) (?:it|the budget|my budget)\b)"
)
_YEAR_BEFORE = re.compile(r"(?i:\b(?:in|since|from|by|until|before|after|of)\s+|[在于从到]\s*)$")
_BUDGET_CUE = re.compile(
    r"预算|价位|以内|之内|以下|(?:不|别|不要|不能|不想)超过|上限|最多|顶多|最高|可以到|能到"
    r"|接受|控制在|左右|上下|出头|加到|放宽到|预留|封顶|顶天|撑死|就行|就够|就好|定在|定的是|只有|只剩"
    r"|(?i:\bbud(?:get|eget|egt|jet|gt|gte)|\bafford|\bspend"
    r"|(?<!went )(?<!goes )(?<!gone )(?<!rose )\bup to\b|\bat most\b|\bmax(?:imum)?\b"
    r"|\bno more than\b|\bnot more than\b|\bunder\b|\bbelow\b|\bwithin\b|\bless than\b"
    r"|\bprice (?:range|limit|cap)"
    r"|\bmax price|\blimit\b|\bcap\b|\baround\b|\broughly\b|\bstretch\b|\bgo to\b|\btops\b"
    r"|\bnothing (?:over|above|more than)\b|\bkeep it\b|\blet's (?:say|do|go with)\b|\bsettle on\b"
    r"|\bcap(?:ping|ped)?\s+(?:it|this|that|the\s+\w+)?\s*at\b"
    r"|\b(?:won't|will not|not|never|don't|can't|cannot)\s+"
    r"(?:go|going|spend|spending|pay|paying)\s+(?:over|above|past|beyond|more than)\b"
    r"|\bonly (?:have|got)\b|\bceiling\b|\bat the (?:very |absolute )?most\b"
    # "not a penny more", "and not a cent over": the sum is the cap, whatever the coin
    r"|\bnot (?:a|one) \w+ (?:more|over)\b)"
)
_PAST_SPEND = re.compile(r"花了|付了|买了|用了|花掉|(?i:\bspent\b|\bpaid\b|\bcost me\b|\bbought\b)")
_BUDGET_WORD = re.compile(r"预算|(?i:\bbud(?:get|eget|egt|jet|gt|gte))")
# Someone else's budget: "my sister's budget", "他的预算", "我朋友预算".
_OTHERS_BUDGET = re.compile(
    rf"(?<![给为帮替送]我)(?<![给为帮替送])(?:他|她|他们|她们|{KIN_ZH}|{OTHERS_ZH})的?预算"
    rf"|(?i:\b(?:his|her|their|(?:{KIN_EN}|{OTHERS_EN})'s?)\s+(?:\w+\s+)?budget)"
)
# The user's own, set against someone else's: "mine's closer to 400", "我的呢，大概九百".
_MINE = re.compile(
    r"^\W*(?:我的|我自己的?|我这边|(?i:mine\b|mine's|my own\b|as for me\b|for me\b))"
)
_JOIN = re.compile(
    r"^\s*(?:到|至|-|–|—|~|～|到了|(?i:to|and|through))\s*[$€£¥₹]?\s*$"
    r"|^\s*(?P<change>改到|改成|改为|提到|提高到|涨到|加到|降到|降低到|调到|调整到|变成|换成|->|→|=>)\s*$"
)
_CHANGE_VERB = re.compile(r"改|调|提高|涨|降|(?i:\bchang|\braise|\bincreas|\bbump|\blower|\bmov)")
# Colons stay inside a clause: "预算：5000" is one statement.
_CLAUSE = re.compile(r"[，；;]|,(?!\d{3}(?!\d))|\s+but\s+")
# "5000-8000", "£25-£40": a range; "i7-13700" is a model number (a letter before the first number).
_DASH_RANGE = re.compile(r"(?<![A-Za-z\d.\-_#])(\d[\d,.]*[kKw万千]?)\s*[-–~～]\s*(?=[$€£¥₹]?\d)")
# Currency words that name money wherever they stand: 刀 (knife), 欧 (北欧) and 块 (piece)
# count only right after a number.
_NAMED_CURRENCY = re.compile(
    "|".join(
        (re.escape(w) if not w.isascii() or not w.isalpha() else rf"\b{re.escape(w)}\b")
        for w, _ in CURRENCY_WORDS
        # ("won" is a currency only right after an amount: "we won", "won't")
        if (len(w) > 1 or not re.fullmatch(r"[\u4e00-\u9fff]", w)) and w != "won"
    ),
    re.IGNORECASE,
)


@dataclass(frozen=True)
class _Amount:
    value: float
    currency: str | None
    start: int
    end: int
    magnitude: bool  # written with 千/万/k: clearly a sum, not a count
    tier: bool = False  # "五千的": a price tier, a budget only as the end of a range


@dataclass
class BudgetContext:
    """What one message has said about budgets so far, carried from sentence to sentence."""

    known: dict[str, Any] | None  # the user's current budget, if any
    topic: bool = False  # a budget (anyone's) came up earlier in the message
    topic_currency: str | None = None
    reference: float | None = None  # the amount last talked about
    chosen: list[Fact] = field(default_factory=list)


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
        if not marker and (
            _UNKNOWN_CODE.match(clause, m.end()) or _AMBIGUOUS_AFTER.match(clause, m.end())
        ):
            # "2000 XYZ", "200 pesos": a currency we cannot name, better no budget than USD
            continue
        shared = _SHARED_UNIT.match(clause, m.end())
        if shared and "and" in shared.group().casefold():
            # "3 and 5k" is a range only as "between 3 and 5k".
            shared = shared if re.search(r"(?i:\bbetween\s+)$", clause[: m.start()]) else None
        if shared and not marker and not magnitude and value < float(shared.group("upper")):
            # "between 8 and 12k", "8到12万": the unit of the upper bound is the lower's too
            # (not in "900 to 1.2k", where the lower bound is already in units).
            value *= parse_number("1" + shared.group("unit")) or 1
            magnitude = True
        if not marker and not magnitude and (has_han(num) or value < 20):
            continue  # 一下, 两个, "up to 8": numerals that are not sums
        year = re.fullmatch(r"\d{4}", num) and 1900 <= value <= 2100
        if not marker and year and _YEAR_BEFORE.search(clause[: m.start()]):
            continue  # "in 2024", "从2020年": a year
        before = clause[max(0, m.start() - 12) : m.start()]
        if (
            _DISMISSED_AFTER.match(clause, m.end())
            or _INCREMENT_BEFORE.search(before)
            or _NEGATED_BEFORE.search(before)
        ):
            continue
        if re.fullmatch(
            r"[一二两三四五六七八九十百千万零〇]+[一二两三四五六七八九]", num
        ) and re.match(r"[节个次件份张台斤位只本]", clause[m.end() : m.end() + 1]):
            # "三四百一节": the last numeral counts the lessons, not money
            value = parse_number(num[:-1]) or value
        currency = currency_code(marker) if marker else None
        tier = _TIER_AFTER.match(clause, m.end()) is not None
        found.append(_Amount(value, currency, m.start("num"), m.end(), magnitude, tier))
    return found


def _plausible_change(amount: _Amount, reference: float | None) -> bool:
    """A bare number ("make that 850") replaces a budget only near it in size."""
    if amount.currency or amount.magnitude:
        return True
    return reference is not None and 0.2 <= amount.value / reference <= 5


def _clause_budget(
    clause: str, *, turn: bool, ctx: BudgetContext, open_: bool
) -> tuple[_Amount, _Amount | None] | None:
    """The limit stated in one clause and, for "从五千改到八千", the value it replaced.

    ``open_``: a bare amount may be taken without a cue word, because a budget is under
    discussion and no other amount of this sentence has claimed the place.
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
    if not pairs:
        amounts = [a for a in amounts if not a.tier]
        if not amounts:
            return None
    reference = _known_amount(ctx) or ctx.reference
    contextual = open_ and (
        any(_plausible_change(a, reference) for a in amounts)
        or (ctx.topic and _MINE.search(clause) is not None)
    )
    if not (_BUDGET_CUE.search(clause) or pairs or contextual):
        return None
    if pairs:
        first, second, m = pairs[-1]
        if m.group("change") or turn or _CHANGE_VERB.search(clause):
            # A turn word makes "5000 to 8000" a change, never a compromise: the new value.
            return second, first
        return (first if first.value > second.value else second), None
    return amounts[-1], None


def _known_amount(ctx: BudgetContext) -> float | None:
    amount = (ctx.known or {}).get("amount")
    return float(amount) if isinstance(amount, int | float) else None


def _clauses(sentence: str) -> list[tuple[int, str]]:
    starts = [0, *(m.end() for m in _CLAUSE.finditer(sentence))]
    ends = [*(m.start() for m in _CLAUSE.finditer(sentence)), len(sentence)]
    return [(a, sentence[a:b]) for a, b in zip(starts, ends, strict=True)]


def _others(clause: str, ctx: BudgetContext) -> bool:
    """Whether the clause states someone else's budget; it still puts budgets on topic."""
    if not (_OTHERS_BUDGET.search(clause) or (other_subject(clause) and _amounts(clause))):
        return False
    amounts = _amounts(clause)
    ctx.topic = True
    if amounts:
        ctx.topic_currency = amounts[-1].currency or ctx.topic_currency
        ctx.reference = amounts[-1].value
    return True


def budget_fact(
    sentence: str,
    *,
    turn_at: int | None,
    ctx: BudgetContext,
    short_message: bool,
    question_at: int | None = None,
) -> Fact | None:
    """The user's budget stated in ``sentence``, if any; updates ``ctx``."""
    written = sentence  # its language names the currency when nothing else does
    sentence = _DASH_RANGE.sub(r"\1到", spelled_out(sentence))
    chosen: tuple[_Amount, _Amount | None, str] | None = None
    end = len(sentence)
    discussed = ctx.topic or (
        ctx.known is not None and (turn_at is not None or LOOSEN.search(sentence) is not None)
    )
    for offset, clause in _clauses(sentence):
        if _others(clause, ctx):
            discussed = True
            continue
        asked = question_at is not None and offset + len(clause) > question_at
        if asked and _ASKS_ABOUT_AMOUNT.search(clause):
            # the amount is asked about, but the budget is on the table
            ctx.topic = ctx.topic or _BUDGET_WORD.search(clause) is not None
            continue
        if ctx.known is not None and (
            _DISMISSED_AFTER.search(clause) or _INCREMENT_BEFORE.search(_before_amounts(clause))
        ):
            # "2000 is too low, let's say 2500": dismissing the old sum opens the change.
            turn_at = offset if turn_at is None else turn_at
            discussed = True
        if ctx.known is not None and _CHANGE_TO.search(clause):
            turn_at = offset if turn_at is None else turn_at
            discussed = True
        turn = turn_at is not None and turn_at < offset + len(clause)
        # After one amount is taken, a later bare one needs a turn word between them.
        open_ = discussed and (chosen is None or (turn and turn_at is not None and turn_at >= end))
        got = _clause_budget(clause, turn=turn, ctx=ctx, open_=open_)
        if got:
            new, old = got
            chosen = (new, old or (chosen[0] if chosen else None), clause)
            end = offset + len(clause)
            discussed = True
    confidence, source = 0.95, "user_stated"
    if chosen is None and short_message and not ctx.topic and question_at is None:
        # "5000元", "1.5万" as a whole message: nearly always the answer to "what is your
        # budget?", but that is our guess, so it is marked extracted, not stated.
        amounts = [a for a in _amounts(sentence) if a.currency or a.magnitude]
        if len(amounts) == 1 and _only_an_amount(sentence, amounts[0]):
            chosen = (amounts[0], None, sentence)
            confidence, source = 0.6, "extract"
    if chosen is None:
        return None
    return _fact(sentence, written, chosen, ctx, turn_at, end, confidence, source)


def _before_amounts(clause: str) -> str:
    m = _MONEY.search(clause)
    return clause[: m.start()] if m else ""


def _named_currency(text: str) -> str | None:
    m = _NAMED_CURRENCY.search(text)
    return currency_code(m.group()) if m else None


def _only_an_amount(sentence: str, amount: _Amount) -> bool:
    """Whether the sentence is the amount and little else ("5000元吧", "1.5万左右")."""
    rest = sentence[: amount.start] + sentence[amount.end :]
    rest = re.sub(
        r"[\W_]|吧|左右|以内|的样子|差不多|大概|(?i:about|around|max|tops|ish|maybe)", "", rest
    )
    return len(rest) <= 2


def _fact(
    sentence: str,
    written: str,
    chosen: tuple[_Amount, _Amount | None, str],
    ctx: BudgetContext,
    turn_at: int | None,
    end: int,
    confidence: float,
    source: str,
) -> Fact:
    new, old, clause = chosen
    known_currency = (ctx.known or {}).get("currency")
    currency = (
        new.currency
        or (old.currency if old else None)
        or _named_currency(clause)
        or _named_currency(sentence)
        or (known_currency if isinstance(known_currency, str) else None)
        or ctx.topic_currency
        or default_currency(written)
    )
    supersedes = None
    if old is not None and old.value != new.value:
        supersedes = {"amount": tidy_number(old.value), "currency": old.currency or currency}
    ctx.topic, ctx.topic_currency, ctx.reference = True, currency, new.value
    return Fact(
        key="budget_limit",
        value={"amount": tidy_number(new.value), "currency": currency},
        type="constraint",
        confidence=confidence,
        source=source,  # type: ignore[arg-type]
        supersedes=supersedes,
        override=turn_at is not None and turn_at < end,
    )


def known_budget(known: Mapping[str, Any]) -> dict[str, Any] | None:
    budget = known.get("budget_limit")
    return budget if isinstance(budget, dict) else None
