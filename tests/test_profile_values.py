"""The personal keys (diet, allergies, birthday, family, pets): their
synonyms, value shapes and how a withdrawal relates to the known value."""

from __future__ import annotations

from typing import Any

import pytest

from memstack.core.facts.fact import Fact
from memstack.core.facts.vocabulary import (
    VOCABULARY,
    canonical_key,
    normalise_fact,
    normalise_value,
    reconcile,
)


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("Dietary Preference", "diet"),
        ("饮食", "diet"),
        ("allergic-to", "allergies"),
        ("过敏原", "allergies"),
        ("DOB", "birthday"),
        ("出生日期", "birthday"),
        ("family members", "family"),
        ("老婆", "family"),
        ("宠物", "pets"),
        ("Cat", "pets"),
    ],
)
def test_synonyms(raw: str, key: str) -> None:
    assert canonical_key(raw) == key


def test_types() -> None:
    assert {k: (VOCABULARY[k].type, VOCABULARY[k].kind) for k in ("diet", "allergies")} == {
        "diet": ("profile", "text"),
        "allergies": ("constraint", "list"),
    }
    assert [VOCABULARY[k].type for k in ("birthday", "family", "pets")] == ["profile"] * 3


@pytest.mark.parametrize(
    ("value", "items"),
    [
        ("wife: Anna", ["wife: Anna"]),
        (["wife:Anna", "姐姐：小雨"], ["wife: Anna", "姐姐: 小雨"]),
        ("wife and two kids", ["wife", "two kids"]),
        ("wife: Anna and son: Tom", ["wife: Anna", "son: Tom"]),
        ("kids: Anna and Tom", ["kids: Anna and Tom"]),  # one relation, two names
        ("儿子、女儿", ["儿子", "女儿"]),
        ("dog (Rex)", ["dog: Rex"]),
    ],
)
def test_family_and_pets_items(value: Any, items: list[str]) -> None:
    assert normalise_value("family", value) == items
    assert normalise_value("pets", value) == items


@pytest.mark.parametrize(
    ("value", "items"),
    [
        ("peanuts", ["peanuts"]),
        ("peanut allergy", ["peanut"]),
        ("allergic to peanuts and shellfish", ["peanuts", "shellfish"]),
        ("对芒果过敏", ["芒果"]),
        (["花生过敏", "芒果"], ["花生", "芒果"]),
        ("allergy", ["allergy"]),  # nothing would be left: the word stays
    ],
)
def test_allergies_are_the_allergen(value: Any, items: list[str]) -> None:
    assert normalise_value("allergies", value) == items


@pytest.mark.parametrize(
    ("value", "date"),
    [
        ("1990-10-08", "1990-10-08"),
        ("1990/10/8", "1990-10-08"),
        ("1990-10-08T00:00:00Z", "1990-10-08"),
        ("10/08", "10-08"),
        ("--10-08", "10-08"),
        ("25/12", "12-25"),
        ("10/08/90", "10-08"),  # a two-digit year names no century
        ("March 3", "03-03"),
        ("Sept. 21st", "09-21"),
        ("3rd of March 1990", "1990-03-03"),
        ("March 3, 1990", "1990-03-03"),
        ("十月八号", "10-08"),
        ("十二月二十五日", "12-25"),
        ("1990年10月8日", "1990-10-08"),
        ("02-29", "02-29"),
        ({"month": 3, "day": 3, "year": 1990}, "1990-03-03"),
    ],
)
def test_birthdays(value: Any, date: str) -> None:
    assert normalise_value("birthday", value) == date


@pytest.mark.parametrize(
    "value", ["1990-02-29", "13/13", "农历八月十五", "tomorrow", "", 19901008, {"month": 3}]
)
def test_what_is_no_birthday(value: Any) -> None:
    with pytest.raises(ValueError):
        normalise_value("birthday", value)


def fact(key: str, value: Any, **kw: Any) -> Fact:
    return Fact(key=key, value=value, type="profile", confidence=0.9, source="user_stated", **kw)


def test_a_relation_key_labels_its_value() -> None:
    f = normalise_fact(fact("wife", "Anna"))
    assert f is not None and (f.key, f.value) == ("family", ["wife: Anna"])
    f = normalise_fact(fact("狗", ["豆豆", "柯基: 球球"]))
    assert f is not None and (f.key, f.value) == ("pets", ["狗: 豆豆", "柯基: 球球"])


def test_a_retraction_survives_an_unreadable_value() -> None:
    f = normalise_fact(fact("birthday", "sometime", retracts=True))
    assert f is not None and (f.key, f.value, f.retracts) == ("birthday", None, True)
    assert normalise_fact(fact("birthday", "sometime")) is None  # a statement does not


KNOWN_PETS = {"pets": ["cat: Tom", "dog: Rex"]}


@pytest.mark.parametrize(
    ("withdrawn", "value", "retracts", "supersedes"),
    [
        (["Tom"], ["dog: Rex"], False, KNOWN_PETS["pets"]),
        (["cat"], ["dog: Rex"], False, KNOWN_PETS["pets"]),
        (["retriever"], KNOWN_PETS["pets"], False, None),  # names none: nothing changes
        (["cat", "dog"], ["cat", "dog"], True, None),  # names all: the key ends
        (None, None, True, None),  # names nothing: the key ends
    ],
)
def test_a_list_withdrawal_against_the_known_list(
    withdrawn: Any, value: Any, retracts: bool, supersedes: Any
) -> None:
    f = normalise_fact(fact("pets", withdrawn, retracts=True))
    assert f is not None
    out = reconcile(f, KNOWN_PETS)
    assert (out.value, out.retracts, out.supersedes) == (value, retracts, supersedes)


def test_a_text_withdrawal_is_kept_and_a_new_family_member_adds() -> None:
    f = normalise_fact(fact("diet", "vegetarian", retracts=True))
    assert f is not None
    assert reconcile(f, {"diet": "vegan"}).retracts is True
    g = normalise_fact(fact("family", "son: Tom"))
    assert g is not None
    assert reconcile(g, {"family": ["wife: Anna"]}).value == ["wife: Anna", "son: Tom"]
