"""The rule extractor on the terse, list-like way chat states things about oneself.

Written for these tests (none is a sample sentence): a job and a city as a bare clause, a
team in place of a job, a home named by "here in", a symptom after an allergen, a slip
taken back with "well", items dropped or added by a word, several relatives or pets
named in one breath, a diet by "went" and a weighed purchase by "comparing".
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fact_rules import after


@pytest.mark.parametrize(
    ("messages", "key", "value"),
    [
        (
            ["night-shift nurse in Tromsø. need a good sleep mask"],
            "occupation",
            "night-shift nurse",
        ),
        (["quick q — carpenter in Split here, what glue for oak?"], "occupation", "carpenter"),
        (["I'm in HR so payroll questions are my life"], "occupation", "HR"),
        (["I rent in Zagreb, work as a sommelier"], "occupation", "sommelier"),
        (["I'm a chef — well, sous chef, still learning"], "occupation", "sous chef"),
        (["still here in Tartu, winters are long"], "city", "Tartu"),
        (["my dad moved in with us in Kaunas last spring"], "city", "Kaunas"),
        (["allergic to walnuts, bad rash every time"], "allergies", ["walnuts"]),
        (
            ["for a new pram my focus is weight and fold size, colour doesn't matter"],
            "focus",
            ["weight", "fold size"],
        ),
        (["I have two sons, Ivo and Marko"], "family", ["son: Ivo", "son: Marko"]),
        (
            ["it's me, my wife Lea and our two rabbits Pip and Dot"],
            "pets",
            ["rabbit: Pip", "rabbit: Dot"],
        ),
        (["used to eat everything, went fully vegan in March"], "diet", "vegan"),
        (["big fan of chess and sailing"], "likes", ["chess", "sailing"]),
        (["I'm comparing e-readers at the moment"], "goal", "e-readers"),
        (
            ["I like rowing, chess and baking", "scrap baking, no time for it"],
            "likes",
            ["rowing", "chess"],
        ),
        (
            ["please never suggest payday loans", "add crypto to that list too"],
            "do_not_recommend",
            ["payday loans", "crypto"],
        ),
    ],
)
def test_terse_statements_about_oneself(messages: list[str], key: str, value: Any) -> None:
    assert after(*messages).get(key) == value


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("my cousin, a dentist in Riga, says floss more", "occupation"),
        ("my cousin, a dentist in Riga, says floss more", "city"),
        ("I'm in it for the long haul", "occupation"),
        ("I'm in QA", "city"),
        ("budget is €9,000 for the first year", "goal"),
        ("big fan of your answers", "likes"),
    ],
)
def test_words_that_are_not_the_users_fact(text: str, key: str) -> None:
    assert key not in after(text)
