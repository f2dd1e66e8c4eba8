"""English rules for the personal keys: diet, allergies, birthday, family, pets.

Family and pets are read with their names ("my husband Luis", "a beagle called Snoopy")
and their enumerations ("a son and a daughter"). A pet that died is withdrawn.
"""

from __future__ import annotations

import re

from memstack.ingest.extraction.rules.en import CLAUSE_START, NAME, introduced
from memstack.ingest.extraction.rules.engine import Rule, cut, rule
from memstack.ingest.extraction.rules.lexicon import ANIMALS_EN, DIETS_EN, KIN_EN, NOT_NAMES

_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
)
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"
_DATE = (
    rf"(?i:{_MONTH}\s+(?:the\s+)?{_DAY}(?:,?\s*\d{{4}})?|{_DAY}\s+(?:of\s+)?{_MONTH}"
    r"(?:,?\s*\d{4})?)|\d{4}-\d{1,2}-\d{1,2}|\d{1,2}/\d{1,2}(?:/\d{2,4})?"
)


def _item(what: str, count: str | None, name: str | None) -> str:
    """ "two kids", "son", "beagle: Snoopy": a family or pets item."""
    what = re.sub(r"^(?i:new|little|old|sweet|rescue)\s+", "", what)
    if count and count.casefold() not in ("a", "an", "one"):
        what = f"{count} {what}"
    return f"{what}: {name}" if name and name.casefold() not in NOT_NAMES else what


def _enumerated(m: re.Match[str], sentence: str, thing: str) -> list[str]:
    """The item ``m`` names and the ones listed after it: "a son and a daughter"."""
    items = [_item(m.group(thing), m.groupdict().get("n"), m.groupdict().get("name"))]
    more = re.compile(
        rf"(?:\s*,\s*|\s+)(?i:and\s+)?(?i:(?:our|my)\s+)?(?P<n>(?i:a|an|one|two|three|\d))"
        rf"\s+(?P<{thing}>"
        + (_KIDS if thing == "rel" else _ANIMAL)
        + rf")\b(?:,?\s+(?i:named|called)\s+(?P<name>{NAME}))?"
    )
    pos = m.end()
    while (n := more.match(sentence, pos)) is not None:
        items.append(_item(n.group(thing), n.group("n"), n.group("name")))
        pos = n.end()
    return items


def _family(m: re.Match[str], sentence: str) -> list[str]:
    return _enumerated(m, sentence, "rel")


def _pet(m: re.Match[str], sentence: str) -> list[str]:
    items = _enumerated(m, sentence, "animal")
    count = {"two": 2, "three": 3}.get((m.groupdict().get("n") or "").casefold(), 0)
    named = all(": " in item for item in items[1:])
    if count == len(items) - 1 and named and not m.groupdict().get("name"):
        # "two dogs, a greyhound called Pepper and a beagle called Moose": the count
        # heads the pets it then lists.
        return items[1:]
    return items


# A sentence that lists who lives with the user: "household: me, my husband, a budgie…".
_HOUSEHOLD = re.compile(
    r"^(?i:(?:my\s+|our\s+)?(?:household|family|home|crew|gang)\s*(?::|=|is|consists\s+of)"
    r"|at\s+home\s*(?::|we\s+have|there's)|(?:it's|it\s+is)\s+(?:just\s+)?me\s*(?:,|and\b))"
    r"|(?i:\blive\s+(?:in\s+\S+(?:\s+\S+)?\s+)?(?:with|w/?)\s)"
)


def _household_pet(m: re.Match[str], sentence: str) -> list[str] | None:
    return _pet(m, sentence) if _HOUSEHOLD.search(sentence) else None


def _children(m: re.Match[str], sentence: str) -> list[str]:
    if m.group("rel"):
        return _enumerated(m, sentence, "rel")
    if m.group("r2"):
        return [m.group("r2")]
    return [f"{m.group('n3')} {m.group('r3') or 'kids'}"]


_KIDS = (
    r"(?i:kids?|children|child|sons?|daughters?|boys|girls|brothers?|sisters?|siblings"
    r"|grandkids|grandchildren|stepkids|twins)"
)
# An animal, not a thing named after one: "cat allergy", "dog food", "dog-friendly".
_ANIMAL = (
    rf"(?:[\w-]+\s+){{0,2}}?(?i:{ANIMALS_EN})s?\b"
    r"(?!\s+(?i:allerg|hair|food|litter|toy|bed|sitter|door|tree|person|friendly))"
)
_PET_DEATH = (
    r"(?:passed away|died|passed|was put down|was put to sleep|ran away|is gone|went missing)"
)


# "I'm vegan and allergic to soy": the second predicate shares the user's "I'm"; the first
# one (a diet, a job) may already be read, so the "I'm" is looked for before the match.
_I_AM_BEFORE = re.compile(r"(?i:\bI(?:'m|\s+am)\s+(?:[\w-]+\s+){1,3})$")


def _shared_subject(m: re.Match[str], sentence: str) -> str | None:
    if _I_AM_BEFORE.search(sentence[: m.start()]) is None:
        return None
    return cut(sentence[m.end() :]) or None


RULES: tuple[Rule, ...] = (
    rule(
        "diet",
        r"(?i:\bI\s+(?:am|'m)\s+no\s+longer\s+(?:a\s+)?|\b(?:stopped|quit"
        r"|gave up)\s+(?:being\s+)?(?:a\s+)?)"
        rf"(?P<v>(?i:{DIETS_EN}))\b"
        rf"|(?i:\bI\s*(?:am|'m)\s+not\s+(?:a\s+)?)(?P<v2>(?i:{DIETS_EN}))\s+(?i:anymore|any more"
        r"|any longer)\b",
        0.9,
        statements_only=True,
        retracts=True,
    ),
    rule(
        "diet",
        r"(?i:\b(?:I|we)(?:'m|'re|\s+am|\s+are|'ve\s+been|\s+have\s+been)\s+(?:(?:a|an|now|strictly|fully|mostly|also|still|both"
        r"|pretty much)\s+)*"
        rf"|\bI\s+(?:eat|cook|keep|went|go|follow|do)\s+(?:(?:only|strictly|a|the|fully|completely)\s+)?"
        # "…, went fully vegetarian last year", "long-time vegetarian though"
        r"|(?:^|(?<=,\s))(?:went|turned)\s+(?:fully\s+|completely\s+)?"
        r"|(?:^|(?<=,\s))(?:long-?time|lifelong)\s+"
        r"|(?:^|(?<=,\s))(?:eat|eating)\s+(?:only\s+|strictly\s+)?)"
        # Hyphened qualifiers stay with the diet ("semi-vegetarian"); "non-vegan" is no diet.
        rf"(?P<v>(?i:(?:(?!non-|ex-)[a-z]+-)*(?:{DIETS_EN})))\b"
        r"(?!\s+(?i:food|restaurants?|options?|recipes?|places?|friends?|dishes?|meals?))"
        rf"|(?i:(?:\bI(?:'m|\s+am)\s+|^|(?<=[,.]\s))on\s+(?:a|the)\s+"
        r"|\bI\s+(?:\w+\s+)?(?:follow|do|keep)\s+(?:a|an|the)\s+|(?:^|(?<=[,.]\s)|\b)doing\s+(?:a|an|the)\s+)"
        r"(?P<v2>[\w-]+(?:\s+[\w-]+)?)\s+diet\b"
        rf"|^(?P<v3>(?i:{DIETS_EN}))(?:\s+(?i:btw|too|here|myself|diet|only)){{0,2}}[.!]*$"
        # "fully vegan since March", "low-carb eater": a chat fragment about oneself
        rf"|(?:^|(?<=,\s))(?i:(?:well|so|ok|okay)[,\s]+)?(?i:(?:fully|strictly|now|mostly|full)\s+)+"
        rf"(?P<v4>(?i:{DIETS_EN}))\b"
        rf"|(?:^|(?<=,\s))(?P<v5>(?i:{DIETS_EN}))\s+(?i:eater|here|now)\b",
        0.9,
        statements_only=True,
    ),
    # "I'm Maya, a UX designer in Berlin, vegan, ...": a fragment of a self-introduction.
    rule(
        "diet",
        rf"(?<=,\s)(?P<v>(?i:{DIETS_EN}))(?=\s*[,.;!]|$)",
        0.85,
        statements_only=True,
        value=lambda m, s: m.group("v") if introduced(s) else None,
    ),
    rule(
        "allergies",
        r"(?i:(?:\bI(?:'m|\s+am)\s+|^|(?<=,\s))no\s+longer\s+allergic\s+to\s+|\boutgrew\s+my\s+)"
        r"(?P<v>[^,.;!?]+?)(?:\s+allerg(?:y|ies))?(?=[,.;!?]|$)"
        r"|(?i:(?:\bI(?:'m|\s+am)\s+|^"
        r"|(?<=,\s))not\s+allergic\s+to\s+)(?P<v2>[^,.;!?]+?)\s+(?i:anymore|any more|any longer)\b",
        0.9,
        statements_only=True,
        retracts=True,
    ),
    # Outgrown with nothing named ("turns out I outgrew it"): every allergy on record ends.
    rule(
        "allergies",
        r"(?i:\bI(?:'ve|\s+have)?\s+(?:outgrew|outgrown)\s+(?:it|them|the\s+allerg(?:y|ies))\b"
        r"|\b(?:I(?:'m|\s+am)\s+)?(?:no\s+longer\s+allergic|not\s+allergic\s+(?:anymore|any more"
        r"|any longer))\b(?!\s+to\b))",
        0.9,
        statements_only=True,
        retracts=True,
        value=lambda m, s: None,
    ),
    rule(
        "allergies",
        r"(?i:\bI(?:'m|\s+am)\s+(?:(?:very|severely|highly|mildly|super|also|a bit|slightly|really"
        r"|deathly)\s+)*allergic\s+to\s+"
        rf"|{CLAUSE_START}(?:oh\s+|also\s+|and\s+)*allergic\s+to\s+)",
        0.9,
        statements_only=True,
    ),
    rule(
        "allergies",
        r"(?i:\band\s+(?:also\s+)?allergic\s+to\s+)",
        0.9,
        statements_only=True,
        value=_shared_subject,
    ),
    rule(
        "allergies",
        r"(?i:\bI\s+(?:have|'ve got|got)\s+(?:an?\s+)?(?:(?:severe|mild|bad|serious)\s+)?|\bmy\s+)"
        r"(?P<v>(?i:[a-z][\w-]*(?:\s+[a-z][\w-]*)?))\s+(?i:allerg(?:y|ies))\b",
        0.9,
        statements_only=True,
        reject=re.compile(r"(?i:^(?:an?|the|some|food|bad|severe|mild|seasonal)$)"),
    ),
    rule(
        "birthday",
        r"(?i:\bmy\s+(?:birthday|bday|b-day|birth\s*date|date of birth)(?:'s|\s+is|\s+falls)?"
        r"(?:\s+coming\s+up)?\s+(?:on\s+)?(?:the\s+)?|\bI\s+was\s+born\s+(?:on\s+)?(?:the\s+)?"
        r"|(?:^|(?<=,\s))born\s+(?:on\s+)?(?:the\s+)?"
        # a self-introduction's list item: "…, bday's 05-06"
        r"|(?:^|(?<=,\s))(?:birthday|bday|b-day)(?:'s|\s+is)?\s+(?:on\s+)?(?:the\s+)?)"
        rf"(?P<v>{_DATE})"
        # "the 29th of Feb is my birthday"
        rf"|(?i:\b(?:the\s+)?)(?P<v2>{_DATE})\s+(?i:is\s+my\s+(?:birthday|bday|b-day))\b",
        0.9,
        statements_only=True,
    ),
    rule(
        "family",
        # "our twins", "our son": the user's family said for the couple.
        r"(?i:\b(?:my|our)\s+(?:(?:little|older|younger|big|baby|twin|elder|oldest|youngest|eldest)\s+)?)"
        rf"(?P<rel>(?i:{KIN_EN}))\b(?!-)(?:,?\s+(?P<name>{NAME})\b)?",
        0.85,
        value=_family,
        any_subject=True,
    ),
    rule(
        "family",
        r"(?i:\b(?:I|we)\s+(?:have|'ve got|have got|got)\s+|\bI(?:'m"
        r"|\s+am)\s+(?:happily\s+)?married\s+with\s+)"
        r"(?:(?P<n>(?i:a|an|one|two|three|four|five|six|\d))\s+(?i:(?:little|young|grown|teenage|small"
        rf"|adult|beautiful|wonderful)\s+)?(?P<rel>{_KIDS})|(?P<r2>(?i:kids|children|twins|grandkids)))\b"
        rf"(?:\s+(?i:named|called)\s+(?P<name>{NAME}))?"
        r"|(?i:\bI(?:'m|\s+am)\s+(?:a\s+)?(?:mom|mum|dad|mother|father|parent)\s+(?:of|to)\s+)"
        r"(?P<n3>(?i:two|three|four|five|\d))(?:\s+(?P<r3>(?i:kids|children|boys|girls)))?",
        0.85,
        value=_children,
        any_subject=True,
    ),
    rule(
        "pets",
        rf"(?i:\b(?:my|our|the)\s+)(?P<animal>{_ANIMAL})(?:\s+{NAME})?\s+(?i:just\s+|recently\s+)?{_PET_DEATH}"
        rf"|(?i:\b(?:I|we)\s+had\s+(?:a|an)\s+)(?P<a2>{_ANIMAL})(?i:\s+but\s+(?:she|he|it|they)\s+(?:\w+\s+)?){_PET_DEATH}"
        rf"|(?i:\b(?:lost|had to put down|gave away|rehomed)\s+(?:my|our)\s+)(?P<a3>{_ANIMAL})",
        0.85,
        statements_only=True,
        retracts=True,
        value=lambda m, s: m.group("animal") or m.group("a2") or m.group("a3"),
    ),
    # "we're pet-free now", "no pets anymore": whichever pet it was, none is left.
    rule(
        "pets",
        r"(?i:\b(?:I'm|I\s+am|we're|we\s+are)\s+(?:now\s+)?pet-?\s?free\b"
        r"|\bno\s+(?:more\s+)?pets\s+(?:anymore|any more|now)\b"
        r"|\b(?:I|we)\s+(?:don't|do not)\s+have\s+(?:a|any)\s+pets?\s+(?:anymore|any more)\b)",
        0.85,
        statements_only=True,
        retracts=True,
        value=lambda m, s: None,
    ),
    rule(
        "pets",
        r"(?i:\b(?:I|we)(?:'ve\s+got|\s+(?:also\s+|still\s+|already\s+)?(?:have|have got|got|own"
        r"|adopted|rescued))\s+|\bliving\s+with\s+|^(?:also\s+)?(?:got|have)\s+)"
        rf"(?P<n>(?i:a|an|one|two|three|\d))\s+(?P<animal>{_ANIMAL})"
        rf"(?:,?\s+(?i:named|called)\s+(?P<name>{NAME}))?",
        0.85,
        statements_only=True,
        value=_pet,
    ),
    rule(
        "pets",
        r"(?:(?<=,\s)|(?<=,)|\b(?:and|plus)\s+)(?P<n>(?i:a|an|one|two|three|\d))\s+"
        rf"(?P<animal>{_ANIMAL})(?:,?\s+(?i:named|called)\s+(?P<name>{NAME}))?",
        0.85,
        statements_only=True,
        value=_household_pet,
    ),
    rule(
        "pets",
        rf"(?i:\b(?:my|our)\s+)(?P<animal>{_ANIMAL})(?:'s\s+name\s+is\s+|,?\s+(?i:named\s+|called\s+)?)?(?P<name>{NAME})?",
        0.85,
        statements_only=True,
        value=_pet,
    ),
)
