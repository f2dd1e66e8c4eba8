"""What a recalled snippet may say: near-duplicates, superseded values, long messages.

A snippet that repeats a better one wastes budget, and one that
carries a value the user has since changed ("budget 5000" after it became 8000) puts
the old value back in front of the model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from memstack.core.facts.vocabulary import NUMBER_PATTERN, VOCABULARY, parse_number
from memstack.text.chunking import split_semantic
from memstack.text.terms import lexical_terms


def char_bigrams(text: str) -> set[str]:
    # Bigrams, not single characters: two English sentences share most of the alphabet,
    # so a character-set Jaccard would call nearly everything a duplicate.
    norm = re.sub(r"\s+", " ", text.casefold()).strip()
    if len(norm) < 2:
        return {norm} if norm else set()
    return {norm[i : i + 2] for i in range(len(norm) - 1)}


def jaccard(a: set[str], b: set[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


_NUMBER = re.compile(NUMBER_PATTERN)


def _numbers(text: str) -> set[float]:
    found = set()
    for tok in _NUMBER.findall(text):
        n = parse_number(tok)
        if n is not None:
            found.add(float(n))
    return found


def contains_word(text: str, word: str) -> bool:
    """``word`` in lower-cased ``text`` as a whole word (Latin) or a substring (CJK)."""
    w = word.strip().casefold()
    if len(w) < 2:
        return False
    if w.isascii():
        return re.search(rf"(?<![a-z0-9]){re.escape(w)}(?![a-z0-9])", text) is not None
    return w in text


def stale_key(
    text: str, superseded: Mapping[str, Sequence[Any]], current: Mapping[str, Any]
) -> str | None:
    """The fact key whose superseded value ``text`` repeats, if any.

    "预算不超过五千" after the budget became 8000 is stale: recalled, it would put 5000
    back in front of the model. Amounts match as numbers (五千 = 5,000 = 5k); text and
    list values match as words. Only values that differ from the current one count.
    """
    low = text.casefold()
    nums: set[float] | None = None
    for key, olds in superseded.items():
        now_value = current.get(key)
        spec = VOCABULARY.get(key)
        for old in olds:
            if isinstance(old, Mapping) and "amount" in old:
                try:
                    amount = float(old["amount"])
                except (TypeError, ValueError):
                    continue
                now_amount = now_value.get("amount") if isinstance(now_value, Mapping) else None
                # Small numbers ("3 days") say nothing about a budget of 3.
                if amount < 10 or now_amount == old["amount"]:
                    continue
                if nums is None:
                    nums = _numbers(text)
                if amount in nums:
                    return key
            elif isinstance(old, list):
                still = (
                    {str(v).casefold() for v in now_value} if isinstance(now_value, list) else set()
                )
                for item in old:
                    if str(item).casefold() not in still and contains_word(low, str(item)):
                        return key
            elif isinstance(old, str) and (spec is None or spec.kind != "money"):
                if isinstance(now_value, str) and now_value.casefold() == old.casefold():
                    continue
                if contains_word(low, old):
                    return key
    return None


# A sentence ends at Chinese 。！？； or English .!? before a space, or at a line break.
_SENTENCE_END = re.compile(r"[。！？；…]+[”’」』）)\]]*\s*|[.!?]+[\"')\]]*\s+|\n+")


def sentences(text: str) -> list[tuple[int, int]]:
    """Spans of ``text``'s sentences, covering it end to end."""
    spans = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        if match.end() > start:
            spans.append((start, match.end()))
            start = match.end()
    if start < len(text):
        spans.append((start, len(text)))
    return spans


# Values whose change makes an old statement of them wrong: an amount, a city, a name,
# a language, a date. An item that left a list of likes or concerns is not: "I like jazz" stays
# true of its time, and list items are short words a long message contains by chance.
TRUSTED_KINDS = frozenset({"money", "text", "language", "date"})


def stale_statements(
    text: str, superseded: Mapping[str, Sequence[Any]], current: Mapping[str, Any]
) -> list[tuple[int, int, str]]:
    """The sentences of ``text`` that repeat a superseded value of a trusted kind, as
    (start, end, key): only they are outdated, not the message around them ("I live in
    Berlin and I'm vegetarian" stays evidence of the diet after a move)."""
    trusted = {
        k: v
        for k, v in superseded.items()
        if (spec := VOCABULARY.get(k)) is not None and spec.kind in TRUSTED_KINDS
    }
    if not trusted:
        return []
    out = []
    for start, end in sentences(text):
        key = stale_key(text[start:end], trusted, current)
        if key is not None:
            out.append((start, end, key))
    return out


def other_terms(text: str, keys: Sequence[str], superseded: Mapping[str, Sequence[Any]]) -> int:
    """How many lexical terms of ``text`` say something besides the superseded values of
    ``keys``: not a number, not one of those values, not a word naming those facts.
    "我预算不超过五千" has two ("不", "超过"); "I'm Bob and a strict vegetarian in Berlin"
    has four."""
    drop: set[str] = set()
    for key in keys:
        spec = VOCABULARY.get(key)
        if spec is not None:
            for word in (key, *spec.synonyms):
                drop.update(lexical_terms(word.replace("_", " ")))
        for old in superseded.get(key, ()):
            items = old if isinstance(old, list) else [old] if isinstance(old, str) else []
            for item in items:
                drop.update(lexical_terms(str(item)))
    return sum(
        1
        for t in lexical_terms(text)
        if t not in drop and not t.isdigit() and parse_number(t) is None
    )


def excerpt(content: str, weights: Mapping[str, float], limit_chars: int) -> str:
    """The message, or for a long one its piece sharing most query terms (best chunk)."""
    if len(content) <= limit_chars:
        return content.strip()
    pieces = split_semantic(content, split_chars=limit_chars, merge_chars=0)
    if not pieces:
        return content[:limit_chars]

    def overlap(piece: str) -> float:
        terms = set(lexical_terms(piece))
        return sum(w for t, w in weights.items() if t in terms)

    return max(pieces, key=lambda p: (overlap(p), -pieces.index(p)))
