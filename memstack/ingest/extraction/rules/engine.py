"""How a table of regex rules becomes facts: matching, the value a match names, whose
statement it is, and the values that are no values at all.

Each language module (:mod:`.zh`, :mod:`.en`) only declares rules; this module applies
them all the same way.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from memstack.core.facts.fact import Fact
from memstack.core.facts.vocabulary import VOCABULARY, has_han
from memstack.ingest.extraction.rules.sentences import MASK, clause_starts, other_subject

# A value builder reads the match (and the sentence it is in) and returns the raw value,
# a string or a list of strings; None drops the match.
ValueOf = Callable[[re.Match[str], str], Any]


@dataclass(frozen=True)
class Rule:
    key: str
    pattern: re.Pattern[str]
    confidence: float = 0.9
    # Profile statements inside a question ("我叫什么名字？") are not statements.
    statements_only: bool = False
    reject: re.Pattern[str] | None = None  # tested on the raw value
    value: ValueOf | None = None  # None: group "v" (or v2...), else the rest of the clause
    retracts: bool = False
    # The rule itself names its subject (family: "my wife"), so a clause about another
    # person does not silence it.
    any_subject: bool = False
    # Whether the matched text is taken from later rules. A rule that only locates its
    # value ("在苏州做会计": the city) leaves the words to others (the occupation).
    claims: bool = True


def rule(key: str, pattern: str, confidence: float = 0.9, **kw: Any) -> Rule:
    return Rule(key, re.compile(pattern), confidence, **kw)


@dataclass(frozen=True)
class Scope:
    """What the rules may take from one sentence."""

    turn_at: int | None
    question_at: int | None  # where the sentence's question starts, if it asks one


# --- values ----------------------------------------------------------------------------------

_STOP_WORDS = frozenset(
    "i i'm i'd my me you we they it it's he she but so because since please and then also "
    "however though although if which that this do don't dont not no never stop the especially "
    "particularly mainly mostly like except such love hate enjoy prefer allergic "
    # Degree words open a judgement ("cruises, way too crowded"), not another item.
    "way too very really pretty kinda quite super overly far much totally ever even mine our "
    "their his her".split()
)
_VERBISH = re.compile(
    r"(?i:\b(?:is|are|was|were|be|been|am|has|have|had|do|does|did|can|could|will|would"
    r"|should|get|gets|got|makes?|looks?|feels?|matters?)\b|'s\b|'re\b|n't\b|\b\w+ing\s+to\b)"
)
_HARD_STOP = re.compile(
    r"[，；;：:。！？!?\n]|但是|可是|因为|所以|不过|而且|并且|然后|预算|〔"
    r"|(?i:\s+(?:but|because|since|so|though|although|while|whereas|unless|if|and i|and my"
    r"|instead|anymore|any more|either|lol|haha|pls|please|btw|fyi|though|tho|now|these days"
    r"|nowadays|lately|at the moment|most|more|better|the most|too much|so much|a lot"
    r"|very much|over|rather than|instead of|more than|than)\b)"
)
# Words that can sit where a value goes without being one: pronouns, particles, fillers.
_JUNK = frozenset(
    """的 了 吧 呢 啊 它 它们 他 她 这个 那个 这些 那些 这种 那种 这样 那样 东西 一切 所有 什么
    都 也 就 还 很 太 好 行 嗯 哦 them it that this those these one ones stuff things thing
    everything anything something nothing all much more lot lots some any none way kind sort
    mine yours his hers theirs ours here there him her us you me 你 您 我 你们 他们 她们
    now then anymore either though tho em 'em
    以后 之后 以前 之前 现在 今后 往后 下次 这次 再也 永远""".split()
)
# Confidence of a goal read from a bare need ("I need a X", "想要一个X"): it names the
# goal only while no other goal is in play.
WEAK_GOAL = 0.7
# Confidence of a name given as what to be called ("叫我小静就行", "call me Bob"): it
# names the user only while no full name is known.
NICKNAME = 0.88
# Confidence of a goal read from a switch ("改成X吧", "X instead"): a switch names a goal
# only when there is one to switch from.
SWITCHED_GOAL = 0.75
MAX_VALUE_CHARS = 60
_MAX_VALUE_WINDOW = 4 * MAX_VALUE_CHARS


_FIRST_PERSON = re.compile(r"\b(?:I|I'm|I've|I'd|I'll|my|me)\b")


def cut(rest: str) -> str:
    """The value part of "…喜欢X，…": up to the end of the clause.

    English lists run over commas ("hiking, reading and chess") when the next piece is a
    short noun phrase, not a new statement ("…Canon, the lenses are amazing").
    """
    rest = rest[:_MAX_VALUE_WINDOW]  # values are short; scanning further is quadratic
    m = _HARD_STOP.search(rest)
    if m:
        rest = rest[: m.start()]
    parts = rest.split(",")
    kept = [parts[0]]
    for i, part in enumerate(parts[1:], 2):
        words = part.split()
        if i == len(parts) and len(words) >= 2 and words[0].casefold() in ("and", "or"):
            words = words[1:]  # "hiking, biking, and reading": the list's last item
        if (
            not words
            or len(words) > 4
            or words[0].casefold().strip(".!?") in _STOP_WORDS
            or has_han(part)
            or _VERBISH.search(part)
            # a list item never speaks of the user: "…, anyway I'm vegetarian" is a new statement
            or _FIRST_PERSON.search(part)
            # nor opens with a verb in the past: "…, tried one, hated it"
            or re.match(r"(?i)[a-z]+ed\b", words[0])
        ):
            break
        kept.append(part)
    return ",".join(kept).strip()


# Values that point at something in the conversation instead of naming it: "that idea",
# "your suggestions", "how you explained it", "the cheaper one", "这个推荐", "第一个".
_DEICTIC = re.compile(
    r"^(?i:(?:that|this|these|those|your|yours|it|its|how|what|when|where|why|who|which"
    r"|whatever|anything|something|nothing|everything)\b)"
    r"|(?i:\b(?:one|ones|option|options|choice)$)"
    r"|^(?:这|那|第[一二三四五六七八九十\d]|你|您|他|她|它|咱)"
)
# "I love to cook" likes cooking; "I hate to say it" and "don't want to spend" like nothing.
_TO_VERB = re.compile(r"^to\s+(?P<verb>[a-z-]+)$", re.IGNORECASE)
_FUNCTION_VERBS = frozenset(
    "be do have get go make say tell see hear know spend pay wait ask admit bother think "
    "waste lose miss buy sound be".split()
)


def is_junk(value: str) -> bool:
    """A value that is only a pronoun, a particle, a pointer or a masked quote."""
    s = value.strip(" \t\"'“”‘’。.,，!！?？~～")
    if not s or MASK in s or "〔" in s or re.fullmatch(r"[了吧呢啊哈啦呀哦嘛]+", s):
        return True
    if s.casefold() in _JUNK or re.fullmatch(r"[\d\s.,]+", s):
        return True
    if re.fullmatch(r"[\d\s.,kKwW$€£¥~\-–]+", s) and re.search(r"[kKwW$€£¥]", s):
        return True  # an amount ("1k-1.5k"), never a thing
    if re.match(r"(?:一?[点些]|个)?(?:东西|啥|什么)|一?[点些](?:吃|喝|用|玩)", s):
        # "(买)点东西奖励自己": "something" heads the phrase, so it names nothing.
        return True
    return s.casefold().startswith("to ") and _infinitive(s) is None


# Keys whose values are things the user names in passing, where a pointer can stand.
POINTABLE = frozenset({"likes", "dislikes", "focus", "do_not_recommend", "goal"})


def is_pointer(value: str) -> bool:
    return _DEICTIC.search(value.strip()) is not None


def _infinitive(value: str) -> str | None:
    m = _TO_VERB.match(value)
    return m["verb"] if m and m["verb"].casefold() not in _FUNCTION_VERBS else None


# A vague tail that stands for "and similar things": "Lego and stuff like that" likes Lego.
_VAGUE_TAIL = re.compile(
    r"(?i:\s+at\s+all|\s+whatsoever"
    r"|(?:\s*,?\s*(?:and|or)\s+|^)(?:stuff|things|everything|anything|something|whatnot)"
    r"(?:\s+(?:like\s+(?:that|this|it)|of\s+(?:that|the)\s+(?:sort|kind)))?"
    r"|\s*,?\s*(?:etc\.?|and so on|and the like|or whatever|or so)"
    r"|\s+(?:really|mostly|mainly|honestly|tbh))$"
)
# A list item is a thing; a degree word opens a judgement about one, not a thing:
# "I don't like cruises, way too crowded", "不喜欢那家，太吵了".
_JUDGEMENT = re.compile(
    r"^(?i:(?:(?:way|far|much|a\s+bit|a\s+little|kinda|kind\s+of|pretty|really|just)\s+)?"
    r"(?:too|so|very|overly|super|quite)\s+[a-z-]+$)"
    r"|^(?:太|有点|有些|非常|特别|挺|很)[\u4e00-\u9fff]{1,3}了$|^(?:有点|有些)[\u4e00-\u9fff]{1,3}$"
)
_DISCOURSE = re.compile(r"^(?i:(?:actually|well|ok|okay|so|oh|honestly|anyway|and|but)[,\s]+)+")
# "我喜欢的那款…": 的 after the verb makes a relative clause, so nothing after it is liked.
_RELATIVE = re.compile(r"^的")
# What an allergy does to one, never what one is allergic to.
_SYMPTOM = re.compile(
    r"(?i:\b(?:hives|rash(?:es)?|swelling|itch(?:ing|y)?|anaphylaxis|anaphylactic|sneezing"
    r"|wheezing|breakouts?|bloating|cramps|headaches?|puffy|reactions?)\b)"
    r"|起疹子|红疹|过敏反应|浮肿|发痒|瘙痒|打喷嚏|休克"
)
_LIST_KEYS = frozenset({"likes", "dislikes", "focus", "do_not_recommend", "allergies"})


# Characters that do not occur in Chinese given names but do in the phrases a loose
# "我叫…" can catch ("叫不出这个牌子", "我叫的外卖").
_NOT_IN_ZH_NAME = re.compile(r"[不没这那个的了吗呢吧么啥些]")
# Words that can follow "call me" / "my name is" without being a name.
_NOT_A_NAME = frozenset(
    "whatever anything anyone anybody nobody someone somebody everyone everybody whoever "
    "whichever nothing something dude bro buddy pal mate boss sir madam maam anytime later "
    "back crazy old young lazy dr mr mrs ms miss prof".split()
)


def _looks_like_name(v: str) -> bool:
    """A person's name: a few CJK characters without function words, or words of letters
    none of which is a pronoun or filler."""
    if has_han(v):
        return len(v) <= 4 and not _NOT_IN_ZH_NAME.search(v)
    words = v.split()
    return bool(words) and not any(w.casefold().strip(".'") in _NOT_A_NAME for w in words)


def _tidy(value: str, key: str) -> str | None:
    if _RELATIVE.match(value.strip()):
        return None
    # "华为的", "Nikon的": a trailing 的 only marks the noun the user left out.
    v = re.sub(r"(?<=[\u4e00-\u9fffA-Za-z0-9])的+$", "", value.strip())
    # A discourse word opening the clause is no part of the value ("actually ankle support").
    v = _DISCOURSE.sub("", v)
    # Quote marks around a word the user stressed ("I don't like 'smart' TVs").
    v = re.sub(r"[\"“”「」『』‘’]|(?<![A-Za-z])'|'(?![A-Za-z])", "", v).strip()
    if key in _LIST_KEYS:
        v = _VAGUE_TAIL.sub("", v).strip()
        # "the look of stainless steel": the thing, not its look
        v = re.sub(
            r"^(?i:the\s+(?:look|smell|taste|sound|feel|texture|idea|thought)\s+of\s+)", "", v
        )
        # "stuff from tiktok shop", "商场啥的": the source named, not a pointer to it
        v = re.sub(r"^(?i:(?:stuff|things|anything|products|items)\s+(?:from|by|at|on)\s+)", "", v)
        v = re.sub(r"(?:啥的|啥|什么的|之类的?|等等|的东西|的玩意儿?)$", "", v).strip()
        if key == "allergies":  # "allergic to penicillin and to cats"
            v = re.sub(r"^(?i:to|of)\s+", "", v)
            # "allergic to sesame, proper hives": how it shows is no allergen
            v = ",".join(p for p in v.split(",") if not _SYMPTOM.search(p.strip()))
        # "hate crowds too", "salsa dancing 💃": an adding word or an emoji closes the item
        v = re.sub(
            r"(?i:\s+(?:too|as well|also))$|\s*[\U0001F300-\U0001FAFF\u2600-\u27BF]+$", "", v
        )
        if _JUDGEMENT.search(v):
            return None
    if is_junk(v) or (key in POINTABLE | {"name"} and is_pointer(v)):
        return None
    if key == "name" and not _looks_like_name(v):
        return None
    return _infinitive(v) or v


def _junk_free(value: Any, key: str) -> Any:
    if isinstance(value, list):
        kept = [t for v in value if isinstance(v, str) and (t := _tidy(v, key))]
        return kept or None
    if isinstance(value, str):
        return _tidy(value, key)
    return value


def _raw_value(r: Rule, m: re.Match[str], sentence: str) -> tuple[Any, int]:
    """The value of match ``m`` and where the text it covers ends."""
    if r.value is not None:
        return r.value(m, sentence), m.end()
    groups = {k: v for k, v in m.groupdict().items() if v and k.startswith("v")}
    if groups:
        return next(iter(groups.values())), m.end()
    raw = cut(sentence[m.end() :])
    return raw, m.end() + len(raw)


# A Chinese clause after a comma that names no subject of its own keeps the one before it:
# in "我女儿叫朵朵，今年六岁，对牛奶过敏" the allergy is the daughter's. A clause opening
# with the user ("我…") or a new person (checked by other_subject) starts its own chain.
_OWN_SUBJECT_ZH = re.compile(
    r"^\s*(?:而且|但是|不过|可是|然后|另外|还有|对了|其实|那|就是)*"
    r"(?:请|帮|给|替|麻烦)?(?:我|咱|俺|本人|自己)"
)
_FOR_THEM = re.compile(r"[给帮为替](?:他|她|它)")
_CJK_START = re.compile(r"^\s*[\u4e00-\u9fff]")


def _topic_carried(sentence: str, start: int) -> bool:
    clause = sentence[start : start + 80]
    return (
        sentence[start - 1 : start] in ("，", ",")
        and _CJK_START.match(clause) is not None
        and _OWN_SUBJECT_ZH.match(clause) is None
        # "想给她买…": the person before is the one bought for, so the user is the subject
        and _FOR_THEM.search(clause) is None
    )


# --- applying rules --------------------------------------------------------------------------


def apply_rules(rules: Iterable[Rule], sentence: str, scope: Scope) -> Iterable[Fact]:
    """Facts the rules find in one sentence. The first rule to claim a stretch of text wins
    it, so more specific rules come first ("不要推荐" before "喜欢")."""
    claimed = bytearray(len(sentence))  # per character: a bitmap keeps long inputs linear
    starts = clause_starts(sentence)
    others: dict[int, bool] = {}

    def someone_else(pos: int) -> bool:
        i = bisect.bisect_right(starts, pos) - 1
        start = starts[i]
        if start not in others:
            # The subject opens the clause: its first words are enough.
            clause = sentence[start : start + 80]
            others[start] = other_subject(clause) or (
                i > 0 and _topic_carried(sentence, start) and someone_else(starts[i - 1])
            )
        return others[start]

    for r in rules:
        for m in r.pattern.finditer(sentence):
            if any(claimed[m.start() : m.end()]):
                continue
            if r.statements_only and scope.question_at is not None and m.end() > scope.question_at:
                continue
            if not r.any_subject and someone_else(m.start()):
                continue
            raw, end = _raw_value(r, m, sentence)
            raw = _junk_free(raw, r.key)
            if raw is None and not r.retracts:
                continue
            if isinstance(raw, str) and (
                len(raw) > MAX_VALUE_CHARS or (r.reject and r.reject.search(raw))
            ):
                continue
            if r.claims:
                claimed[m.start() : end] = b"\x01" * (end - m.start())
            yield Fact(
                key=r.key,
                value=raw,
                type=VOCABULARY[r.key].type,
                confidence=r.confidence,
                source="user_stated",
                # A turn word speaks for what follows it: "我喜欢A，不过预算改成八千".
                override=scope.turn_at is not None and scope.turn_at < end,
                retracts=r.retracts,
            )
