"""Statements that lean on what came before them: they name a value but not its key.

- A continuation extends the list just stated: "我喜欢简约风，黑白灰那种", "safety is my
  top priority, then weight".
- An ellipsis adds to a list stated earlier: "还有榴莲，闻着就受不了", "oh and the camera
  too". Its key is the one its sentence's sentiment names, else the one list the message
  or the user's known facts leave in play; with several candidates it is left alone.
- A correction replaces a value the user mistyped: "写错了，是李蕾", "sorry, it's Jon". Its
  key is the known value it resembles; with no close one it is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from memstack.core.facts.fact import Fact
from memstack.core.facts.vocabulary import VOCABULARY
from memstack.ingest.extraction.rules.engine import is_junk, is_pointer
from memstack.ingest.extraction.rules.lexicon import (
    ANIMAL_HEADS_ZH,
    ANIMALS_EN,
    BREEDS_ZH,
    KIN_EN,
    KIN_ZH,
)

# Lists a bare noun phrase can extend; family and pets need a relation or an animal.
_OPEN_LISTS = ("likes", "dislikes", "focus", "do_not_recommend", "allergies")
_CLAUSE = re.compile(r"[，,；;]")

_CONTINUE = re.compile(
    r"^(?:还有|以及)?(?P<v>[^，,。！？!?\s]{1,8}?)(?:的)?(?:那种|这种|那样的|这样的|之类的?|那类|这类)$"
    r"|^(?:其次是|然后是|再就是|其次|然后)(?P<v2>[^，,。！？!?]{1,8})$"
    r"|^(?i:(?:and\s+)?then|followed by|after that|next|second)\s+(?P<v3>[\w-]+(?:\s+[\w-]+){0,2})$"
    # "别推荐牛皮的，人造革的也不要": the same refusal again, for one more item
    r"|^(?P<v4>[^，,。！？!?我你他她]{1,8}?)(?:的)?也(?:不要|别|不行|不考虑|别推了?)(?:了|吧)?$"
    # "我喜欢游泳和跑步，还有瑜伽": one more item after a comma
    r"|^(?:还有|另外还有|以及|外加|再加上)(?P<v5>[^，,。！？!?我你他她]{1,10}?)(?:的东西|的那种)?$"
)
_ELLIPSIS = re.compile(
    # "also no ghost tours", "and no zoos either": one more thing ruled out
    r"^(?i:(?:and|also|plus|oh)[,\s]+)+no\s+(?P<no>[\w'‘’-]+(?:\s+[\w'‘’-]+){0,2}?)"
    r"(?:\s+(?i:either|too|please|pls))?$"
    r"|^(?:(?:哦|噢|对了|嗯|啊)[，,]?)?(?:还有|另外还有|以及)(?P<v>[^，,。！？!?]{1,10}?)(?:也是|也)?(?:吧|啊|呀)?$"
    r"|^(?P<v2>[^，,。！？!?我你他她]{1,10}?)也(?:是|一样)(?:的)?(?:吧|啊)?$"
    r"|^(?i:(?:oh|ah|and|also|plus|btw)[,\s]+)*(?i:and\s+)?(?P<v3>[\w-]+(?:\s+[\w-]+){0,2}?)\s*,?\s+"
    r"(?i:too|as well|also)$"
    r"|^(?i:(?:oh\s+)?(?:and\s+)?also|plus|or)[,\s]+(?P<v4>[\w-]+(?:\s+[\w-]+){0,2})$"
    # "same goes for Shein", "ditto for lilies": the last statement again, for one more item
    # "add Glo to that list too": one more item for the list in play
    r"|^(?i:(?:and\s+|also\s+|oh\s+)*(?:pls\s+|please\s+)?add)\s+(?P<v6>[\w&'-]+(?:\s+[\w&'-]+){0,2}?)"
    r"\s+(?i:to\s+(?:that|the|this|my)\s+list)(?:\s+(?i:too|as well))?$"
    r"|^(?i:(?:and\s+)?(?:the\s+)?same\s+(?:goes\s+)?for|ditto\s+(?:for|with))\s+"
    r"(?P<v5>[\w&'-]+(?:\s+[\w&'-]+){0,2}?)(?:\s*,?\s*(?i:actually|too|as well|please|pls))?$"
)
# Ellipses that repeat the earlier sentiment and only make sense after it: "焦糖的也爱",
# "not a fan of X either". They add only to a list the user already has.
_ECHO = re.compile(
    r"^(?:另外|还有|而且|哦对|对了)?[，,]?(?:那个|这个|那种|这种)?(?P<v>[^，,。！？!?我你他她]{1,12}?)(?:味)?的?(?:我)?也(?:很|超|挺|都|比较|特别)?"
    r"(?P<how>爱|喜欢|讨厌|不喜欢|不爱|受不了|不要|重要|关键|看重|在意|要紧|过敏|拉黑|别推荐?(?:给我)?|不要推荐?(?:给我)?)(?:吃|喝|的|了)?(?:吧|啊|呀)?$"
    r"|^(?i:(?:I'm\s+|I\s+am\s+)?not\s+(?:a\s+)?(?:big\s+|huge\s+)?fan\s+of"
    r"|I\s+(?:also\s+)?(?:don't|do not)\s+(?:like|love|want|enjoy))"
    r"\s+(?P<v2>[\w-]+(?:\s+[\w-]+){0,3}?)\s+(?i:either)$"
)
_PET = re.compile(
    rf"^(?:[一两三四几\d]+[只条缸头匹个]|(?i:an?|one|two|three)\s+)?(?:\S{{0,3}}(?:{ANIMAL_HEADS_ZH})"
    rf"|(?i:{BREEDS_ZH}|{ANIMALS_EN})s?)$"
)
# "oh, and range too": a leading interjection is no clause of its own.
_INTERJECTION = re.compile(r"^(?:(?i:oh|ah|ok|okay|btw|hmm)|哦对|对了|哦|噢|嗯|啊)\s*[,，]\s*")
_NEGATED = re.compile(r"不|没|别|(?i:no|not|never)\b")
_DISLIKE_WORDS = re.compile(
    r"受不了|讨厌|烦|难吃|恶心|不喜欢|不爱|反感|(?i:\bhate|\bcan't stand|\bawful|\bterrible|\bgross"
    r"|\bdislike|\bnot (?:a |big |huge )*fan\b|\b(?:don't|do not) (?:like|love|enjoy)\b)"
)
_LIKE_WORDS = re.compile(r"喜欢|好吃|不错|很棒|爱|(?i:\blove|\bgreat|\bawesome|\blike|\benjoy)")

_CORRECTION = re.compile(
    r"[打写说拼输]错(?:字)?了|错别字|不对|更正|纠正|错了"
    r"|(?i:\btypo\b|\bI meant\b|\bcorrection\b|\bsorry\b|\boops\b"
    r"|\bmeant to (?:say|write)\b|\bmisspelled\b|\bmy bad\b)"
)
_CORRECTED = re.compile(
    r"^(?:应该)?是(?P<v>[\u4e00-\u9fff]{1,6}|[A-Za-z][\w'-]*)(?:才对|不是\S+)?$"
    r"|^(?i:it's|its|it is|I meant|meant|that's"
    r"|should be)\s+(?P<v2>[A-Za-z][\w'-]*(?:\s+[A-Z][\w'-]*)?)"
    # "it's John with an h", "it's Ana with one n": how it is spelt, not part of it.
    r"(?:,?\s+not\s+\S+)?(?:,?\s+with\s+(?:an?|one|two|double)\s+[a-z]'?s?)?$"
)
_TEXT_KEYS = ("name", "city", "occupation", "goal", "diet")


def _values(m: re.Match[str]) -> str | None:
    return next((v for k, v in m.groupdict().items() if v and k.startswith("v")), None)


def _clauses(sentence: str) -> list[str]:
    return [c.strip(" 。.!！?？~～") for c in _CLAUSE.split(sentence)]


def continuations(sentence: str, facts: list[Fact]) -> list[Fact]:
    """Items a sentence adds to the one open list it has just stated."""
    keys = {f.key for f in facts if f.key in _OPEN_LISTS and not f.retracts}
    if len(keys) != 1:
        return []
    head = next(f for f in facts if f.key in keys)
    out: list[Fact] = []
    for clause in _clauses(sentence)[1:]:
        m = _CONTINUE.match(clause)
        v = _values(m) if m else None
        # "小小一间那种": a size or a count describes the item before, it is no item
        if v and re.search(r"[一两几\d][个间家件款只台]", v):
            continue
        if v and not is_junk(v) and not is_pointer(v):
            out.append(head.model_copy(update={"value": [v]}))
    return out


def _echo(sentence: str, known: Mapping[str, Any], said: Mapping[str, Fact]) -> Fact | None:
    """ "焦糖的也爱" after "我爱抹茶": one more item for the list the user already has."""
    # The echo opens the sentence; what follows it says why ("下围棋也喜欢，周末常去").
    # "还有那个华莱士，也拉黑": the item and its verb may sit a comma apart.
    clauses = _clauses(_INTERJECTION.sub("", sentence))
    m = _ECHO.match(clauses[0])
    if m is None and len(clauses) > 1 and clauses[1].startswith("也"):
        m = _ECHO.match(clauses[0] + clauses[1])
    v = _values(m) if m else None
    if m is None or not v or is_junk(v) or is_pointer(v):
        return None
    verb = m.group("how") or ""
    key = "dislikes" if m.group("v2") or _DISLIKE_WORDS.search(verb) else "likes"
    if verb == "不要":
        key = "do_not_recommend"
    elif verb in ("重要", "关键", "看重", "在意", "要紧"):
        key = "focus"
    elif verb == "过敏":
        key = "allergies"
    elif verb == "拉黑" or verb.startswith(("别推", "不要推")):
        key = "do_not_recommend"
    if key not in known and key not in said:
        return None
    return Fact(key=key, value=[v], type=VOCABULARY[key].type, confidence=0.7, source="user_stated")


def ellipsis(sentence: str, known: Mapping[str, Any], said: Mapping[str, Fact]) -> Fact | None:
    """A bare "and X too" added to the list its context names."""
    echoed = _echo(sentence, known, said)
    if echoed is not None:
        return echoed
    clauses = _clauses(_INTERJECTION.sub("", sentence))
    m = _ELLIPSIS.match(clauses[0]) if clauses else None
    if m is not None and m.group("no") and not is_junk(m.group("no")):
        # "also no X": the refusal said before, once more
        return _added("do_not_recommend", m.group("no"), known, said)
    v = _values(m) if m else None
    if not v or is_junk(v) or is_pointer(v) or _NEGATED.match(v):
        return None
    key: str | None = None
    if _KIN.fullmatch(re.sub(r"^(?:一?个|一位|(?i:my|a)\s+)", "", v)) and (
        "family" in known or "family" in said
    ):
        # "还有个闺女": one more of the family
        return _added("family", re.sub(r"^(?:一?个|一位|(?i:my|a)\s+)", "", v), known, said)
    if _PET.search(v) and ("pets" in known or "pets" in said):
        # "还有一只仓鼠", "and a gecko too" after pets: one more pet, without its count.
        key, v = "pets", re.sub(r"^(?:[一两三四几\d]+[只条缸头匹个]|(?i:an?|one)\s+)", "", v)
    elif _DISLIKE_WORDS.search(sentence):
        key = "dislikes"
    elif _LIKE_WORDS.search(sentence):
        key = "likes"
    else:
        in_message = [k for k in said if k in _OPEN_LISTS]
        candidates = in_message[-1:] or [k for k in _OPEN_LISTS if k in known]
        key = candidates[0] if len(candidates) == 1 else None
    if key is None:
        return None
    return Fact(
        key=key,
        value=[v],
        type=VOCABULARY[key].type,
        confidence=0.75,
        source="user_stated",
    )


_KIN = re.compile(rf"(?:{KIN_ZH})|(?i:{KIN_EN})")


def _added(key: str, item: str, known: Mapping[str, Any], said: Mapping[str, Fact]) -> Fact | None:
    """One more item for a list the user already has (known, or said in this message)."""
    if key not in known and key not in said:
        return None
    item = re.sub(r"(?<![A-Za-z])['‘’]|['‘’](?![A-Za-z])", "", item)  # stress quotes
    return Fact(
        key=key, value=[item], type=VOCABULARY[key].type, confidence=0.75, source="user_stated"
    )


def _distance(a: str, b: str) -> int:
    """Levenshtein distance; both strings are short names."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


# "sorry, I meant crab, not shrimp", "是李子，不是桃子": the slip named beside the repair.
_MEANT_NOT = re.compile(
    r"(?i:\b(?:I\s+meant|I\s+mean|meant|it's|its|it\s+is)\s+(?P<v>[\w'-]+(?:\s+[\w'-]+)?),?\s+not\s+"
    r"(?P<slip>[\w'-]+(?:\s+[\w'-]+)?))"
    r"|是(?P<v2>[\u4e00-\u9fff]{1,6}?)[，,]?不是(?P<slip2>[\u4e00-\u9fff]{1,6}?)(?=$|[，,。！!]|哈|啦)"
)


def _meant_not(sentence: str, known: Mapping[str, Any]) -> Fact | None:
    """A known value (or list item) replaced by the one the user says was meant."""
    m = _MEANT_NOT.search(sentence)
    if m is None:
        return None
    v, slip = (m["v"], m["slip"]) if m["v"] else (m["v2"], m["slip2"])
    for key, old in known.items():
        spec = VOCABULARY.get(key)
        items = old if isinstance(old, list) else [old]
        if spec is None or not any(
            isinstance(i, str) and i.casefold() == slip.casefold() for i in items
        ):
            continue
        value: Any = v
        if isinstance(old, list):
            value = [v if str(i).casefold() == slip.casefold() else i for i in old]
        return Fact(
            key=key,
            value=value,
            type=spec.type,
            confidence=0.8,
            source="user_stated",
            override=True,
        )
    return None


def correction(sentence: str, known: Mapping[str, Any]) -> Fact | None:
    """The corrected value of whichever known text value it is a near miss of, or that
    the sentence names as the slip ("I meant crab, not shrimp")."""
    if not _CORRECTION.search(sentence):
        return None
    named = _meant_not(sentence, known)
    if named is not None:
        return named
    for clause in _clauses(sentence):
        m = _CORRECTED.match(clause)
        v = _values(m) if m else None
        if not v or is_junk(v):
            continue
        best: tuple[float, str] | None = None
        for key in _TEXT_KEYS:
            old = known.get(key)
            if not isinstance(old, str) or old.casefold() == v.casefold():
                continue
            ratio = _distance(old.casefold(), v.casefold()) / max(len(old), len(v))
            if ratio <= 0.5 and (best is None or ratio < best[0]):
                best = (ratio, key)
        if best is not None:
            return Fact(
                key=best[1],
                value=v,
                type=VOCABULARY[best[1]].type,
                confidence=0.85,
                source="user_stated",
                override=True,
            )
    return None


def names_current(fact: Fact, current: Any) -> bool:
    """Whether a withdrawal of a text value is about the value in place: "I don't live in
    Leeds anymore" ends nothing while the city on record is York."""
    if not fact.retracts or not isinstance(fact.value, str) or current is None:
        return True
    if not isinstance(current, str):
        return False
    a, b = fact.value.casefold(), current.casefold()
    return a in b or b in a


def animal_head(item: str) -> str:
    """ "two cats" → "cat", "狗狗: 豆豆" → "狗", "两只橘猫" → "橘猫": the animal, bare."""
    what = item.split(":")[0].strip().casefold()
    what = re.sub(r"^(?:a|an|one|two|three|four|\d+)\s+|^[一两三四几\d]+[只条头匹个]", "", what)
    what = re.sub(r"(?<=[a-z])s$", "", what)
    return re.sub(r"^(.)\1$|(?<=[猫兔])(?:咪|子)$", r"\1", what)


def withdrawn_items(fact: Fact, known: Any) -> Fact:
    """A withdrawn pet named as the user now calls it ("狗狗", "the cat") stands for the
    known item that is that animal ("两条狗", "cat: Luna")."""
    if fact.key != "pets" or not fact.retracts or not isinstance(known, list):
        return fact
    if not isinstance(fact.value, list):
        return fact
    heads = {animal_head(str(v)) for v in fact.value}
    hits = [
        k
        for k in known
        if any(
            (h := animal_head(str(k))) == w or (w and (h.endswith(w) or w.endswith(h)))
            for w in heads
        )
    ]
    return fact.model_copy(update={"value": hits}) if hits else fact
