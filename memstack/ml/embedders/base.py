"""What every embedder is, and what they share: the :class:`Embedder` protocol, L2
normalisation, the package's logger and the process-wide registry of loaded models."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

# One logger for the package, under the name the single embedders module had.
log = logging.getLogger("memstack.ml.embedders")


class Embedder(Protocol):
    """Turns texts into L2-normalised vectors, one per text, in one batched call."""

    # Read-only in the protocol so that a remote embedder may learn its dimension.
    @property
    def model_version(self) -> str: ...

    @property
    def dim(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors of search queries, in the space of :meth:`embed`; an embedder may
        trade a little precision for speed here, where a caller waits for each one."""
        ...


def l2_normalise(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:
        return [float(x) for x in vector]
    return [float(x) / norm for x in vector]


# Loading a model takes seconds and ~100 MB, so every Memory object of a process
# shares one instance per model folder (see minilm.py for the ONNX exports).
_models: dict[Path, Any] = {}
_models_lock = threading.Lock()


_T = TypeVar("_T")


def shared_model(folder: Path, load: Callable[[Path], _T]) -> _T:
    """The process's one model loaded from ``folder``, loaded by ``load`` on first use."""
    with _models_lock:
        model = _models.get(folder)
        if model is None:
            model = _models[folder] = load(folder)
        loaded: _T = model
        return loaded
