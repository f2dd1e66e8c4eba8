"""Helpers of the rule-extractor tests: messages fed in order, as ingest feeds them."""

from __future__ import annotations

from typing import Any

from memstack.core.facts.fact import Fact
from memstack.ingest.extraction import RulesExtractor

RULES = RulesExtractor()


def after(*messages: str, known: dict[str, Any] | None = None) -> dict[str, Any]:
    """The user's current facts after ``messages``, retractions applied: each message
    sees the facts the earlier ones left."""
    current = dict(known or {})
    for text in messages:
        for fact in RULES.extract_sync(text, known=current):
            if fact.retracts:
                current.pop(fact.key, None)
            else:
                current[fact.key] = fact.value
    return current


def facts_of(text: str, known: dict[str, Any] | None = None) -> dict[str, Fact]:
    return {f.key: f for f in RULES.extract_sync(text, known=known)}


def money(amount: int, currency: str) -> dict[str, Any]:
    return {"amount": amount, "currency": currency}
