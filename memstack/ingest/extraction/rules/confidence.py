"""Calibrated confidence for the rule extractor's facts.

A rule's own confidence says how sure its author was, not how often it is right. This
module replaces it with a probability learned from labelled conversations
(``eval-data/facts``, see its README): a logistic model over signals of the message
(a question, a quote, code, a hypothetical, someone else in the sentence, a correction,
sarcasm, the past) and of the fact (its key, the rule's prior, whether its value is
written in the message, near a negation, a question or another person). A fact at
0.9 is then right about nine times in ten on conversations the model never saw
(docs/facts.md shows the reliability diagram), and ``fact_min_confidence`` can decide
what is served as the user's and what waits as a candidate.

The weights are package data (``memstack/data/fact_confidence.json``), written by
``scripts/train_fact_confidence.py``; a feature the file does not name weighs nothing,
so an older file keeps working. Withdrawals keep their confidence: they are never
candidates.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

from memstack.core.facts.fact import Fact
from memstack.core.facts.vocabulary import VOCABULARY, same_value
from memstack.ingest.extraction.rules.lexicon import (
    ANIMAL_HEADS_ZH,
    ANIMALS_EN,
    BREEDS_ZH,
    DIET_WORDS_ZH,
    DIETS_EN,
    KIN_EN,
    KIN_ZH,
    OCCUPATION_EN,
    OCCUPATION_ZH,
    OTHERS_EN,
    OTHERS_ZH,
)
from memstack.ingest.extraction.rules.repairs import has_repair
from memstack.ingest.extraction.rules.scope import views
from memstack.ingest.extraction.rules.sentences import (
    MASK,
    has_turn_word,
    hypothetical_span,
    is_question,
    mask_code,
    mask_others,
    other_subject,
    sarcastic,
    split_sentences,
    tidy_chat,
)
from memstack.ingest.extraction.rules.zh_words import gazetteer
from memstack.text.locales import text_locale

_NEGATION = re.compile(
    r"不|没|别|无|非|(?i:\b(?:not|no|never|don't|dont|doesn't|isn't|can't|won't)\b|n't\b)"
)
_PEOPLE = re.compile(rf"{KIN_ZH}|{OTHERS_ZH}|他|她|(?i:\b(?:{KIN_EN}|{OTHERS_EN}|he|she|they)\b)")
MAX_READ = 0.99
_BASES = (0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)


@dataclass(frozen=True)
class MessageSignals:
    """What one message says about how far its statements can be trusted."""

    text: str
    sentences: tuple[str, ...]
    flags: Mapping[str, float]


def message_signals(text: str) -> MessageSignals:
    tidy = tidy_chat(text)
    sentences = tuple(split_sentences(mask_others(tidy)))
    seen = [views(s) for s in sentences]
    clauses = [c for s in sentences for c in re.split(r"[，,；;]", s)]
    flags = {
        "lang_zh": float(text_locale(text) == "zh"),
        "log_chars": math.log1p(len(text)) / 6,
        "sentences": min(len(sentences), 6) / 6,
        "question": float(any(is_question(s) for s in split_sentences(tidy))),
        "code": float(mask_code(tidy) != tidy),
        "quote": float(MASK in mask_others(mask_code(tidy).replace(MASK, ""))),
        "hypothetical": float(any(hypothetical_span(s) is not None for s in sentences)),
        "sarcasm": float(any(sarcastic(s) for s in split_sentences(tidy))),
        "repair": float(has_repair(tidy)),
        "past": float(any(v.past for v in seen)),
        "elsewhere": float(any(v.city != v.current for v in seen)),
        "other_person": float(any(other_subject(c.strip()) for c in clauses)),
        "people_words": min(len(_PEOPLE.findall(text)), 3) / 3,
        "negation": float(_NEGATION.search(text) is not None),
        "turn": float(has_turn_word(text)),
    }
    return MessageSignals(text, sentences, flags)


def _strings(value: Any) -> list[str]:
    items = value if isinstance(value, list) else [value]
    return [str(i).split(": ")[-1] for i in items if isinstance(i, str) and i.strip()]


def _span(text: str, value: Any) -> tuple[int, int] | None:
    """Where the value's written items stand in ``text``: from the first found to the end
    of the last found (None: no item is written as such)."""
    folded = text.casefold()
    found = [(at, at + len(i)) for i in _strings(value) if (at := folded.find(i.casefold())) >= 0]
    return (min(a for a, _ in found), max(b for _, b in found)) if found else None


_ENDS = "，,。.!！?？;；\n"
# More of a list after its last item read: "…和跑步，还有瑜伽", "…, and battle passes".
# Not a conjunction opening a new statement: "…peanuts and my budget is…", "…和我老公…".
_MORE_ITEMS = re.compile(
    r"^[^。.!！?？\n]{0,6}?(?:、|(?:和|跟|及|以及|还有|另外)(?![我你他她它])"
    r"|(?i:\b(?:and|or|plus)\b|&)(?!\s+(?i:I|I'm|I've|my|me|we|our|you|your|he|she|they|it|"
    r"it's|the|this|that|his|her|their)\b))"
)
_AMOUNT = re.compile(
    r"\d[\d,.]*\s*[kKwW万千]?|[一二两三四五六七八九十][零一二两三四五六七八九十百千万]+"
)
_REPAIR_AFTER = re.compile(
    r"不对|说错|打错|写错|口误|(?:啊|呃|哦)不|(?i:\bsorry\b|\bI\s+mean|\bno\s+wait|\bwait\s+no|\btypo\b|\bactually\b)"
)
_KIND_WORDS: dict[str, re.Pattern[str]] = {
    "city": re.compile(
        r"(?<![A-Za-z])[A-Z][a-z]{2,}(?:\s+[A-Z][a-z]+)?|[\u4e00-\u9fff]{2,3}(?=人|市|的|出差|玩)"
    ),
    "budget_limit": _AMOUNT,
    "language": re.compile(
        r"(?i:english|chinese|french|german|spanish|japanese|korean)|[英中法德日韩西]文|[英法德日韩]语"
    ),
}


def _position(fact: Fact, msg: MessageSignals) -> dict[str, float]:
    """Where the fact's words stand and what surrounds them."""
    text = msg.text
    span = _span(text, fact.value)
    if span is None:
        return {}
    at, stop = span
    start = max((text.rfind(c, 0, at) for c in _ENDS), default=-1) + 1
    end = min((i for c in _ENDS if (i := text.find(c, stop)) >= 0), default=len(text))
    clause = text[start:end]
    x = {
        "near_negation": float(_NEGATION.search(text[max(0, at - 8) : at]) is not None),
        "near_question": float(text[end : end + 1] in ("?", "？") or clause.endswith("吗")),
        "near_person": float(_PEOPLE.search(clause) is not None),
        "in_last_third": float(at >= len(text) * 2 / 3),
        # the clause runs on past the value: its edge may be wrong
        "clause_after": min(len(text[stop:end].strip()), 20) / 20,
        "repair_after": float(_REPAIR_AFTER.search(text[stop : stop + 40]) is not None),
    }
    if VOCABULARY.get(fact.key) is not None and VOCABULARY[fact.key].kind == "list":
        x["more_items_after"] = float(_MORE_ITEMS.search(text[stop:]) is not None)
    return x


# Words each key's values are made of: a value built of them is a value of its kind.
_OWN_KIND: dict[str, re.Pattern[str]] = {
    "occupation": re.compile(rf"(?:{OCCUPATION_ZH})|(?i:\b(?:{OCCUPATION_EN})s?\b)"),
    "pets": re.compile(rf"(?:{ANIMAL_HEADS_ZH})|(?:{BREEDS_ZH})|(?i:\b(?:{ANIMALS_EN})s?\b)"),
    "family": re.compile(rf"(?:{KIN_ZH})|(?i:\b(?:{KIN_EN})\b)"),
    "diet": re.compile(rf"(?:{DIET_WORDS_ZH})|(?i:{DIETS_EN})"),
}


def _own_kind(fact: Fact) -> dict[str, float]:
    """Whether the value is a word of its kind: a city the gazetteer knows (or a
    capitalised name), a job, an animal, a relative, a diet the lexicons name."""
    items = (
        _strings(fact.value)
        if fact.key not in ("pets", "family")
        else [str(v) for v in (fact.value if isinstance(fact.value, list) else [fact.value])]
    )
    if not items:
        return {}
    if fact.key == "city":
        known = [
            i
            for i in items
            if i in gazetteer() or re.fullmatch(r"[A-Z][\w'.-]*(?:\s+[A-Z][\w'.-]*)*", i)
        ]
        return {"own_kind": len(known) / len(items)}
    pattern = _OWN_KIND.get(fact.key)
    if pattern is None:
        return {}
    return {"own_kind": sum(pattern.search(i) is not None for i in items) / len(items)}


def _ambiguity(fact: Fact, msg: MessageSignals) -> dict[str, float]:
    """How many other words of the fact's kind the message holds (two cities, three
    amounts): the more, the easier to have taken the wrong one."""
    pattern = _KIND_WORDS.get(fact.key)
    if pattern is None:
        return {}
    return {"same_kind_words": min(len(pattern.findall(msg.text)), 5) / 5}


def features(
    fact: Fact, msg: MessageSignals, known: Mapping[str, Any], n_facts: int
) -> dict[str, float]:
    """The model's inputs for one fact of one message (names → values)."""
    x = {f"msg_{k}": v for k, v in msg.flags.items()}
    key = fact.key if fact.key in VOCABULARY else "other"
    x[f"key_{key}"] = 1.0
    base = min(_BASES, key=lambda b: abs(b - fact.confidence))
    x[f"base_{base}"] = 1.0
    x["override"] = float(fact.override)
    x["supersedes"] = float(fact.supersedes is not None)
    items = _strings(fact.value)
    written = [i for i in items if i.casefold() in msg.text.casefold()]
    x["written"] = len(written) / len(items) if items else 1.0
    x["value_chars"] = math.log1p(sum(map(len, items))) / 4 if items else 0.0
    x["list_items"] = min(len(fact.value), 5) / 5 if isinstance(fact.value, list) else 0.0
    x["known_key"] = float(fact.key in known)
    x["restated"] = float(fact.key in known and same_value(known[fact.key], fact.value))
    x["n_facts"] = min(n_facts, 6) / 6
    x |= _position(fact, msg)
    x |= _ambiguity(fact, msg)
    x |= _own_kind(fact)
    return x


@dataclass(frozen=True)
class Model:
    """A logistic model: P(right) = sigmoid(bias + Σ weight·feature)."""

    weights: Mapping[str, float]
    bias: float

    def probability(self, x: Mapping[str, float]) -> float:
        z = self.bias + sum(self.weights.get(name, 0.0) * v for name, v in x.items())
        return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))


@cache
def shipped_model() -> Model | None:
    """The model in the package data, or None if there is none (rule priors stand)."""
    path = files("memstack").joinpath("data", "fact_confidence.json")
    if not path.is_file():
        return None
    data = json.loads(path.read_text("utf-8"))
    return Model(weights=dict(data["weights"]), bias=float(data["bias"]))


def calibrated(
    facts: Sequence[Fact], text: str, known: Mapping[str, Any], model: Model | None = None
) -> list[Fact]:
    """``facts`` with each stated value's confidence replaced by the probability that it
    is right (rounded to 0.01, at most ``MAX_READ``) under ``model`` (default: the
    shipped one); withdrawals unchanged."""
    model = model or shipped_model()
    if model is None or not facts:
        return list(facts)
    msg = message_signals(text)
    out = []
    for fact in facts:
        if fact.retracts:
            out.append(fact)
            continue
        p = model.probability(features(fact, msg, known, len(facts)))
        # 1.0 is what a person's confirmation gives; a reading is never quite that sure
        out.append(fact.model_copy(update={"confidence": min(round(p, 2), MAX_READ)}))
    return out
