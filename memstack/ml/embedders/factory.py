"""Choosing an embedder from settings, and the few calls that depend on which it is."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from memstack.core.errors import ConfigError
from memstack.ml.embedders.base import Embedder
from memstack.ml.embedders.bge import BgeSmallEmbedder
from memstack.ml.embedders.e5 import E5SmallEmbedder
from memstack.ml.embedders.hashing import HashingEmbedder
from memstack.ml.embedders.minilm import MiniLMEmbedder
from memstack.ml.embedders.openai_compat import OpenAIEmbedder

if TYPE_CHECKING:
    from memstack.core.settings import Settings


def build_embedder(settings: Settings) -> Embedder:
    """The embedder named by ``settings.embedder``; nothing is loaded or contacted yet.

    ``auto`` is resolved against the deployment when memory opens; here, with no
    deployment to ask, it is the default for a new one."""
    if settings.embedder in ("auto", "e5-small"):
        return E5SmallEmbedder()
    if settings.embedder == "minilm":
        return MiniLMEmbedder(
            runtime=settings.minilm_runtime, query_int8=settings.minilm_query_int8
        )
    if settings.embedder == "bge-small":
        return BgeSmallEmbedder()
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


async def prepare_queries(embedder: Embedder) -> None:
    """Have the embedder's query model ready now (MiniLM's int8 copy, made if need be),
    for a process that serves queries from its start or must embed all of them alike."""
    if isinstance(embedder, MiniLMEmbedder | BgeSmallEmbedder | E5SmallEmbedder):
        await asyncio.to_thread(embedder.prepare_queries)


async def resolve_dim(embedder: Embedder) -> int:
    """The embedder's dimension, asking a remote endpoint once if it has not answered yet."""
    if isinstance(embedder, OpenAIEmbedder):
        return await embedder.probe()
    return embedder.dim
