"""The checks every fact passes before it is stored, whoever produced it.

A fact key ends up in a SQL column of 128 characters, in vector ids
(``msg_id#fact-<key>``) and in prompts; a fact value is read back on every
``context()`` and rendered, compared and sent to the LLM. So a key is a canonical key of
the vocabulary or a safe id (:func:`memstack.core.ids.validate_id`), and a value is plain
JSON of bounded size and depth without NUL or lone surrogates
(:func:`memstack.core.inputs.check_json`). An extractor drops what fails; the fact store
refuses it (:func:`memstack.stores.sql.facts.write_fact`).
"""

from __future__ import annotations

from memstack.core.errors import InvalidContent, ValidationError
from memstack.core.facts.vocabulary import VOCABULARY, canonical_key
from memstack.core.ids import validate_id
from memstack.core.inputs import check_json, check_text

# Fact values are records (an amount, a list of short strings), never trees.
FACT_VALUE_MAX_DEPTH = 8
# settings.max_fact_value_bytes' default, for callers that have no settings at hand.
DEFAULT_MAX_VALUE_BYTES = 2048
# A raw key longer than this is not canonicalised at all (it cannot become a valid key).
_MAX_RAW_KEY_CHARS = 512


def check_fact_key(key: object) -> str:
    """``key`` canonicalised (synonyms, case, spaces): a key of the vocabulary, or a safe
    id of at most 128 characters; else :class:`ValidationError`."""
    if not isinstance(key, str):
        raise InvalidContent(f"fact key must be a string, got {type(key).__name__}")
    if len(key) > _MAX_RAW_KEY_CHARS:
        raise InvalidContent(f"fact key is {len(key)} characters long; the limit is 128")
    check_text("fact key", key)
    canonical = canonical_key(key)
    if canonical in VOCABULARY:
        return canonical
    return validate_id("fact key", canonical)


def check_fact_value(
    value: object, *, max_bytes: int = DEFAULT_MAX_VALUE_BYTES, kind: str = "fact value"
) -> None:
    """:class:`InvalidContent` unless ``value`` is plain JSON within ``max_bytes`` (UTF-8
    of its JSON) and :data:`FACT_VALUE_MAX_DEPTH` levels, without NUL or lone surrogates."""
    try:
        check_json(kind, value, max_bytes=max_bytes, max_depth=FACT_VALUE_MAX_DEPTH)
    except InvalidContent:
        raise
    except ValueError as exc:  # an integer too long for str(): Python refuses it
        raise InvalidContent(f"{kind} cannot be written as JSON: {str(exc)[:100]}") from None


def fact_problem(key: object, value: object, *, max_bytes: int) -> tuple[str, str] | None:
    """``(field, reason)`` of the first check a stored fact fails (field is "key" or
    "value"), or None when it passes them all. The key is taken as it is, not
    canonicalised: it must be a safe id, as every canonical key of the vocabulary is."""
    try:
        validate_id("fact key", key)
    except ValidationError as exc:
        return "key", str(exc)
    try:
        check_fact_value(value, max_bytes=max_bytes)
    except ValidationError as exc:
        return "value", str(exc)
    return None
