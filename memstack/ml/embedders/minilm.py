"""all-MiniLM-L6-v2 on CPU, offline, through ONNX Runtime (the export and its int8
query copy, made and cached on first use) or torch."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memstack.core.errors import ConfigError, ModelUnavailable
from memstack.ml.embedders.base import _models_lock, log
from memstack.ml.embedders.minilm_export import _export_onnx, default_model_cache, onnx_export_path
from memstack.ml.embedders.minilm_int8 import _quantize_onnx, onnx_query_path
from memstack.ml.embedders.minilm_model import (
    _TORCH_WAY_OUT,
    MINILM_DIM,
    MINILM_VERSION,
    MiniLMRuntime,
    _load_sentence_transformer,
    minilm_model_dir,
)
from memstack.ml.embedders.onnx import _OnnxEncoder, bert_tokenizer, onnx_session

# One ONNX model per model folder, cache folder and precision (see base._models).
_onnx_models: dict[tuple[Path, Path, bool], _OnnxEncoder] = {}
# (model folder, cache folder) whose int8 query copy a background thread is making.
_query_copies_started: set[tuple[Path, Path]] = set()


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _minilm_max_seq_length(model_dir: Path) -> int:
    """Token limit of the model, after checking the ONNX path can reproduce the folder.

    It implements what this model does (transformer, mean pooling, normalisation); a
    folder that asks for anything else is refused rather than embedded differently.
    """
    try:
        modules = _read_json(model_dir / "modules.json")
        kinds = [str(m["type"]).rsplit(".", 1)[-1] for m in modules]
        pooling = _read_json(model_dir / modules[1]["path"] / "config.json")
        st_config = _read_json(model_dir / "sentence_bert_config.json")
        config = _read_json(model_dir / "config.json")
        # sentence-transformers caps max_seq_length by the position table the same way.
        max_length = min(int(st_config["max_seq_length"]), int(config["max_position_embeddings"]))
    except (OSError, ValueError, LookupError, TypeError) as exc:
        raise ModelUnavailable(
            f"{model_dir} is not a readable sentence-transformers model folder: {exc}"
        ) from exc
    modes = {k for k, v in pooling.items() if k.startswith("pooling_mode_") and v}
    if (
        kinds != ["Transformer", "Pooling", "Normalize"]
        or modes != {"pooling_mode_mean_tokens"}
        or st_config.get("do_lower_case")
    ):
        raise ModelUnavailable(
            f"{model_dir} is not a mean-pooled, normalised transformer ({kinds}, {sorted(modes)}),"
            f" the only kind the ONNX runtime reproduces; {_TORCH_WAY_OUT}"
        )
    return max_length


def _open_onnx_minilm(model_dir: Path, cache_dir: Path, int8: bool) -> _OnnxEncoder:
    max_length = _minilm_max_seq_length(model_dir)
    tokenizer = bert_tokenizer(model_dir, max_length)
    try:
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        raise ModelUnavailable(f"onnxruntime is not installed; {_TORCH_WAY_OUT}") from exc
    path = onnx_export_path(model_dir, cache_dir)
    if int8:
        query_path = onnx_query_path(path)
        if query_path.exists():
            try:
                return _OnnxEncoder(onnx_session(query_path), tokenizer)
            except ModelUnavailable as exc:
                log.warning("%s; quantising it again", exc)
        # The float32 export first (from its cache, or exported now), then its copy.
        full = _open_onnx_minilm(model_dir, cache_dir, int8=False)
        try:
            _quantize_onnx(path, full, query_path, tokenizer)
            return _OnnxEncoder(onnx_session(query_path), tokenizer)
        except Exception as exc:
            # Slower queries, never failed ones: the float32 export answers them too.
            log.warning("queries use the float32 model: quantising it failed (%s)", exc)
            return full
    if path.exists():
        try:
            return _OnnxEncoder(onnx_session(path), tokenizer)
        except ModelUnavailable as exc:
            # Half a file (a disk that filled up, a copy cut short) must not stop
            # embedding for good: the export is deterministic, so write it again.
            log.warning("%s; exporting it again", exc)
    _export_onnx(model_dir, path, tokenizer)
    return _OnnxEncoder(onnx_session(path), tokenizer)


def _load_onnx_minilm(model_dir: Path, cache_dir: Path, int8: bool = False) -> _OnnxEncoder:
    with _models_lock:
        key = (model_dir, cache_dir, int8)
        model = _onnx_models.get(key)
        if model is None:
            model = _open_onnx_minilm(model_dir, cache_dir, int8)
            _onnx_models[key] = model
        return model


def _ready_query_model(model_dir: Path, cache_dir: Path) -> _OnnxEncoder | None:
    """The int8 query model if it is loaded or cached on disk; else None, and a
    background thread makes it (once per process): quantising takes seconds, more than
    a caller waiting for its query should pay, so queries use float32 until then."""
    with _models_lock:
        model = _onnx_models.get((model_dir, cache_dir, True))
        if model is not None:
            return model
    if onnx_query_path(onnx_export_path(model_dir, cache_dir)).exists():
        return _load_onnx_minilm(model_dir, cache_dir, int8=True)
    with _models_lock:
        if (model_dir, cache_dir) in _query_copies_started:
            return None
        _query_copies_started.add((model_dir, cache_dir))

    def make() -> None:
        try:
            # Not under _models_lock, which float32 queries need meanwhile.
            made = _open_onnx_minilm(model_dir, cache_dir, int8=True)
        except Exception as exc:
            log.warning("queries use the float32 model: %s", exc)
            return
        with _models_lock:
            _onnx_models.setdefault((model_dir, cache_dir, True), made)

    # Not a daemon: one killed at interpreter exit inside ONNX Runtime's C++ aborts the
    # whole process (exit 134). Exit waits for the copy instead (~4 s, once per machine).
    threading.Thread(target=make, name="memstack-int8-copy").start()
    return None


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 on CPU, without network, through ONNX Runtime or torch.

    The two runtimes give the same vectors (cosine > 0.9999), so they share one
    ``model_version`` and vectors stored by one are searched by the other.
    """

    model_version = MINILM_VERSION
    dim = MINILM_DIM
    batch_size = 64

    def __init__(
        self,
        model_dir: Path | None = None,
        *,
        runtime: MiniLMRuntime = "onnx",
        cache_dir: Path | None = None,
        query_int8: bool = True,
    ) -> None:
        if runtime not in ("onnx", "torch"):
            raise ConfigError(f"unknown MiniLM runtime {runtime!r}: onnx or torch")
        self.runtime = runtime
        self.query_int8 = query_int8
        self._model_dir = model_dir
        self._cache_dir = cache_dir

    def prepare_queries(self) -> None:
        """Load (making it if need be) the int8 query model now rather than in the
        background after the first query; a no-op unless it is in use."""
        if self.runtime == "onnx" and self.query_int8:
            model_dir = self._model_dir or minilm_model_dir()
            _load_onnx_minilm(model_dir, self._cache_dir or default_model_cache(), int8=True)

    def _encode(self, texts: list[str], query: bool = False) -> list[list[float]]:
        model_dir = self._model_dir or minilm_model_dir()
        if self.runtime == "onnx":
            cache_dir = self._cache_dir or default_model_cache()
            onnx_model = (
                query and self.query_int8 and _ready_query_model(model_dir, cache_dir)
            ) or _load_onnx_minilm(model_dir, cache_dir)
            vectors: list[list[float]] = onnx_model.encode(texts, self.batch_size).tolist()
            return vectors
        model = _load_sentence_transformer(model_dir)
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
        # Both runtimes release the GIL while they compute, but it is still milliseconds
        # to tens of milliseconds of CPU (seconds on first use): keep it off the event loop.
        return await asyncio.to_thread(self._encode, list(texts))

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """On ONNX Runtime with ``query_int8``, through the int8 copy of the model
        (cosine 0.99 to :meth:`embed`'s vectors for a sentence) once it is ready (see
        :func:`_ready_query_model`); else as :meth:`embed`."""
        if not texts:
            return []
        return await asyncio.to_thread(self._encode, list(texts), True)
