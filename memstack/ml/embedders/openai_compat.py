"""Any OpenAI-compatible ``/v1/embeddings`` endpoint."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memstack.core.errors import ConfigError, StoreError, StoreUnavailable
from memstack.ml.embedders.base import l2_normalise


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
                f"embeddings endpoint {self._base_url} failed for {self.model}: {exc}",
                layer="embedder",
            ) from exc
        # The spec lets servers return items out of order; `index` says where each goes.
        items = sorted(response.data, key=lambda item: item.index)
        if len(items) != len(texts):
            raise StoreError(
                f"embeddings endpoint {self._base_url} returned {len(items)} vectors "
                f"for {len(texts)} texts",
                layer="embedder",
            )
        vectors = [l2_normalise(item.embedding) for item in items]
        dims = {len(v) for v in vectors}
        if len(dims) != 1 or (self._dim is not None and dims != {self._dim}):
            raise StoreError(
                f"embeddings endpoint {self._base_url} returned dimensions {sorted(dims)}, "
                f"expected {self._dim or 'one dimension'}",
                layer="embedder",
            )
        self._dim = dims.pop()
        return vectors

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return await self.embed(texts)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
