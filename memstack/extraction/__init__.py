"""Fact extraction: offline rules by default, an OpenAI-compatible LLM when configured.

Both pass their output through :mod:`memstack.extraction.vocabulary`, so the keys and
value shapes documented in docs/facts.md hold whichever extractor runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstack.extraction.base import Extractor, Fact, FactSource, FactType
from memstack.extraction.llm import ChatJSON, LLMExtractor, LLMStats
from memstack.extraction.rules import RulesExtractor
from memstack.extraction.vocabulary import VOCABULARY, canonical_key, normalise_fact

if TYPE_CHECKING:
    from memstack.settings import Settings


def build_extractor(settings: Settings) -> Extractor:
    """The extractor ``settings.extractor`` names; the LLM one needs ``llm_url``."""
    if settings.extractor == "llm" and settings.llm_url:
        return LLMExtractor.from_settings(settings)
    return RulesExtractor()


__all__ = [
    "VOCABULARY",
    "ChatJSON",
    "Extractor",
    "Fact",
    "FactSource",
    "FactType",
    "LLMExtractor",
    "LLMStats",
    "RulesExtractor",
    "build_extractor",
    "canonical_key",
    "normalise_fact",
]
