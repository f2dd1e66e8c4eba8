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
from memstack.ingest.extraction.rules.context import (
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
from memstack.ingest.extraction.rules.places import residence
from memstack.ingest.extraction.rules.repairs import repaired
from memstack.ingest.extraction.rules.scope import views
from memstack.ingest.extraction.rules.sentences import (
    ADDITIVE,
    MASK,
    TURN_WORDS,
    has_turn_word,
    hypothetical_span,
    is_question,
    mask_others,
    question_at,
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
    *zh_goals.RULES,
    *zh_personal.RULES,
    *en.RULES,
    *en_goals.RULES,
    *en_personal.RULES,
)


class RulesExtractor:
    """Regex rules over each sentence of a user message; offline and deterministic."""

    name = "rules"

    async def extract(
        self, text: str, *, role: str = "user", known: Mapping[str, Any] | None = None
    ) -> list[Fact]:
        return self.extract_sync(text, role=role, known=known)

    def extract_sync(
        self, text: str, *, role: str = "user", known: Mapping[str, Any] | None = None
    ) -> list[Fact]:
        if role != "user" or not text.strip():
            return []
        known_n = normalise_known(known)
        money = BudgetContext(known=known_budget(known_n))
        short_message = len(re.sub(r"[\s，,。.!！?？~～]", "", text)) <= 12
        found: dict[str, Fact] = {}
        additive: set[str] = set()
        carried_turn = False
        statements: list[str] = []
        past: list[str] = []
        for said in split_sentences(mask_others(tidy_chat(text))):
            whole = repaired(said, self._read)
            imagined = hypothetical_span(whole)
            sentence = whole
            if imagined is not None:
                start, end = imagined
                sentence = (whole[:start] + MASK + whole[end:]).strip(" ，,")
            if not sentence:
                continue
            seen = views(sentence)
            past += seen.past
            turn = 0 if carried_turn else turn_at(seen.current)
            asks = question_at(seen.current)
            statements.append(seen.current if asks is None else seen.current[:asks])
            facts, adds = self._sentence_facts(seen.current, turn, asks, known_n, found)
            facts = [f for f in facts if f.key != "city"] + self._city(
                seen.city, turn, known_n, found
            )
            budget = budget_fact(
                sentence,
                turn_at=0 if carried_turn else turn_at(sentence),
                ctx=money,
                short_message=short_message,
                question_at=question_at(sentence),
            )
            if budget:
                facts.insert(0, budget)
            # "其实，我改主意了。预算八千。": the turn word speaks for the next statement.
            carried_turn = turn is not None and not facts
            currency = default_currency(sentence)
            normalised = [normalise_fact(raw, default_currency=currency) for raw in facts]
            for fact in _per_key([f for f in normalised if f is not None]):
                if adds:
                    additive.add(fact.key)
                found[fact.key] = _merge_within_message(found.get(fact.key), fact)
        for ended in self._ended(past, known_n, found):
            found[ended.key] = ended
        for stale in stale_facts(" ".join(statements), known_n, found):
            found[stale.key] = stale
        return [
            reconcile(withdrawn_items(f, known_n.get(f.key)), known_n, additive=f.key in additive)
            for f in found.values()
            if names_current(f, known_n.get(f.key))
        ]

    def _city(
        self, view: str, turn: int | None, known: Mapping[str, Any], found: Mapping[str, Fact]
    ) -> list[Fact]:
        """The city a sentence gives as where the user lives: read with trips, origins and
        moves to come hidden, by the rules, else by the residence frames of
        :mod:`.places`."""
        facts, _ = self._sentence_facts(view, turn, question_at(view), known, found)
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
            for raw in self._read(clause):
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
        return [budget, *facts] if budget is not None else facts

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
