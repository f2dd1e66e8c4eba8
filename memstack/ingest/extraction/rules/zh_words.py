"""Reading Chinese words for the rules: jieba's part-of-speech tags, places (a gazetteer
and jieba), personal names, and the shared pieces of pattern (adverbs, clause ends).

jieba loads on first use, so importing the rules costs nothing until a Chinese sentence is
read.
"""

from __future__ import annotations

import re
import threading
from functools import cache, lru_cache
from importlib.resources import files
from typing import Any

from memstack.core.facts.vocabulary import LANGUAGES
from memstack.ingest.extraction.rules.lexicon import KIN_ZH, OTHERS_ZH, SURNAMES_ZH, TITLES_ZH

CJK = r"[\u4e00-\u9fff·]"
ADV = (
    r"(?:真的|一直|实在|特别|非常|很|比较|最|也|还|其实|都|更|还是|挺|蛮|现在|目前|向来|超级?|平时"
    r"|本来就?|一点儿?|压根儿?|根本|只|倒是)*"
)
# Where a value ends: punctuation, an emoji ("做执业药师💊"), or a word that starts the
# next statement.
_STOP_CHARS = r"[\s，,。.!！?？;；、~～\U0001F300-\U0001FAFF\u2600-\u27BF]"
END = rf"(?=$|{_STOP_CHARS}|今年|住在|住|来自|从事|在|是|的|了|吧|啊|呀|哦|就|哈|呢)"
# After a job: "我是老师的女儿" names no job.
JOB_END = rf"(?=$|{_STOP_CHARS}|今年|住在|住|来自|在|了|吧|啊|呀|哦|哈|呢)"
# The user as subject, alone or with others ("我和老婆都喜欢日料").
ME = r"(?:我们?|我(?:和|跟)[^，,。我]{1,5}?(?=都|也|一起))"
LANG_ZH = "|".join(
    sorted((w for w in LANGUAGES if re.search(r"[\u4e00-\u9fff]", w)), key=len)[::-1]
)
CLASSIFIER = r"(?:一|两|几)?(?:些|[台部个款辆套双件只张把条块副本])?"
LEAD = re.compile(
    r"^(?:其实|不过|还有|另外|那么|就是|然后|而且|对了|哦|嗯|还|也|但是?|可是|所以|因此)+"
)

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


@cache
def gazetteer() -> frozenset[str]:
    """Cities and towns by their Chinese names (``data/places_zh.txt``): jieba tags many of
    them as something else (大连 an adverb, 桂林 a person's name)."""
    text = files("memstack").joinpath("data", "places_zh.txt").read_text("utf-8")
    return frozenset(text.split())


def _known_place(words: tuple[tuple[str, str], ...]) -> str | None:
    """The longest gazetteer name made of whole words at the start: 三明 is a city, but
    not in "三明治店", where jieba reads one word."""
    best, joined = None, ""
    for word, _ in words[:3]:
        joined += word
        if joined in gazetteer():
            best = joined
    return best


def place(text: str, *, strict: bool) -> str | None:
    """The place that ``text`` starts with: a city the gazetteer knows, else, ``strict``,
    only a word jieba tags as a place (after "在X上班", where X may as well be 医院), or
    any noun that is not a generic location (after "住在", which only takes places)."""
    m = re.match(r"[A-Z][A-Za-z]+(?:\s[A-Z][A-Za-z]+)?", text)
    if m:
        return m.group()
    words = tags(text[:12])
    if not words:
        return None
    known = _known_place(words)
    if known is not None:
        return known
    word, flag = words[0]
    if len(word) < 2 or word in _NOT_PLACES or not re.fullmatch(r"[\u4e00-\u9fff]+", word):
        return None
    if flag == "ns" or (not strict and flag[:1] in ("n", "s", "d", "j")):
        return word
    return None


_NAME_TAGS = ("nr", "nrt", "nrfg")
# Parts of speech that never stand inside a name: verbs, adjectives, adverbs, pronouns,
# particles, numerals ("我是学生", "我是新来的").
_NOT_NAME_TAGS = re.compile(r"^(?:v|a|d|p|u|r|m|q|c|y|e|o|f|t)")
_TITLED = re.compile(rf"(?:{TITLES_ZH})$")


def looks_like_zh_name(v: str) -> bool:
    """A Chinese personal name: one word jieba tags as a person, or two to four characters
    opening with a common surname, none of whose words is a verb, adjective or particle."""
    if not 2 <= len(v) <= 4 or _TITLED.search(v):
        return False
    words = tags(v)
    if len(words) == 1:
        # One dictionary word: a name only if jieba knows it as one ("王者" is a noun).
        return words[0][1] in _NAME_TAGS
    surname = next((s for s in SURNAMES_ZH if v.startswith(s)), None)
    if surname is None or len(v) == len(surname):
        return False
    return not any(_NOT_NAME_TAGS.match(flag) for _, flag in words)


def person_name(m: re.Match[str], sentence: str) -> str | None:
    """ "我是李娜": a name only as :func:`looks_like_zh_name` reads it (我是学生 is none)."""
    v = m.group("v") or m.group("v2")
    return v if looks_like_zh_name(v) else None


def proper_name(m: re.Match[str], sentence: str) -> str | None:
    """After a self-reference ("本人X，"): a name when jieba reads only proper nouns there
    (it splits rare names into surname and place, but "本人觉得" is a verb)."""
    words = tags(m.group("v"))
    return (
        m.group("v") if words and all(f in ("nr", "nrt", "nrfg", "ns") for _, f in words) else None
    )


# Anyone but the user who could be the subject a clause leaves out.
PERSON = re.compile(rf"他|她|{KIN_ZH}|{OTHERS_ZH}|人家|有人|大家|别人")


# Word classes that never name a thing on their own: place and time words,
# pronouns, numerals, measure words, particles ("新", "以后"). jieba's tags for short
# product names are unreliable (相机 comes out an adverb), so only these decide.
_NEVER_A_THING = re.compile(r"^(?:f|t|r|m|q|u|y|p|c)")


def as_thing(value: str) -> str | None:
    """``value`` as the name of a thing, or None when it names none: a verb after a noun
    is cut ("宠物摄像头装" → "宠物摄像头"), and words of classes that name no thing alone
    ("新", "以后") are none."""
    words = list(tags(value))
    if len(words) > 1 and words[-1][1].startswith("v") and words[-2][1].startswith("n"):
        words.pop()
    if all(_NEVER_A_THING.match(flag) or (flag == "a" and len(w) == 1) for w, flag in words):
        return None  # ("微单" is tagged an adjective too: only a lone character is refused)
    return "".join(w for w, _ in words) or None
