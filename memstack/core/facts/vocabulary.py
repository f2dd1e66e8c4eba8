"""The documented fact-key vocabulary and the value normalisers behind it.

Both extractors pass every fact through :func:`normalise_fact`, so one meaning lands
under one key however it was said ("预算", "budget", "max_budget" → ``budget_limit``)
and values have one shape per key. docs/facts.md is the user-facing
copy of :data:`VOCABULARY`; keep the two in step.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from memstack.core.facts.fact import Fact, FactType
from memstack.core.facts.languages import LANGUAGES as LANGUAGES

# Money lives in its own module; these names stay part of the vocabulary's API.
from memstack.core.facts.money import AMBIGUOUS_CURRENCY as AMBIGUOUS_CURRENCY
from memstack.core.facts.money import CURRENCY_WORDS as CURRENCY_WORDS
from memstack.core.facts.money import currency_code as currency_code
from memstack.core.facts.money import default_currency as default_currency
from memstack.core.facts.money import find_currency as find_currency
from memstack.core.facts.money import has_han as has_han
from memstack.core.facts.money import normalise_money as normalise_money

# Numbers live in their own module; these names stay part of the vocabulary's API.
from memstack.core.facts.numbers import MAX_NUMBER_CHARS as MAX_NUMBER_CHARS
from memstack.core.facts.numbers import NUMBER_PATTERN as NUMBER_PATTERN
from memstack.core.facts.numbers import parse_number as parse_number
from memstack.core.facts.numbers import spelled_out as spelled_out
from memstack.core.facts.numbers import tidy_number as tidy_number
from memstack.core.facts.profile_values import (
    LABEL_KEYS,
    allergen,
    item_matches,
    label_items,
    named_item,
    normalise_date,
    split_named,
)

ValueKind = Literal["money", "list", "text", "language", "date"]


@dataclass(frozen=True)
class KeySpec:
    key: str
    type: FactType
    kind: ValueKind
    synonyms: tuple[str, ...]
    # Items of an accumulating list are never dropped by a turn word: "其实别推荐X"
    # adds X, it does not forget what was banned before.
    accumulate: bool = False
    # Items are "<relation or animal>" or "<relation or animal>: <name>" ("wife: Anna"):
    # a named item is one item, however many names it lists.
    named: bool = False


def _spec(key: str, type_: FactType, kind: ValueKind, synonyms: str, **kw: bool) -> KeySpec:
    return KeySpec(key, type_, kind, tuple(synonyms.split()), **kw)


VOCABULARY: dict[str, KeySpec] = {
    spec.key: spec
    for spec in (
        _spec(
            "budget_limit", "constraint", "money",
            "budget max_budget budget_max budget_cap price_limit max_price price_cap "
            "spending_limit 预算 预算上限 最高预算 价位 价格上限",
        ),
        _spec(
            "likes", "preference", "list",
            "like liked loves preference preferences preferred favorite favorites favourite "
            "favourites 喜欢 偏好 爱好",
        ),
        _spec("dislikes", "preference", "list", "dislike disliked hates hate 不喜欢 讨厌 反感"),
        _spec(
            "focus", "preference", "list",
            "priorities priority cares_about care_about key_concerns concerns focus_on "
            "关注 重点 重点关注 关注点 在意",
        ),
        _spec(
            "do_not_recommend", "constraint", "list",
            "dont_recommend do_not_suggest avoid blacklist blocklist exclude excluded "
            "no_recommend not_recommend 不要推荐 别推荐 不推荐 排除",
            accumulate=True,
        ),
        _spec("name", "profile", "text", "user_name username full_name 姓名 名字 称呼"),
        _spec(
            "city", "profile", "text",
            "location home_city residence lives_in 城市 所在城市 居住地 住址",
        ),
        _spec(
            "occupation", "profile", "text", "job profession job_title work career 职业 工作"
        ),
        _spec(
            "language", "preference", "language",
            "response_language reply_language preferred_language lang 语言 回复语言",
        ),
        _spec(
            "goal", "task", "text",
            "task current_goal intent shopping_for looking_for 目标 需求 任务",
        ),
        _spec(
            "diet", "profile", "text",
            "dietary_preference dietary_preferences dietary_choice diet_type eating_habits "
            "饮食 饮食习惯 饮食偏好 饮食方式",
        ),
        _spec(
            "allergies", "constraint", "list",
            "allergy allergic_to allergen allergens food_allergy food_allergies "
            "过敏 过敏原 过敏源 过敏史 过敏物",
        ),
        _spec(
            "birthday", "profile", "date",
            "birth_date birthdate date_of_birth dob bday born_on 生日 出生日期 生辰",
        ),
        _spec(
            "family", "profile", "list",
            "family_members relatives household 家人 家庭 家庭成员 亲人 "
            + " ".join(LABEL_KEYS["family"]),
            named=True,
        ),
        _spec(
            "pets", "profile", "list",
            "pet my_pets pet_animals 宠物 " + " ".join(LABEL_KEYS["pets"]),
            named=True,
        ),
    )
}  # fmt: skip

_SYNONYMS: dict[str, str] = {
    syn.casefold(): spec.key for spec in VOCABULARY.values() for syn in (spec.key, *spec.synonyms)
}


def canonical_key(raw: str) -> str:
    """Map a key as written (any case, spaces, hyphens, a synonym) to its canonical form.

    Keys outside the vocabulary become snake_case and pass through: the LLM may find
    facts we have no name for, and dropping them would lose information.
    """
    key = _raw_form(raw)
    return _SYNONYMS.get(key, key)


def _raw_form(raw: str) -> str:
    return re.sub(r"[\s\-./]+", "_", raw.strip()).strip("_").casefold()


# --- lists, text, language ---------------------------------------------------------------

_ITEM_SPLIT = re.compile(
    r"\s*(?:、|，|,|；|;|/|以及|和|与|及|跟|\band\b|\bor\b|或者|或)\s*|\s+&\s+", re.IGNORECASE
)
_EDGE_JUNK = re.compile(
    r"^(?:的是|是|的|那种|这种|一些|任何|any|the|some|more|to)\s+|^(?:的是|是|那种|这种|一些|任何)"
    r"|\s*(?:了|吧|啊|呀|哦|呢|哈|嘛|的啦|啦|please|anymore|any more|again|for me|to me)$",
    re.IGNORECASE,
)


def clean_item(text: str) -> str:
    s = text.strip(" \t\"'“”‘’「」《》()（）。.!！?？~～")
    for _ in range(3):
        trimmed = _EDGE_JUNK.sub("", s).strip(" \t\"'“”‘’。.!！?？~～")
        if trimmed == s:
            break
        s = trimmed
    return s


def normalise_list(value: Any, *, named: bool = False) -> list[str]:
    """ "续航和重量" → ["续航", "重量"]; a list is cleaned and de-duplicated in order.
    ``named``: items are "<what>: <name>" ("kids: Anna and Tom" stays one item)."""
    raw = value if isinstance(value, list | tuple) else [value]
    items: list[str] = []
    seen: set[str] = set()
    for entry in raw:
        if entry is None:
            continue
        parts = split_named(str(entry)) if named else _ITEM_SPLIT.split(str(entry))
        for part in parts:
            item = clean_item(named_item(part)) if named else clean_item(part)
            if item and item.casefold() not in seen:
                seen.add(item.casefold())
                items.append(item)
    if not items:
        raise ValueError(f"empty list value {value!r}")
    return items


def normalise_language(value: Any) -> str:
    """英文/English/en → "en"; a language we do not know keeps its spelling."""
    s = str(value).strip()
    low = s.casefold()
    if low in LANGUAGES.values():
        return low
    return LANGUAGES.get(low, s)


def normalise_text(value: Any) -> str:
    s = clean_item(str(value)) if value is not None else ""
    if not s:
        raise ValueError("empty text value")
    return s


def normalise_value(key: str, value: Any, *, default_currency: str = "CNY") -> Any:
    """Shape ``value`` for canonical ``key``; raises ValueError when it is unusable."""
    spec = VOCABULARY.get(key)
    if spec is None:
        return value
    if spec.kind == "money":
        return normalise_money(value, default_currency=default_currency)
    if spec.kind == "list":
        items = normalise_list(value, named=spec.named)
        # "peanut allergy" → "peanut": the key already says allergy.
        return normalise_list([allergen(i) for i in items]) if key == "allergies" else items
    if spec.kind == "language":
        return normalise_language(value)
    if spec.kind == "date":
        return normalise_date(value)
    return normalise_text(value)


# Deepest value same_value compares; fact values are records (docs/facts.md), so deeper
# ones are malformed, and comparing or printing them recurses.
COMPARE_MAX_DEPTH = 16


def depth_within(value: Any, max_depth: int) -> bool:
    """Whether ``value`` nests at most ``max_depth`` containers deep (a list of strings is
    1 deep); iterative, so a value nested 100,000 deep is answered, not a RecursionError."""
    if not isinstance(value, Mapping | list | tuple):
        return True
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if level > max_depth:
            return False
        children = item.values() if isinstance(item, Mapping) else item
        stack.extend((c, level + 1) for c in children if isinstance(c, Mapping | list | tuple))
    return True


def same_value(a: Any, b: Any) -> bool:
    """Equality that ignores list order and letter case, so a restatement is not a change.

    Values nested deeper than :data:`COMPARE_MAX_DEPTH` are never the same as another
    value (only as themselves): comparing them would recurse without bound."""
    if not (depth_within(a, COMPARE_MAX_DEPTH) and depth_within(b, COMPARE_MAX_DEPTH)):
        return a is b
    if isinstance(a, list) and isinstance(b, list):
        return {str(x).casefold() for x in a} == {str(x).casefold() for x in b}
    if isinstance(a, str) and isinstance(b, str):
        return a.casefold() == b.casefold()
    return bool(a == b)


def normalise_known(known: Mapping[str, Any] | None) -> dict[str, Any]:
    """Canonical keys and shapes for the caller's current facts; unreadable values stay raw."""
    out: dict[str, Any] = {}
    for raw_key, value in (known or {}).items():
        key = canonical_key(raw_key)
        try:
            out[key] = normalise_value(key, value)
        except ValueError:
            out[key] = value
    return out


def normalise_fact(fact: Fact, *, default_currency: str = "CNY") -> Fact | None:
    """Canonical key, the vocabulary's type, a normalised value; None if the value is
    unusable. A retraction is kept whatever its value: the withdrawal is the fact, and
    what it names (None when unreadable) only says which items of a list went."""
    key = canonical_key(fact.key)
    spec = VOCABULARY.get(key)
    raw = _raw_form(fact.key)
    label = raw if raw in LABEL_KEYS.get(key, ()) else None

    def shape(v: Any) -> Any:
        if v is None:
            return None
        out = normalise_value(key, v, default_currency=default_currency)
        return label_items(label, out) if label and isinstance(out, list) else out

    try:
        value, supersedes = shape(fact.value), shape(fact.supersedes)
    except ValueError:
        if not fact.retracts:
            return None
        value, supersedes = None, None
    if value is None and not fact.retracts:
        return None
    return fact.model_copy(
        update={
            "key": key,
            "type": spec.type if spec else fact.type,
            "value": value,
            "supersedes": supersedes,
        }
    )


def _withdraw(fact: Fact, old: Any) -> Fact:
    """A retraction naming some items of a longer known list is the list that remains
    (a list that only shrinks is an ordinary new value, :class:`Fact`); naming none of
    them it changes nothing. Anything else is withdrawn whole."""
    spec = VOCABULARY.get(fact.key)
    if (
        spec is None
        or spec.kind != "list"
        or not isinstance(old, list)
        or not isinstance(fact.value, list)
    ):
        return fact
    gone = [str(w) for w in fact.value]
    remaining = [o for o in old if not any(item_matches(str(o), w) for w in gone)]
    if not remaining:
        return fact
    shrunk = len(remaining) < len(old)
    return fact.model_copy(
        update={"value": remaining, "retracts": False, "supersedes": old if shrunk else None}
    )


def reconcile(fact: Fact, known: Mapping[str, Any], *, additive: bool = False) -> Fact:
    """Relate a normalised fact to the user's known value of the same key.

    List keys come back whole (known items + new ones) because the fact store keeps one
    current row per key: emitting only the new item would retire the old ones. A turn
    word replaces the list instead, unless the key accumulates or the text says "also".
    ``supersedes`` becomes the known value whenever it differs from the new one. A
    retraction is related by :func:`_withdraw`.
    """
    old = known.get(fact.key)
    if fact.retracts:
        return _withdraw(fact, old)
    if old is None:
        return fact
    value = fact.value
    spec = VOCABULARY.get(fact.key)
    if (
        spec is not None
        and spec.kind == "list"
        and isinstance(old, list)
        and (spec.accumulate or additive or not fact.override)
    ):
        value = normalise_list([*old, *value])
    if same_value(old, value):
        return fact.model_copy(update={"value": value})
    return fact.model_copy(update={"value": value, "supersedes": old})
