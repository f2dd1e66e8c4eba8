"""The user's pets and family members by name, however loosely they are introduced.

The rules of :mod:`.en_personal` and :mod:`.zh_personal` read the usual shapes ("my
dog Rex", "养了只柯基叫可乐", "my wife Anna"). Chat names them in many more: "Biscuit, my
golden retriever, ...", "Rex (my beagle)", "two rescue greyhounds, Luna and Blitz",
"also the other cat, Tofu", "一只暹罗叫Mocha，一只三花叫年年", "捡了只小黑猫，取名芝麻",
"布丁是只英短", "wife's name is Aiko", "a daughter, Hana", "我有个儿子叫乐乐". This module
finds every animal or relative of the user's in a sentence and the name tied to it by
a naming word, a possessive apposition or a list of names after it, and returns each as
``"<animal>: <name>"`` or ``"<relation>: <name>"``.
"""

from __future__ import annotations

import bisect
import re
from functools import lru_cache

from memstack.ingest.extraction.rules.lexicon import (
    ANIMAL_HEADS_ZH,
    ANIMALS_EN,
    BREEDS_ZH,
    KIN_EN,
    KIN_ZH,
)
from memstack.ingest.extraction.rules.repairs import has_repair
from memstack.ingest.extraction.rules.sentences import clause_starts, other_subject

_NAME_EN = r"[A-Z][a-z]+(?:[-'][A-Za-z]+)?"
# "Luna and Blitz", "Mia, Leo and Sam"; not "Oskar, Otto is the neighbour's": a list of
# names ends with "and".
_NAMES_EN = rf"{_NAME_EN}(?:(?:,\s*{_NAME_EN})*\s+and\s+{_NAME_EN})?"
_NAME_ZH = r"(?:[\u4e00-\u9fff]{1,4}?|[A-Z][A-Za-z]+)"
_ANIMAL_ZH = rf"(?:[\u4e00-\u9fff]{{0,2}}?(?:{ANIMAL_HEADS_ZH})|(?:{BREEDS_ZH}))"
_ANIMAL = rf"(?:(?i:{ANIMALS_EN}))"
# The user owns the animals of the sentence.
_OWNED_EN = re.compile(
    r"(?i:\b(?:my|our)\b|\b(?:I|we)(?:'ve|\s+have)?\s+(?:(?:also|just|finally|recently)\s+)?"
    r"(?:got|have|own|adopted|rescued|took\s+in)\b|\bthe\s+other\b)"
)
_EN = (
    # "my golden retriever Biscuit", "the other cat, Tofu", "my cat is called Mochi"
    re.compile(
        rf"(?i:\b(?:my|our|the\s+other)\s+)(?P<animal>(?:[\w-]+\s+){{0,2}}?{_ANIMAL})s?"
        rf"(?:,?\s+(?:(?:she|he|it)(?:'s|s|\s+is)\s+)?(?:named|called)\s+|,\s*|\s+(?:is\s+)?"
        rf"(?:named|called)\s+|\s+)(?P<name>{_NAME_EN})\b"
    ),
    # "Biscuit, my golden retriever", "Rex (my beagle)", "Rex is my beagle"
    re.compile(
        rf"\b(?P<name>{_NAME_EN})(?:,\s*|\s+\(|\s+is\s+)(?i:my|our)\s+"
        rf"(?P<animal>(?:[\w-]+\s+){{0,2}}?{_ANIMAL})\b"
    ),
    # "two rescue greyhounds, Luna and Blitz", "a tabby named Oreo", "two cats Noor and Zaitoon"
    re.compile(
        rf"(?i:\b(?:a|an|one|two|three|\d)\s+)(?P<animal>(?:[\w-]+\s+){{0,2}}?{_ANIMAL})s?"
        rf"(?:,\s*|\s+(?:named|called)\s+|\s+(?={_NAMES_EN}))(?P<names>{_NAMES_EN})\b"
    ),
)
_NAMING_ZH = r"(?:名字)?(?:叫|名叫|叫做|取名(?:叫)?|起名(?:叫)?|名字是)"
_NAME_END_ZH = (
    r"(?=$|[，,。！!？?；;、\s\U0001F300-\U0001FAFF\u2600-\u27BF]|了|吧|呢|啊|哈|一只|一条)"
)
# An animal and its name ("一只暹罗叫Mocha", "捡了只小黑猫，取名芝麻", "狗子叫旺财"), or a
# name for the animal just mentioned ("两只巴西龟，一只叫大宝一只叫二宝", "…金毛，它叫可乐").
_ZH_MENTION = re.compile(
    rf"(?P<animal>{_ANIMAL_ZH})(?:子)?(?:[，,]?\s*{_NAMING_ZH}\s*(?P<name>{_NAME_ZH}){_NAME_END_ZH})?"
    # "养了一只叫 Mochi 的柴犬": the name before the animal
    rf"|(?:一只|只|一条|条)?叫\s*(?P<name3>{_NAME_ZH})\s*的(?P<animal3>{_ANIMAL_ZH})"
    rf"|(?:一只|一条|另一只|另一条|它|牠)\s*{_NAMING_ZH}\s*(?P<name2>{_NAME_ZH}){_NAME_END_ZH}"
)
# "布丁是只英短", "可乐是我家的柯基"
_ZH_IS = re.compile(
    rf"(?:^|(?<=[，,。\s]))(?P<name>{_NAME_ZH})是(?:一)?(?:只|条|我家的?|我的)(?P<animal>{_ANIMAL_ZH})"
)


_KIN = rf"(?i:{KIN_EN})"
_FAMILY_EN = (
    # "twin daughters, Hana and Lina", "my sons Leo and Max": several of one relation
    re.compile(
        rf"(?i:\b(?:my|our|two|three|four|twin)\s+(?:twin\s+|little\s+|older\s+|younger\s+)?)"
        rf"(?P<rel>{_KIN})(?<=[sn])(?:,\s*|\s+(?:named|called)\s+|\s+)"
        rf"(?P<names>{_NAME_EN}(?:,\s*{_NAME_EN})*\s+and\s+{_NAME_EN})\b"
    ),
    # "my brother Mateusz", "our son, called Leo", "wife's name is Aiko"
    re.compile(
        rf"(?i:\b(?:my|our)\s+)?(?P<rel>{_KIN})(?:'s\s+name\s+is\s+|,?\s+(?:named|called)\s+|,\s*|\s+)"
        rf"(?P<name>{_NAME_EN})\b"
    ),
    # "a daughter, Hana", "two kids, Mia and Leo"
    re.compile(rf"(?i:\b(?:a|an|one|two|three)\s+)(?P<rel>{_KIN}),\s*(?P<names>{_NAMES_EN})\b"),
    # "Anna, my wife"
    re.compile(rf"\b(?P<name>{_NAME_EN}),\s+(?i:my|our)\s+(?P<rel>{_KIN})\b"),
)
_FAMILY_ZH = (
    re.compile(
        rf"(?P<rel>{KIN_ZH})(?:叫|名叫|叫做|名字叫|名字是)\s*(?P<name>{_NAME_ZH})"
        r"(?=$|[，,。！!？?；;、\s]|了|吧|呢|啊|哈|今年|上|在|是)"
    ),
)
_OWNED_FAMILY_EN = re.compile(r"(?i:\b(?:my|our|I|we)\b|^\W*(?:wife|husband)'s\s+name)")
_OWNED_FAMILY_ZH = re.compile(r"我|咱|家里|家有")


def named_family(sentence: str) -> list[str]:
    """``"<relation>: <name>"`` for each named relative of the user in ``sentence``."""
    items: list[str] = []
    zh = re.search(r"[\u4e00-\u9fff]", sentence) is not None
    owned = (_OWNED_FAMILY_ZH if zh else _OWNED_FAMILY_EN).search(sentence)
    if owned is None:
        return []
    for pattern in _FAMILY_ZH if zh else _FAMILY_EN:
        for m in pattern.finditer(sentence):
            if _someone_else(sentence, m.start()) and not re.match(r"(?i:my|our)\b", m.group()):
                continue
            names = m.groupdict().get("names") or m.group("name")
            if names.casefold() in _NOT_NAMES:
                continue
            rel = m.group("rel") if zh else one_relative(m.group("rel"))
            for name in re.split(r",\s*|\s+and\s+", names):
                items.append(f"{rel}: {name}")
    return _unique(items)


_NOT_NAMES = frozenset("is was and but so the a an who which that".split())


def one_relative(rel: str) -> str:
    """ "daughters" → "daughter", "children" → "child": each name is one relative."""
    rel = rel.casefold()
    if rel == "children":
        return "child"
    return rel[:-1] if rel.endswith("s") and not rel.endswith("ss") else rel


def _bare(animal: str) -> str:
    """ "greyhounds" → "greyhound", "我家狗子" → "狗": one animal, as the user calls it."""
    if animal.isascii():
        animal = re.sub(r"(?i)^(?:a|an|one|two|three|four|\d+)\s+", "", animal.strip())
        return re.sub(r"(?i)(?<=[a-z])s$", "", animal)
    return re.sub(r"^(?:我家|咱家|家里|我的|家的|养的|一|只|条)+|子$", "", animal)


def named_pets(sentence: str) -> list[str]:
    """``"<animal>: <name>"`` for each named animal the user owns in ``sentence``; after
    a correction ("我家柯基叫可乐，诶不对，…我家柯基叫雪碧") the last name of an animal."""
    items = _named_pets(sentence)
    if has_repair(sentence):
        last = {i.split(": ")[0]: i for i in items}
        items = [i for i in items if last[i.split(": ")[0]] == i]
    return items


def _named_pets(sentence: str) -> list[str]:
    items: list[str] = []
    if re.search(r"[\u4e00-\u9fff]", sentence):
        # Chat leaves the owner out ("狗狗叫团子"): any animal whose clause is about
        # nobody else is the user's.
        last: str | None = None
        for m in _ZH_MENTION.finditer(sentence):
            if m.group("animal") or m.group("animal3"):
                last = _bare(m.group("animal") or m.group("animal3"))
            animal = last if (m.group("animal") or m.group("animal3") or m.group("name2")) else None
            name = m.group("name") or m.group("name2") or m.group("name3")
            # "它叫可乐" names the animal just mentioned, not someone else's
            pointed = m.group().startswith(("它", "牠"))
            if animal and name and (pointed or not _someone_else(sentence, m.start())):
                items.append(f"{animal}: {name}")
        for m in _ZH_IS.finditer(sentence):
            if not _someone_else(sentence, m.start()):
                items.append(f"{_bare(m.group('animal'))}: {m.group('name')}")
        return _unique(items)
    if _OWNED_EN.search(sentence) is None:
        return []
    for pattern in _EN:
        for m in pattern.finditer(sentence):
            # "my husband and our two cats, …": "our" makes them the user's whoever leads
            ours = re.search(r"(?i:\b(?:my|our)\s+)$", sentence[max(0, m.start() - 8) : m.start()])
            if (
                _someone_else(sentence, m.start())
                and not ours
                and not re.match(r"(?i:my|our)\b", m.group())
            ):
                continue
            names = m.groupdict().get("names") or m.group("name")
            for name in re.split(r",\s*|\s+and\s+", names):
                items.append(f"{_bare(m.group('animal'))}: {name}")
    return _unique(items)


def _someone_else(sentence: str, at: int) -> bool:
    """Whether the clause holding position ``at`` opens with someone else as subject
    ("my friend has a dog named Rex", "我朋友家的猫叫咪咪")."""
    starts = _starts(sentence)
    start = starts[bisect.bisect_right(starts, at) - 1]
    return other_subject(sentence[start : at + 1])


@lru_cache(maxsize=64)
def _starts(sentence: str) -> list[int]:
    return clause_starts(sentence)


def _unique(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for item in items:
        name = item.split(": ")[1].casefold()
        if name not in seen:
            seen.add(name)
            out.append(item)
    return out
