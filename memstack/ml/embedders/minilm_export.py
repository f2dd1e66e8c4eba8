"""all-MiniLM-L6-v2 exported to ONNX, once per machine, into a cache folder.

The graph is the transformer alone; mean pooling and normalisation are a few numpy
lines. Once the export is cached, embedding needs neither torch nor
sentence-transformers, so a process starts without importing them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memstack.core.errors import MemstackError, ModelUnavailable
from memstack.ml.embedders.base import log
from memstack.ml.embedders.minilm_model import (
    _TORCH_WAY_OUT,
    MINILM_VERSION,
    _new_sentence_transformer,
)
from memstack.ml.embedders.onnx import _ONNX_INPUTS, _ONNX_OUTPUT, _OnnxEncoder, onnx_session

if TYPE_CHECKING:
    from tokenizers import Tokenizer


_ONNX_OPSET = 17
# Part of the cache key: bump it when the export writes a different graph, so that no
# process reuses a file written by older code.
_ONNX_EXPORT_FORMAT = 1
# An export is published only if it reproduces sentence-transformers on these: stored
# vectors came from either runtime and must stay comparable. The last one is longer than
# max_seq_length, so truncation is checked too.
_EXPORT_PROBES = (
    "How much money can I spend on the new laptop?",
    "我预算不超过五千，其实可以到八千。",
    "ok",
    "The user plans a long trip through Portugal and keeps adding details to it. " * 30,
)
_EXPORT_MIN_COSINE = 0.9999


def default_model_cache() -> Path:
    """Folder of the ONNX export: ``$XDG_CACHE_HOME/memstack``, else ``~/.cache/memstack``.

    Per user rather than under ``settings.home``: the export depends only on the installed
    model and libraries, so every project of the user can share one 90 MB file.
    """
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "memstack"


def onnx_export_path(model_dir: Path, cache_dir: Path) -> Path:
    """Cache file of the ONNX export of ``model_dir``.

    Its name carries a key of the model files and of the libraries that write the graph,
    so a changed model or exporter gets a fresh export instead of a stale file.
    """
    from importlib import metadata

    parts = [f"format {_ONNX_EXPORT_FORMAT} opset {_ONNX_OPSET}"]
    for dist in ("torch", "transformers", "sentence-transformers", "onnx"):
        try:
            parts.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist} missing")
    # Size and mtime stand for the content: hashing the 90 MB of weights would add
    # ~0.3 s to every process start, and a reinstalled model gets new mtimes anyway.
    for file in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        stat = file.stat()
        parts.append(f"{file.relative_to(model_dir).as_posix()} {stat.st_size} {stat.st_mtime_ns}")
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return cache_dir / f"{MINILM_VERSION}-{key}.onnx"


def _hidden_state_module(reference: Any) -> Any:
    """The transformer of a SentenceTransformer, as a module that returns only the
    token vectors: the one output pooling needs, under the input names we feed."""
    import torch

    class LastHiddenState(torch.nn.Module):
        def __init__(self, bert: Any) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            output = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            )
            return output.last_hidden_state

    return LastHiddenState(reference[0].auto_model.eval())


def _check_export(path: Path, tokenizer: Tokenizer, reference: Any) -> None:
    probes = list(_EXPORT_PROBES)
    expected = reference.encode(
        probes, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
    )
    got = _OnnxEncoder(onnx_session(path), tokenizer).encode(probes, batch_size=len(probes))
    worst = float((expected * got).sum(axis=1).min())
    if not worst >= _EXPORT_MIN_COSINE:  # `not >=` so that NaN fails too
        raise ModelUnavailable(
            f"it does not reproduce sentence-transformers (cosine {worst:.6f}), so it was "
            "not cached"
        )


def _remove_stale_exports(path: Path) -> None:
    # A process killed mid-export leaves its temporary file behind; one older than any
    # export takes is garbage, and a crash-looping service would otherwise fill the disk.
    cutoff = time.time() - 3600
    for stale in path.parent.glob(f".{path.stem}.*.tmp"):
        with contextlib.suppress(OSError):
            if stale.stat().st_mtime < cutoff:
                stale.unlink()


def _temp_beside(path: Path) -> Path:
    """A new temporary file in ``path``'s folder, to be published with :func:`_publish`."""
    _remove_stale_exports(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(name)


def _publish(tmp: Path, path: Path) -> None:
    """Rename a complete ``tmp`` to ``path``: a process that starts meanwhile sees either
    no file or a complete one."""
    # On disk before the rename: after a crash the name never points at a hole.
    with tmp.open("rb+") as f:
        os.fsync(f.fileno())
    tmp.chmod(0o644)  # mkstemp makes it private; it is a public model
    os.replace(tmp, path)


def _export_onnx(model_dir: Path, path: Path, tokenizer: Tokenizer) -> None:
    """Export the model's transformer to ``path``, check it, then publish it atomically.

    It is written to a temporary file and renamed into place, so a process that starts
    meanwhile sees either no file or a complete one; two processes exporting at once
    each rename a complete file.
    """
    log.info("exporting %s to ONNX at %s (once; takes a few seconds)", MINILM_VERSION, path)
    tmp: Path | None = None
    try:
        import onnx  # noqa: F401  # torch.onnx.export needs it: fail here, naming it
        import torch

        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _temp_beside(path)
        reference = _new_sentence_transformer(model_dir)
        # Two texts of different lengths, so the traced graph has padding in it; the
        # dynamic axes then let it take any batch size and length.
        encodings = tokenizer.encode_batch(list(_EXPORT_PROBES[:2]))
        sample = tuple(
            torch.tensor([getattr(e, field) for e in encodings], dtype=torch.int64)
            for field in ("ids", "attention_mask", "type_ids")
        )
        with warnings.catch_warnings():
            # The TorchScript exporter warns that it is deprecated and that a few shape
            # tests are traced as constants; none matters for this encoder, and the check
            # below, on every export, is what decides whether the graph is right.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                _hidden_state_module(reference),
                sample,
                str(tmp),
                input_names=list(_ONNX_INPUTS),
                output_names=[_ONNX_OUTPUT],
                dynamic_axes={n: {0: "batch", 1: "tokens"} for n in (*_ONNX_INPUTS, _ONNX_OUTPUT)},
                opset_version=_ONNX_OPSET,
                dynamo=False,
            )
        _check_export(tmp, tokenizer, reference)
        _publish(tmp, path)
        tmp = None
    except Exception as exc:
        detail = str(exc) if isinstance(exc, MemstackError) else f"{type(exc).__name__}: {exc}"
        raise ModelUnavailable(
            f"exporting {MINILM_VERSION} to ONNX at {path} failed ({detail}); {_TORCH_WAY_OUT}"
        ) from exc
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
