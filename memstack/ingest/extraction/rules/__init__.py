"""The offline rule extractor: Chinese and English patterns for explicit statements.

Rules only fire on things the user said outright, so their facts are ``user_stated``;
anything that needs judgement is the LLM extractor's job. Assistant, system and tool
messages yield nothing: a rule cannot tell an assistant restating the user from an
assistant suggesting something, and a suggestion must never become a user fact. When a
statement is in doubt (quoted, imagined, about someone else) nothing is stored.

The package: :mod:`.sentences` reads a message (sentences, questions, turn words, whose
words they are), :mod:`.money` finds budgets, :mod:`.zh`, :mod:`.zh_goals`,
:mod:`.zh_personal` (with :mod:`.zh_words` for reading Chinese words) and :mod:`.en`,
:mod:`.en_goals`, :mod:`.en_personal` hold the rules for the other keys, :mod:`.engine`
applies them and
:mod:`.context` resolves statements that lean on earlier ones; :mod:`.stale` withdraws
values a message changes in words the rules cannot read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memstack.core.facts.fact import Fact
from memstack.core.facts.profile_values import item_matches
from memstack.core.facts.vocabulary import (
    VOCABULARY,
    default_currency,
    normalise_fact,
    normalise_known,
    normalise_list,
    reconcile,
    same_value,
)
from memstack.ingest.extraction.rules import en, en_goals, en_personal, zh, zh_goals, zh_personal
from memstack.ingest.extraction.rules.confidence import calibrated
from memstack.ingest.extraction.rules.context import (
    animal_head,
    continuations,
    correction,
    ellipsis,
    names_current,
    withdrawn_items,
)
from memstack.ingest.extraction.rules.engine import (
    NICKNAME,
    SWITCHED_GOAL,
    WEAK_GOAL,
    Scope,
    apply_rules,
)
from memstack.ingest.extraction.rules.money import BudgetContext, budget_fact, known_budget
from memstack.ingest.extraction.rules.named import named_family, named_pets, one_relative
from memstack.ingest.extraction.rules.places import residence
from memstack.ingest.extraction.rules.repairs import has_repair, joined, repaired
from memstack.ingest.extraction.rules.scope import presented, views
from memstack.ingest.extraction.rules.sentences import (
    ADDITIVE,
    MASK,
    TURN_WORDS,
    has_turn_word,
    hypothetical_span,
    is_question,
    mask_others,
    question_at,
    sarcastic,
    split_sentences,
    tidy_chat,
    turn_at,
)
from memstack.ingest.extraction.rules.stale import stale_facts

__all__ = [
    "TURN_WORDS",
    "RulesExtractor",
    "has_turn_word",
    "is_question",
    "split_sentences",
]

_RULES = (
    *zh.RULES,
    *zh_personal.BEFORE_GOALS,
    *zh_goals.RULES,
    *zh_personal.RULES,
    *en.RULES,
    *en_goals.RULES,
    *en_personal.RULES,
)


# Keys that say how the user feels about things: a sarcastic sentence's are reversed.
_SENTIMENT = frozenset({"likes", "dislikes", "focus"})


@dataclass
class _Reading:
    """What reading one message has gathered so far, sentence by sentence."""

    known: dict[str, Any]
    short_message: bool
    money: BudgetContext = field(default_factory=lambda: BudgetContext(known=None))
    found: dict[str, Fact] = field(default_factory=dict)
    additive: set[str] = field(default_factory=set)
    carried_turn: bool = False
    statements: list[str] = field(default_factory=list)
    past: list[str] = field(default_factory=list)


class RulesExtractor:
    """Regex rules over each sentence of a user message; offline and deterministic."""

    name = "rules"

    def __init__(self, *, calibrate: bool = True) -> None:
        # Off only to read the rules' own priors (training the calibration).
        self.calibrate = calibrate

    async def extract(
        self, text: str, *, role: str = "user", known: Mapping[str, Any] | None = None
    ) -> list[Fact]:
        return self.extract_sync(text, role=role, known=known)

    def extract_sync(
        self, text: str, *, role: str = "user", known: Mapping[str, Any] | None = None
    ) -> list[Fact]:
        if role != "user" or not text.strip():
            return []
        r = _Reading(normalise_known(known), len(re.sub(r"[\s，,。.!！?？~～]", "", text)) <= 12)
        r.money = BudgetContext(known=known_budget(r.known))
        sentences = joined(split_sentences(mask_others(tidy_chat(text))))
        for i, said in enumerate(sentences):
            following = sentences[i + 1] if i + 1 < len(sentences) else ""
            self._sentence(r, repaired(said, self._read), sarcastic(said, following))
        for ended in self._ended(r.past, r.known, r.found):
            r.found[ended.key] = ended
        for stale in stale_facts(" ".join(r.statements), r.known, r.found):
            r.found[stale.key] = stale
        facts = [
            reconcile(withdrawn_items(f, r.known.get(f.key)), r.known, additive=f.key in r.additive)
            for f in r.found.values()
            if names_current(f, r.known.get(f.key))
        ]
        return calibrated(facts, text, r.known) if self.calibrate else facts

    def _sentence(self, r: _Reading, whole: str, sarcasm: bool) -> None:
        """Read one sentence of a message into ``r``."""
        imagined = hypothetical_span(whole)
        sentence = whole
        if imagined is not None:
            start, end = imagined
            sentence = (whole[:start] + MASK + whole[end:]).strip(" ，,")
        if not sentence:
            return
        seen = views(sentence)
        r.past += seen.past
        turn = 0 if r.carried_turn else turn_at(seen.current)
        asks = question_at(seen.current)
        r.statements.append(seen.current if asks is None else seen.current[:asks])
        facts, adds = self._sentence_facts(seen.current, turn, asks, r.known, r.found)
        # With nothing hidden for the city, the reading just made holds its cities.
        read = facts if seen.city == seen.current else None
        facts = [f for f in facts if f.key != "city"] + self._city(
            seen.city, turn, r.known, r.found, read
        )
        if sarcasm:
            # "I just LOVE budget airlines 🙄": its liking (or loathing) is the opposite.
            facts = [f for f in facts if f.key not in _SENTIMENT]
        facts = _with_named(
            facts, "pets", named_pets(seen.current), renamed=has_repair(seen.current)
        )
        facts = _with_named(facts, "family", named_family(seen.current))
        budget = budget_fact(
            sentence,
            turn_at=0 if r.carried_turn else turn_at(sentence),
            ctx=r.money,
            short_message=r.short_message,
            question_at=question_at(sentence),
        )
        if budget:
            facts.insert(0, budget)
        # "其实，我改主意了。预算八千。": the turn word speaks for the next statement.
        r.carried_turn = turn is not None and not facts
        currency = default_currency(sentence)
        normalised = [normalise_fact(raw, default_currency=currency) for raw in facts]
        for fact in _per_key([f for f in normalised if f is not None]):
            if adds:
                r.additive.add(fact.key)
            r.found[fact.key] = _merge_within_message(r.found.get(fact.key), fact)

    def _city(
        self,
        view: str,
        turn: int | None,
        known: Mapping[str, Any],
        found: Mapping[str, Fact],
        read: list[Fact] | None = None,
    ) -> list[Fact]:
        """The city a sentence gives as where the user lives: read with trips, origins and
        moves to come hidden, by the rules (``read``: their reading of this very view, if
        made), else by the residence frames of :mod:`.places`."""
        facts = (
            read
            if read is not None
            else self._sentence_facts(view, turn, question_at(view), known, found)[0]
        )
        cities = [f for f in facts if f.key == "city"]
        if cities or question_at(view) == 0:
            return cities
        home = residence(view)
        return [home] if home is not None else []

    def _ended(
        self, past: list[str], known: Mapping[str, Any], found: Mapping[str, Fact]
    ) -> list[Fact]:
        """Withdrawals of known values the message puts in the past ("I was a nurse",
        "以前住在上海"), for keys it states nothing current of."""
        out: dict[str, Fact] = {}
        for clause in past:
            for raw in self._read(presented(clause)):
                fact = normalise_fact(raw, default_currency=default_currency(clause))
                if fact is None or fact.key in found or fact.key not in known:
                    continue
                if _overlaps(fact.value, known[fact.key]):
                    out[fact.key] = fact.model_copy(update={"retracts": True, "confidence": 0.8})
        return list(out.values())

    def _read(self, text: str) -> list[Fact]:
        """What the rules read from ``text`` alone, values as written (to find a slip)."""
        facts = list(apply_rules(_RULES, text, Scope(turn_at=None, question_at=None)))
        ctx = BudgetContext(known=None)
        budget = budget_fact(text, turn_at=None, ctx=ctx, short_message=False)
        home = residence(text)
        return [f for f in (budget, home) if f is not None] + facts

    def _sentence_facts(
        self,
        sentence: str,
        turn: int | None,
        asks: int | None,
        known: Mapping[str, Any],
        found: Mapping[str, Fact],
    ) -> tuple[list[Fact], bool]:
        """The rule facts of one sentence, and whether it adds to lists ("也", "too")."""
        scope = Scope(turn_at=turn, question_at=asks)
        facts = list(apply_rules(_RULES, sentence, scope))
        facts += continuations(sentence, facts)
        adds = ADDITIVE.search(sentence) is not None
        extra = ellipsis(sentence, known, found)
        if extra is not None and extra.key not in {f.key for f in facts}:
            # "看livehouse也喜欢，不过音乐节就不喜欢了": an echo beside another list's statement
            facts.append(extra)
            adds = True
        fixed = correction(sentence, known)
        if fixed is not None and fixed.key not in {f.key for f in facts}:
            facts.append(fixed)
        if "name" in known or "name" in found or sum(f.key == "name" for f in facts) > 1:
            # "叫我小静就行" after "我叫欧阳静": what to be called, not a new name.
            facts = [f for f in facts if not (f.key == "name" and f.confidence == NICKNAME)]
        if "goal" not in known and "goal" not in found:
            # "改成X吧" with no goal to change is about something else (a plan, a setting).
            facts = [f for f in facts if not (f.key == "goal" and f.confidence == SWITCHED_GOAL)]
        goals = [f for f in facts if f.key == "goal"]
        if "goal" in known or "goal" in found or len(goals) > 1:
            # A bare need next to a goal is a requirement of it ("I need the stylus").
            facts = [f for f in facts if not (f.key == "goal" and f.confidence <= WEAK_GOAL)]
        return facts, adds


def _with_named(
    facts: list[Fact], key: str, named: list[str], *, renamed: bool = False
) -> list[Fact]:
    """The sentence's pets or family with the names :mod:`.named` found: a named member
    takes the place of the unnamed mention of its kind ("two greyhounds" → "greyhound:
    Luna", "greyhound: Blitz"; "儿子" → "儿子: 乐乐"); one the rules named already is
    theirs."""
    if not named or any(f.key == key and f.retracts for f in facts):
        # "our old whippet Juniper passed": a pet named only to say it is gone
        return facts
    said = next((f for f in facts if f.key == key), None)
    items = [
        str(i)
        for f in facts
        if f.key == key
        for i in (f.value if isinstance(f.value, list) else [f.value])
        if i is not None
    ]
    if key == "family":
        # "sons: Leo" names one son
        items = [
            f"{one_relative(i.split(': ')[0])}: {i.split(': ')[1]}"
            if ": " in i and i.isascii()
            else i
            for i in items
        ]
    if key == "pets" and renamed:
        # a pet renamed after a correction: the rules' readings give way to the last name
        labels = {n.split(": ")[0] for n in named}
        items = [i for i in items if ": " not in i or i.split(": ")[0] not in labels]
    have = {i.split(": ")[1].casefold() for i in items if ": " in i}
    new = [n for n in named if n.split(": ")[1].casefold() not in have]
    out: list[str] = []
    for item in items:
        kind = [n for n in new if _same_kind(animal_head(n), animal_head(item))]
        if ": " not in item and kind:
            out += [n for n in kind if n not in out]
        else:
            out.append(item)
    out += [n for n in new if n not in out]
    fact = Fact(
        key=key,
        value=out,
        type=VOCABULARY[key].type,
        confidence=said.confidence if said is not None else 0.8,
        source="user_stated",
    )
    return [f for f in facts if f.key != key] + [fact]


def _same_kind(a: str, b: str) -> bool:
    """ "rescue greyhound" and "greyhound", "小黑猫" and "猫": one names the other's kind."""
    return bool(a and b) and (a.endswith(b) or b.endswith(a))


def _overlaps(said: Any, known: Any) -> bool:
    """Whether a value said names (some of) a known one: an item of a list, or a text
    containing or contained in the known text."""
    items = said if isinstance(said, list) else [said]
    have = known if isinstance(known, list) else [known]
    return any(
        isinstance(i, str) and isinstance(k, str) and item_matches(k, i)
        for i in items
        for k in have
    )


def _per_key(facts: list[Fact]) -> list[Fact]:
    """One fact per key for a sentence: list items said in one sentence add up ("do not
    recommend Dell, do not recommend HP"); otherwise the later statement wins."""
    merged: dict[str, Fact] = {}
    for f in facts:
        earlier = merged.get(f.key)
        spec = VOCABULARY.get(f.key)
        if (
            earlier is not None
            and spec is not None
            and spec.kind == "list"
            and not earlier.retracts
            and not f.retracts
            and isinstance(earlier.value, list)
            and isinstance(f.value, list)
        ):
            items = normalise_list([*earlier.value, *f.value], named=spec.named)
            f = f.model_copy(update={"value": items, "override": earlier.override})
        merged[f.key] = f
    return list(merged.values())


def _merge_within_message(earlier: Fact | None, later: Fact) -> Fact:
    """Later statements in one message win; list items add up; the replaced value is kept.
    A withdrawal takes back what the message said before it."""
    if earlier is None:
        return later
    if later.retracts:
        if not names_current(later, earlier.value):
            return earlier
        return reconcile(withdrawn_items(later, earlier.value), {later.key: earlier.value})
    spec = VOCABULARY.get(later.key)
    if (
        spec is not None
        and spec.kind == "list"
        and not earlier.retracts
        and not (later.override and not spec.accumulate)
    ):
        items = normalise_list([*earlier.value, *later.value], named=spec.named)
        return later.model_copy(update={"value": items})
    if earlier.retracts or same_value(earlier.value, later.value) or later.supersedes is not None:
        return later
    return later.model_copy(update={"supersedes": earlier.value})
