"""Fact extraction: offline rules by default, an OpenAI-compatible LLM when configured.

Both pass their output through :mod:`memstack.extraction.vocabulary`, so the keys and
value shapes documented in docs/facts.md hold whichever extractor runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstack.extraction.base import (
    BatchMessage,
    Extractor,
    Fact,
    FactSource,
    FactType,
    PreparedBatch,
    prepare_batch,
)
from memstack.extraction.chat import ChatJSON, LLMStats
from memstack.extraction.checks import check_fact_key, check_fact_value
from memstack.extraction.llm import LLMExtractor
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
    "BatchMessage",
    "ChatJSON",
    "Extractor",
    "Fact",
    "FactSource",
    "FactType",
    "LLMExtractor",
    "LLMStats",
    "PreparedBatch",
    "RulesExtractor",
    "build_extractor",
    "canonical_key",
    "check_fact_key",
    "check_fact_value",
    "normalise_fact",
    "prepare_batch",
]
