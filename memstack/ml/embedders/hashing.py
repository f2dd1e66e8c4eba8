"""Feature hashing: a model-free embedder, for tests and demos only."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence

from memstack.core.errors import ConfigError
from memstack.ml.embedders.base import l2_normalise

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f"
# CJK runs first: they have no spaces, so a "word" there would be a whole clause.
_TOKEN_RE = re.compile(rf"(?P<cjk>[{_CJK}]+)|(?P<word>(?:(?![{_CJK}])[^\W_])+)")


def _features(text: str) -> dict[str, float]:
    """Weighted features: words and their character trigrams; CJK characters and bigrams."""
    norm = unicodedata.normalize("NFKC", text).lower()
    feats: dict[str, float] = {}

    def add(key: str, weight: float) -> None:
        feats[key] = feats.get(key, 0.0) + weight

    for match in _TOKEN_RE.finditer(norm):
        if run := match.group("cjk"):
            for i, ch in enumerate(run):
                add("c:" + ch, 1.0)
                if i + 1 < len(run):
                    add("b:" + run[i : i + 2], 1.0)
        else:
            word = match.group("word")
            add("w:" + word, 1.0)
            # Trigrams make "budget"/"budgets" close, so similar texts stay similar.
            padded = f"<{word}>"
            for i in range(len(padded) - 2):
                add("g:" + padded[i : i + 3], 0.5)
    if not feats:
        # An empty or punctuation-only text still gets a unit vector, never NaNs.
        add("empty:" + norm.strip(), 1.0)
    return feats


class HashingEmbedder:
    """Deterministic signed feature hashing: no model, microseconds per text.

    Only for tests and demos: it measures shared words and character n-grams, not
    meaning. It is never chosen unless ``embedder=hashing`` is set.
    """

    def __init__(self, dim: int = 384) -> None:
        if dim <= 0:
            raise ConfigError(f"hashing embedder dimension must be positive, got {dim}")
        self.dim = dim
        self.model_version = f"hashing-v1-{dim}"

    def embed_one(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for key, weight in _features(text).items():
            digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            # The sign bit keeps colliding features from always adding up.
            sign = 1.0 if value & 1 else -1.0
            vector[(value >> 1) % self.dim] += sign * weight
        return l2_normalise(vector)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed_one(t) for t in texts]

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return await self.embed(texts)
