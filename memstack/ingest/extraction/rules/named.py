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

import re

from memstack.ingest.extraction.rules.lexicon import (
    ANIMAL_HEADS_ZH,
    ANIMALS_EN,
    BREEDS_ZH,
    KIN_EN,
    KIN_ZH,
)
from memstack.ingest.extraction.rules.sentences import clause_starts, other_subject

_NAME_EN = r"[A-Z][a-z]+(?:[-'][A-Za-z]+)?"
_NAME_ZH = r"(?:[\u4e00-\u9fff]{1,4}?|[A-Z][A-Za-z]+)"
_ANIMAL_ZH = rf"(?:[\u4e00-\u9fff]{{0,2}}?(?:{ANIMAL_HEADS_ZH})|(?:{BREEDS_ZH}))"
_ANIMAL = rf"(?:(?i:{ANIMALS_EN}))"
# The user owns the animals of the sentence.
_OWNED_EN = re.compile(
    r"(?i:\b(?:my|our)\b|\bI(?:'ve|\s+have)?\s+(?:also\s+)?(?:got|have|own|adopted|rescued)\b"
    r"|\bwe(?:'ve|\s+have)?\s+(?:also\s+)?(?:got|have|own|adopted|rescued)\b|\bthe\s+other\b)"
)
_OWNED_ZH = re.compile(r"我|家里|我家|咱家|养|捡|领养|收养|抱了|接回")
_EN = (
    # "my golden retriever Biscuit", "the other cat, Tofu", "my cat is called Mochi"
    re.compile(
        rf"(?i:\b(?:my|our|the\s+other)\s+)(?:[\w-]+\s+){{0,2}}?(?P<animal>{_ANIMAL})s?"
        rf"(?:,\s*|\s+(?:is\s+)?(?:named|called)\s+|\s+)(?P<name>{_NAME_EN})\b"
    ),
    # "Biscuit, my golden retriever", "Rex (my beagle)", "Rex is my beagle"
    re.compile(
        rf"\b(?P<name>{_NAME_EN})(?:,\s*|\s+\(|\s+is\s+)(?i:my|our)\s+(?:[\w-]+\s+){{0,2}}?"
        rf"(?P<animal>{_ANIMAL})\b"
    ),
    # "two rescue greyhounds, Luna and Blitz", "a tabby named Oreo"
    re.compile(
        rf"(?i:\b(?:a|an|one|two|three|\d)\s+)(?:[\w-]+\s+){{0,2}}?(?P<animal>{_ANIMAL})s?"
        rf"(?:,\s*|\s+(?:named|called)\s+)(?P<names>{_NAME_EN}(?:(?:,\s*|\s+and\s+){_NAME_EN})*)\b"
    ),
)
_ZH = (
    # "一只暹罗叫Mocha", "捡了只小黑猫，取名芝麻", "狗子叫旺财"
    re.compile(
        rf"(?P<animal>{_ANIMAL_ZH})(?:子)?[，,]?\s*(?:名字)?(?:叫|名叫|叫做|取名(?:叫)?|起名(?:叫)?"
        rf"|名字是)\s*(?P<name>{_NAME_ZH})(?=$|[，,。！!？?；;、\s]|了|吧|呢|啊|哈|，)"
    ),
    # "布丁是只英短", "可乐是我家的柯基"
    re.compile(
        rf"(?:^|(?<=[，,。\s]))(?P<name>{_NAME_ZH})是(?:一)?(?:只|条|我家的?|我的)(?P<animal>{_ANIMAL_ZH})"
    ),
)


_KIN = rf"(?i:{KIN_EN})"
_FAMILY_EN = (
    # "my brother Mateusz", "our son, called Leo", "wife's name is Aiko"
    re.compile(
        rf"(?i:\b(?:my|our)\s+)?(?P<rel>{_KIN})(?:'s\s+name\s+is\s+|,?\s+(?:named|called)\s+|,\s*|\s+)"
        rf"(?P<name>{_NAME_EN})\b"
    ),
    # "a daughter, Hana", "two kids, Mia and Leo"
    re.compile(
        rf"(?i:\b(?:a|an|one|two|three)\s+)(?P<rel>{_KIN}),\s*(?P<names>{_NAME_EN}(?:(?:,\s*|\s+and\s+){_NAME_EN})*)\b"
    ),
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
            for name in re.split(r",\s*|\s+and\s+", names):
                items.append(f"{m.group('rel').casefold() if not zh else m.group('rel')}: {name}")
    return _unique(items)


_NOT_NAMES = frozenset("is was and but so the a an who which that".split())


def _bare(animal: str) -> str:
    """ "greyhounds" → "greyhound", "我家狗子" → "狗": one animal, as the user calls it."""
    if animal.isascii():
        return re.sub(r"(?i)(?<=[a-z])s$", "", animal.strip())
    return re.sub(r"^(?:我家|咱家|家里|我的|家的|养的|一|只|条)+|子$", "", animal)


def named_pets(sentence: str) -> list[str]:
    """``"<animal>: <name>"`` for each named animal the user owns in ``sentence``."""
    items: list[str] = []
    if re.search(r"[\u4e00-\u9fff]", sentence):
        if _OWNED_ZH.search(sentence) is None:
            return []
        for pattern in _ZH:
            for m in pattern.finditer(sentence):
                if not _someone_else(sentence, m.start()):
                    items.append(f"{_bare(m.group('animal'))}: {m.group('name')}")
        return _unique(items)
    if _OWNED_EN.search(sentence) is None:
        return []
    for pattern in _EN:
        for m in pattern.finditer(sentence):
            if _someone_else(sentence, m.start()):
                continue
            names = m.groupdict().get("names") or m.group("name")
            for name in re.split(r",\s*|\s+and\s+", names):
                items.append(f"{_bare(m.group('animal'))}: {name}")
    return _unique(items)


def _someone_else(sentence: str, at: int) -> bool:
    """Whether the clause holding position ``at`` opens with someone else as subject
    ("my friend has a dog named Rex", "我朋友家的猫叫咪咪")."""
    start = max(s for s in clause_starts(sentence) if s <= at)
    return other_subject(sentence[start : at + 1])


def _unique(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for item in items:
        name = item.split(": ")[1].casefold()
        if name not in seen:
            seen.add(name)
            out.append(item)
    return out
