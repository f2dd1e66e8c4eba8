"""Fact extraction: offline rules by default, an OpenAI-compatible LLM when configured.

Both pass their output through :mod:`memstack.core.facts.vocabulary`, so the keys and
value shapes documented in docs/facts.md hold whichever extractor runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memstack.core.facts.checks import check_fact_key, check_fact_value
from memstack.core.facts.fact import (
    BatchMessage,
    Extractor,
    Fact,
    FactSource,
    FactType,
    PreparedBatch,
    prepare_batch,
)
from memstack.core.facts.vocabulary import VOCABULARY, canonical_key, normalise_fact
from memstack.ingest.extraction.llm import LLMExtractor
from memstack.ingest.extraction.rules import RulesExtractor
from memstack.ml.chat import ChatJSON, LLMStats

if TYPE_CHECKING:
    from memstack.core.settings import Settings


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
